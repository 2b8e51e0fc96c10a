"""The JAX quantized cache's error on gemma3-270m, against full precision and PyTorch's quantized cache
(tests/integration/quantized_error.py; the other bundled model has its own file, so the two run side by side)."""

from __future__ import annotations

import pytest

pytest.importorskip("torchax")
pytest.importorskip("jax")

from tests.integration.quantized_error import (  # noqa: E402
    BITS,
    check_quantized_cache_error,
    check_weights_error,
)


@pytest.mark.slow
@pytest.mark.extended  # the same measure as SmolLM2's 8-bit one in the full suite, on the model with its own windows
@pytest.mark.parametrize("bits", BITS)
def test_quantized_cache_error_against_full_precision(bits):
    check_quantized_cache_error("gemma3-270m", bits)


@pytest.mark.slow
@pytest.mark.extended  # SmolLM2's int8 KL check stays in the full suite, and tiny Gemma3 int8 models' logits
def test_int8_weights_stay_within_the_kl_target():
    check_weights_error("gemma3-270m")
