"""torch.compile on the PyTorch path: the C++ compiler a CPU needs, and the compile done before the timed run.

transformers' generate compiles only its one-token decode step (the prefill runs eager), inside the first request
that decodes with a compile config: left there, the compile would land in the timed run, between the first token
and the second. `warm_up` runs that request's shapes first (its prompt, its cache's length, three new tokens, two
of them decode steps), so the compile is measured apart and reported as the run's `compile_s`, as the JAX path
reports its compiles; a later request with the same shapes compiles nothing and has nothing to warm up.

dynamo keeps at most `recompile_limit` compiled variants of one function and compiles no more (the step, compiled
with fullgraph, then fails; without it, it would run eager unsaid), and every transformers model's forward is one
function to it (the same decorator's wrapper), so every model, mode and cache length compiled in this process
counts against one limit. Before a warm-up that could pass it, dynamo's caches are cleared
(`torch.compiler.reset()`), so a column that asks for torch.compile always gets it.

Importing this module imports no torch (the runner asks `preflight` while the page starts).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from playground.backends.base import ReportProgress
from playground.backends.slow_stages import announced_if_slow
from playground.errors import PlaygroundError

if TYPE_CHECKING:
    import torch

    from playground.models.loaded import LoadedModel
    from playground.spec import RunSpec

# New tokens of the warm-up request: the first comes from the (eager) prefill, the others from two decode steps
# (the second compiles again where the first step's Python ints turn out to change: see GRAPHS_PER_WARM_UP)
WARM_UP_TOKENS = 3
TORCHAX_DEVICE = "jax"  # the name torchax gives torch's PrivateUse1 device


def cpp_compilers() -> tuple[str, ...]:
    """The C++ compilers inductor tries for CPU kernels, in order: its config's `cpp.cxx` where inductor is
    loaded already, else what that config starts from ($CXX, else g++)."""
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        names = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
        return tuple(name for name in names if name)
    return (os.environ.get("CXX") or "g++",)


def cpp_compiler() -> str | None:
    """The path of the first of those on PATH, or None."""
    return next((found for name in cpp_compilers() if (found := shutil.which(name))), None)


def compiler_refusal() -> str:
    return ("torch.compile on CPU needs a C++ compiler (inductor builds C++ kernels); none found on PATH "
            f"(looked for {', '.join(cpp_compilers())}; install one, or set CXX to the one you have)")


def on_cpu() -> bool:
    """Whether this process's torch models run on a CPU (the device module detects it once)."""
    from playground import device

    return device.current().kind == "cpu"


# model -> (the mode of its compiled call, the shapes warmed up for it): transformers keeps one compiled call per
# model and replaces it when the mode changes, so the shapes are those of the current mode only
_WARM: weakref.WeakKeyDictionary[Any, tuple[str, set[tuple[int, int]]]] = weakref.WeakKeyDictionary()
# graphs compiled since dynamo's caches were last cleared, and the most one warm-up compiles: the static step,
# then (on a model with sliding layers, whose cache counts its length in a Python int) the step with that int
# made dynamic, which dynamo does by itself when it sees the int change
_COMPILED_SINCE_RESET = [0]
GRAPHS_PER_WARM_UP = 2


@contextmanager
def torchax_out_of_sight() -> Iterator[None]:
    """Within the block, torch reports no accelerator where torchax's is the only one it knows.

    torchax (the JAX path's bridge) registers its "jax" device as torch's accelerator and says it is available;
    dynamo, as it starts tracing, then asks that accelerator for its current stream, which torchax cannot give
    ("PyTorch is not linked with support for jax devices"), so once a JAX column has run, no torch.compile could
    compile in the process. The torch path runs on the CPU or a CUDA GPU, never on that device. Steps compiled
    already run without asking, so only what may compile needs the block; the generation lock keeps the JAX path
    from running meanwhile."""
    import torch

    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != TORCHAX_DEVICE:
        yield
        return
    module = torch.get_device_module(TORCHAX_DEVICE)
    available = module.is_available
    module.is_available = lambda: False
    try:
        yield
    finally:
        module.is_available = available


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def warm_up(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec,
            progress: ReportProgress | None = None) -> float:
    """Compile the decode step for this request's shapes where it is not compiled yet: the seconds that took, 0
    when nothing compiled. Runs generate on the request's prompt with a cache of the request's length for
    WARM_UP_TOKENS tokens, unless these shapes were warmed up before."""
    import torch
    from torch._dynamo import config as dynamo_config
    from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException

    from playground.backends.torch.caches.factory import compiled_length

    if spec.max_new_tokens < 2:
        return 0.0  # the prefill's token alone: no decode step runs, so nothing compiles
    model, mode = loaded.model, spec.torch_compile
    length = compiled_length(input_ids.shape[1], spec.max_new_tokens)
    shape = (int(input_ids.shape[0]), length)
    known = _WARM.get(model)
    if known is not None and known[0] == mode and shape in known[1]:
        return 0.0
    if _COMPILED_SINCE_RESET[0] + GRAPHS_PER_WARM_UP > dynamo_config.recompile_limit:
        torch.compiler.reset()  # dynamo's caches cleared: past the limit it would compile no more
        _WARM.clear()
        _COMPILED_SINCE_RESET[0] = 0
    before, start = graphs_compiled(), time.perf_counter()
    with announced_if_slow(progress, f"torch.compile ({mode}): compiling the decode step for {length} cache "
                                     "positions (once per model, mode and length)",
                           "torch.compile: compiled the decode step in {seconds:.0f} s"):
        try:
            with torchax_out_of_sight():
                _generate_warm_up(loaded, input_ids, spec)
        except (TorchDynamoException, FailOnRecompileLimitHit) as exc:  # not one graph, a compiler that fails
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise PlaygroundError(f"torch_compile={mode!r} cannot run: torch.compile could not compile "
                                  f"{loaded.name}'s decode step ({reason}); set torch_compile to 'off'") from exc
    seconds, compiled = time.perf_counter() - start, graphs_compiled() - before
    _COMPILED_SINCE_RESET[0] += compiled
    known = _WARM.get(model)
    _WARM[model] = (mode, (known[1] if known is not None and known[0] == mode else set()) | {shape})
    return seconds if compiled else 0.0


def _generate_warm_up(loaded: LoadedModel, input_ids: torch.Tensor, spec: RunSpec) -> None:
    """The request's compiled generate, cut to WARM_UP_TOKENS new tokens (an EOS cannot end it sooner), over a
    cache built for the whole request (a token more than the request's own at most: the last one is never
    written to the cache)."""
    import torch

    from playground.backends.torch.caches.factory import make_cache
    from playground.backends.torch.config import generation_config

    tokens = min(WARM_UP_TOKENS, spec.max_new_tokens + 1)  # within the cache: prompt + max_new_tokens positions
    short = spec.replace(max_new_tokens=tokens, min_new_tokens=tokens)
    config = generation_config(short, loaded.model)
    cache = make_cache(spec, loaded.model, input_ids.shape[1])
    with torch.inference_mode():
        loaded.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config,
                              past_key_values=cache)
