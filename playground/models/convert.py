"""The one-time GGUF -> safetensors conversion cache: written to a staging folder, marked complete, renamed."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from playground.models.paths import converted_dir

Progress = Callable[[float, str], None]
COMPLETE_MARKER = "playground-complete.json"


def no_progress(fraction: float, message: str) -> None:
    """The default Progress: report nothing."""


def is_complete(path: Path) -> bool:
    """A conversion counts only if its marker exists and every file it lists has the recorded size."""
    marker = path / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        sizes = json.loads(marker.read_text())["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all((path / name).is_file() and (path / name).stat().st_size == size for name, size in sizes.items())


def is_converted(name: str) -> bool:
    return is_complete(converted_dir() / name)


@contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Hold an OS lock beside `target`: a second process (another app, another test worker) waits for the
    first conversion instead of deleting the folder the first is about to load."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f".{target.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert_gguf(name: str, locate_gguf: Callable[[Progress], Path], progress: Progress) -> Path:
    """GGUF -> safetensors once; written to a temp dir and renamed, so a killed run never leaves a half copy.

    `locate_gguf` finds (or assembles) the GGUF file only when a conversion is needed.
    """
    target = converted_dir() / name
    if is_complete(target):
        return target
    with exclusive(target):
        if is_complete(target):  # another process converted it while this one waited
            return target
        _convert(target, locate_gguf(progress), progress)
    return target


def _convert(target: Path, gguf: Path, progress: Progress) -> None:
    """Load the GGUF through transformers, save it as safetensors in a staging folder, then rename it in."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from playground.models.gguf_parse import one_gguf_parse

    name = target.name
    progress(0.05, f"converting {name} from GGUF (first time only, about 5-20 s)")
    with one_gguf_parse():  # one parse where transformers made three; the plain array: Gemma3 28 s -> 22 s
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    progress(0.6, f"saving {name} as safetensors")
    # a GGUF-loaded model refuses save_pretrained: rebuild a plain one from its config and hand it the weights.
    # Built on the meta device, it allocates and initializes nothing the weights replace (Gemma3: 2.9 s of random
    # initialization); a saved tensor left out of the GGUF's weights would stay meta and fail the save
    config = AutoConfig.for_model(**{k: v for k, v in gguf_model.config.to_dict().items()
                                     if k not in ("quantization_config", "_name_or_path")})
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict(), strict=False, assign=True)
    plain.tie_weights()
    del gguf_model
    staging = target.with_name(f"{name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    sizes = {p.name: p.stat().st_size for p in staging.iterdir() if p.is_file()}
    (staging / COMPLETE_MARKER).write_text(json.dumps({"source": str(gguf), "sizes": sizes}))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    del plain
    gc.collect()


