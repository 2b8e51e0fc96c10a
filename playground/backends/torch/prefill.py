"""Which PyTorch runs prefill a long prompt in chunks: transformers' `prefill_chunk_size`, where it is exact.

generate()'s own loops (`_sample`: greedy and sampling, and `_beam_search`) run a prompt longer than the chunk
as consecutive forwards over the run's cache, each chunk attending over what the earlier ones cached, so
attention's memory grows with the cache rather than with the square of the prompt. That equals the whole
prompt's forward only where a cache keeps every prompt position in full precision while the prompt is in:

- dynamic and static: every position, in full precision;
- sliding: the window's positions, and the chunk's mask is the window's (transformers' sliding layers return
  the window plus the chunk; an imposed window travels in the mask, caches/sliding.py);
- sink (caches/sink.py) and quantized (transformers' quanto and fp8 layers) are left whole: the whole prompt
  attends over all of itself in full precision, while a second chunk would see the sink cache's window after
  eviction, or the quantized store, and give other tokens.

The strategies that run their own loop (contrastive search, DoLa, diverse beam search) prefill through
generate()'s own prefill too, so they chunk alike (contrastive search gathers each chunk's last hidden states,
its context). Assisted decoding does not read the setting: its prompt runs whole.
"""

from __future__ import annotations

from playground.spec import RunSpec

# the JAX prefill's chunk (backends/jax/engine/prefill.py), so the two backends split a prompt alike
CHUNK_TOKENS = 512
EXACT_IN_CHUNKS = frozenset({"dynamic", "static", "sliding"})


def chunk_size(spec: RunSpec, prompt_tokens: int) -> int | None:
    """generate()'s `prefill_chunk_size` for this run: the chunk, or None (the prompt runs whole: it fits in
    one chunk, its cache is not exact in chunks, or torch.compile would compile each chunk's shape again)."""
    if prompt_tokens <= CHUNK_TOKENS or spec.cache not in EXACT_IN_CHUNKS or spec.torch_compile != "off":
        return None
    return CHUNK_TOKENS


def working_bytes(spec: RunSpec, prompt_tokens: int, query_heads: int) -> int:
    """One layer's attention scores and probabilities (fp32) over the prompt, a chunk's rows at a time where it
    runs in chunks: what eager attention holds at its peak (sdpa holds less)."""
    rows = chunk_size(spec, prompt_tokens) or prompt_tokens
    return 2 * query_heads * rows * prompt_tokens * 4
