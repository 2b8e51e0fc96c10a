"""Shared test helpers: tiny random-weight models built from a config, a byte-level tokenizer for them, and the
reference calls (PyTorch generate, the JAX decoder, the CLI) that several test modules compare against."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# The JAX compiler options of a tiny model's programs (tests/conftest.py says why), in the unit tests and in the
# scripts under tests/scripts that run tiny models in a fresh Python (tiny_programs_at_o0)
TINY_PROGRAM_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}


# the browser tests drive Debian's chromium (Playwright's own download does not work offline)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def in_fast_lane(config: pytest.Config) -> bool:
    """The run leaves `slow` tests out (scripts/test.sh --fast): its files weigh otherwise, and it may freeze
    what the full suite's bundled models leave to the collector."""
    return "not slow" in (config.getoption("markexpr") or "")


def fast_lane_keeps(cases: list, keep: int = 0) -> list:
    """A matrix whole for the full suite, with one representative case (index `keep`) in the fast lane: the others
    are marked `slow`. A tuple case holds one value per argument name; ids stay what the bare cases give."""
    return [case if index == keep else pytest.param(*(case if isinstance(case, tuple) else (case,)),
                                                    marks=pytest.mark.slow)
            for index, case in enumerate(cases)]


def tiny_programs_at_o0() -> None:
    """For a script's process: its tiny models' programs compile at LLVM -O0, as the unit tests' do."""
    from playground.backends.jax.engine import engine

    engine.COMPILER_OPTIONS.update(TINY_PROGRAM_OPTIONS)


def byte_tokenizer():
    """A real round-tripping tokenizer over 256 byte tokens + eos, built in memory (no hub, no files)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<eos>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<eos>")


def tiny_llama(seed: int = 0, **overrides):
    """A 2-layer Llama over the byte tokenizer's 257 tokens; `overrides` replace any config value."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    values = dict(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=4096, eos_token_id=256, pad_token_id=256,
                  bos_token_id=None)
    return LlamaForCausalLM(LlamaConfig(**{**values, **overrides})).eval()


def one_layer_llama(seed: int = 0, vocab_size: int = 257):
    """With one layer, K/V depend only on (token, position), so a from-scratch recompute is an exact reference."""
    return tiny_llama(seed, vocab_size=vocab_size, num_hidden_layers=1, eos_token_id=None, pad_token_id=None)


def tiny_gemma(seed: int = 0, sliding_window: int = 8):
    """Gemma3 layout in miniature: sliding layers (window 8) around one global layer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=sliding_window,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              max_position_embeddings=4096, eos_token_id=256, pad_token_id=256, bos_token_id=None)
    return Gemma3ForCausalLM(config).eval()


def tiny_loaded(name: str = "tiny-llama", model=None, instruct: bool = False):
    """A tiny model wrapped as the catalog hands models out, without going through a load."""
    from playground.models.loaded import LoadedModel

    return LoadedModel(name, "fp32", model if model is not None else tiny_llama(), byte_tokenizer(), 0.0, instruct)


def save_tiny_model(path: Path, seed: int = 0, chat_template: str | None = None) -> str:
    """A tiny Llama and its tokenizer saved as a local model folder, for tests that load by path; with
    `chat_template`, its tokenizer has that template."""
    tiny_llama(seed=seed).save_pretrained(path)
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(path)
    return str(path)


@contextmanager
def allowed_tiny_model(monkeypatch: pytest.MonkeyPatch, path: Path, seed: int = 0) -> Iterator[str]:
    """A tiny model saved where local models may load from; the LRU is emptied around its use."""
    from playground.models import loaded

    saved = save_tiny_model(path, seed)
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(path.parent))
    loaded.LOADED.clear()
    try:
        yield saved
    finally:
        loaded.LOADED.clear()


@contextmanager
def module_tiny_model(tmp_path_factory: pytest.TempPathFactory, seed: int = 0) -> Iterator[str]:
    """allowed_tiny_model for a module-scoped fixture, which cannot take the function-scoped monkeypatch."""
    with pytest.MonkeyPatch.context() as monkeypatch, \
            allowed_tiny_model(monkeypatch, tmp_path_factory.mktemp("model") / "tiny", seed) as path:
        yield path


def bundled(name: str):
    """A bundled model at fp32, loaded once per process."""
    from playground.models.loaded import LOADED

    return LOADED.get(name, "fp32")[0]


def encoded(loaded, text: str) -> torch.Tensor:
    """A prompt's ids (1, T) as the runner encodes it (the chat template for an instruct model)."""
    from playground.runner import encode_prompt

    return torch.tensor([encode_prompt(loaded, text, None)])


