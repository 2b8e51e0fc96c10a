"""What a run stores keys and values as, and what each backend can store them as: the quantized cache's bits for
keys and for values, and the dtype of the full-precision caches' store.

The quantizers differ by backend. PyTorch runs transformers' quantized layers: quanto packs groups of 2 or 4 bits
(keys and values apart, through our subclass), and 8 bits is transformers' fp8 layer, one per-tensor scale for keys
and values alike, so 8 bits cannot sit beside 2 or 4 there. (transformers' HQQ backend has 1, 2, 3, 4 and 8 bits,
but needs the `hqq` package, which the project does not install.) The JAX path's own quantizer packs groups of 2, 4
or 8 bits, keys and values apart.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from playground.errors import PlaygroundError

RunSpec = Any  # a playground.spec.RunSpec: the spec validates against the registry, so it cannot be imported here

FP8_BITS = 8  # PyTorch: transformers' fp8 layer, the same for keys and values
PACKED_BITS = (2, 4)  # PyTorch: quanto's grouped layouts, keys and values apart
JAX_BITS = (2, 4, 8)  # JAX: its own grouped quantizer, keys and values apart
STORE_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # cache_dtype -> the store's dtype name (torch and jnp alike)


class KVBits(NamedTuple):
    keys: int
    values: int

    @property
    def residual(self) -> bool:
        """Whether the newest tokens are also kept in full precision: not when both sides take 8 bits (transformers'
        fp8 layer has no residual, and the JAX store follows it)."""
        return (self.keys, self.values) != (FP8_BITS, FP8_BITS)

    def label(self) -> str:
        """"4-bit", or "8-bit keys, 2-bit values" when the sides differ."""
        if self.keys == self.values:
            return f"{self.keys}-bit"
        return f"{self.keys}-bit keys, {self.values}-bit values"


def kv_bits(spec: RunSpec) -> KVBits:
    """The bits of each side: its own knob, or cache_bits where that is 0."""
    return KVBits(spec.cache_key_bits or spec.cache_bits, spec.cache_value_bits or spec.cache_bits)


def _named(spec: RunSpec, side: str) -> str:
    """`cache_key_bits=8`, or `cache_bits=8` when the side follows it."""
    own = getattr(spec, f"cache_{side}_bits")
    return f"cache_{side}_bits={own}" if own else f"cache_bits={spec.cache_bits}"


def check_bits(spec: RunSpec) -> None:
    """Refuse bits the backend's quantizer lacks (the quantized cache's `validate`), naming the knobs, their values
    and what the backend takes."""
    bits = kv_bits(spec)
    if spec.backend == "torch" and FP8_BITS in bits and bits.keys != bits.values:
        raise PlaygroundError(
            f"{_named(spec, 'key')} with {_named(spec, 'value')} cannot run on backend torch: its 8 bits are "
            "transformers' fp8 layer, one scale for keys and values alike, and quanto packs 2 or 4 bits; torch takes "
            f"key and value bits of {' or '.join(map(str, PACKED_BITS))} apart, or 8 for both; backend jax takes "
            f"{', '.join(map(str, JAX_BITS))} apart")


def store_dtype(spec: RunSpec) -> str:
    """The full-precision caches' store dtype, by name ("float32" or "bfloat16")."""
    return STORE_DTYPES[spec.cache_dtype]


def check_store(spec: RunSpec) -> None:
    """A bf16 store halves an fp32 model's keys and values; bf16 weights make them bf16 already."""
    if spec.cache_dtype == "bf16" and spec.weights == "bf16":
        raise PlaygroundError("cache_dtype='bf16' stores an fp32 model's keys and values in bfloat16; with "
                              "weights='bf16' they are bfloat16 already: use cache_dtype 'fp32' with bf16 weights")