def torch_run(loaded, ids: torch.Tensor, spec, should_stop: Callable[[], bool] = lambda: False, draft=None):
    """The PyTorch path on `ids`, and the token ids it streamed; `draft` is the loaded assistant model, if any."""
    from playground.backends.torch import generate as torch_generate

    emitted: list[int] = []
    out = torch_generate.generate(loaded, ids, spec, emitted.extend, should_stop, draft)
    return out, emitted


def jax_run(loaded, ids: torch.Tensor | list[int], spec, should_stop: Callable[[], bool] = lambda: False,
            draft=None):
    """The JAX backend on `ids` ((1, T), or the plain ids it takes) as the runner calls it (with `draft`, the
    draft model), and the chunks of token ids it streamed."""
    from playground.backends.jax.backend import JaxBackend

    chunks: list[list[int]] = []
    prompt = ids if isinstance(ids, list) else ids[0].tolist()
    out = JaxBackend().generate(loaded, prompt, spec, chunks.append, should_stop, draft=draft)
    return out, chunks


def new_device_bytes(engine, model) -> int:
    """What a JAX engine really allocated: its distinct arrays that do not alias one of the model's tensors."""
    torch_ptrs = {t.data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    arrays = {id(a): a for a in engine.weights.values()}.values()
    total = 0
    for array in arrays:
        shards = array.addressable_shards
        if len(shards) == 1 and array.unsafe_buffer_pointer() in torch_ptrs:
            continue
        total += sum(s.data.nbytes for s in shards)
    return total


def torch_greedy(model, ids: torch.Tensor, new: int, cache: str, **kwargs) -> list[int]:
    """Exactly `new` greedy tokens from transformers' own generate: the reference the decoders must match."""
    from playground.backends.torch.reference import reference_greedy

    return reference_greedy(model, ids, new, cache, **kwargs)


def run_module(name: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m tests.scripts.NAME` in a fresh Python from the repo root, its output captured as text."""
    return subprocess.run([sys.executable, "-m", f"tests.scripts.{name}"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def run_script(name: str, env: dict[str, str]) -> dict:
    """Run tests/scripts/NAME.py in a fresh Python; it prints one JSON object as its last line."""
    done = run_module(name, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m playground ARGS` from the repo root, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "playground", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def torch_teacher_forced(loaded, spec, ids: torch.Tensor, forced: list[int]) -> torch.Tensor:
    """Log-probabilities (len(forced), V) of the token after the prompt and after each forced token but the
    last, with the PyTorch path's cache for `spec`. The decoder steps through the tokens one at a time (the cache
    sees what decoding would write) and the head runs once over all the hidden states: one many-row product reads
    its weights once (Gemma3's 262k-token head is most of a step). For the models it is used with, whose forward
    does nothing after the head but soft-cap the logits (asserted: any other post-processing would be left out)."""
    from playground.backends.torch.caches.factory import make_cache

    model = loaded.model
    assert model.config.model_type in ("llama", "gemma3_text"), model.config.model_type
    cache = make_cache(spec, model, ids.shape[1])
    decoder, rows = model.get_decoder(), []
    with torch.inference_mode():
        hidden = decoder(ids, past_key_values=cache, use_cache=True).last_hidden_state[:, -1]
        for token in forced[:-1]:
            rows.append(hidden)
            hidden = decoder(torch.tensor([[token]]), past_key_values=cache, use_cache=True).last_hidden_state[:, -1]
        rows.append(hidden)
        logits = model.lm_head(torch.cat(rows)).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return torch.log_softmax(logits, dim=-1)


def jax_teacher_forced(loaded, spec, ids: torch.Tensor, forced: list[int], room: int = 0) -> torch.Tensor:
    """The same figures from the JAX decoder's cache for `spec` (laid out at its final length), stepping the
    traced model through the forced tokens in one jitted scan (playground/backends/jax/teacher_forced.py)."""
    from playground.backends.jax.teacher_forced import logprobs_along

    return logprobs_along(loaded, spec, ids[0].tolist(), forced, room)


def mean_kl(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over rows of KL(reference || other), both log-probabilities."""
    from playground.backends.torch.reference import mean_kl as kl

    return kl(reference, other)


class FixedBandwidth:
    """Stands in for the benchmark's bandwidth probe: every sample reads 10 GB/s, instantly."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(10.0)

    def close(self) -> None:
        pass


def bench_with(monkeypatch: pytest.MonkeyPatch, loaded_model) -> None:
    """Make `bench.run_bench` use `loaded_model` for any name and the fixed bandwidth (no 1 GiB sums)."""
    from playground.models import loaded
    from playground.tools import bench

    monkeypatch.setattr(loaded.LOADED, "get", lambda name, weights="fp32", progress=None: (loaded_model, True))
    monkeypatch.setattr(bench, "BandwidthProbe", FixedBandwidth)


BYTE_VOCAB = 257  # the byte tokenizer's ids: 256 bytes and its end token
PROMPT_TEXT = "hello world, hello world, hello world, hello"  # a prompt both tokenizers below read alike


def same_weights_other_tokenizer():
    """The main model's weights over a tokenizer with one extra token (so the vocabularies differ), whose
    logit is pinned far below the others so the draft never proposes it."""
    tokenizer = byte_tokenizer()
    tokenizer.add_tokens(["<extra>"])
    main, draft = tiny_llama(0), tiny_llama(0, vocab_size=BYTE_VOCAB + 1)
    with torch.no_grad():
        for name, param in draft.named_parameters():
            source = dict(main.named_parameters())[name]
            param[: source.shape[0]] = source
        draft.lm_head.weight[BYTE_VOCAB] = 0.0
        draft.model.embed_tokens.weight[BYTE_VOCAB] = 0.0
    from playground.models.loaded import LoadedModel

    return LoadedModel("tiny-other-tokenizer", "fp32", draft.eval(), tokenizer, 0.0, False)


def open_accordion(page, elem_id: str, inside: str) -> None:
    """Open the accordion `elem_id` until `inside` (a selector within it) shows, the way a person does: click its
    label, and click again if it closed. An update the server sends after the click can set the accordion back to
    closed (two full-suite runs saw it, one after the content had shown); a click on an open one closes it, so the
    label is clicked only while the content is hidden, up to four times."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    content = page.locator(f"#{elem_id} {inside}").first
    for attempt in range(4):
        if content.is_visible():
            return
        page.locator(f"#{elem_id} button").first.click()
        try:
            content.wait_for(state="visible", timeout=15_000)
            return
        except PlaywrightTimeout:
            if attempt == 3:
                raise


def choose_option(page, elem_id: str, option: str, accordion: str | None = None) -> None:
    """Pick an option in a Gradio dropdown the way a person does: open it, click the entry.

    An update the server sends while the list is open (a state restore, a card's check) renders the list again and
    detaches the entry under the pointer; a person would open it again, and so does this, up to three times.
    `accordion`: the accordion the dropdown sits in, opened again before each try (an update can close it)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.locator(f"#{elem_id} input")
    for attempt in range(3):
        try:
            if accordion is not None:
                open_accordion(page, accordion, f"#{elem_id} input")
            box.click(timeout=20_000)
            page.locator(f"#{elem_id}").get_by_role("option", name=option, exact=True).click(timeout=20_000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
            if box.is_visible():
                box.blur()
    box.blur()
