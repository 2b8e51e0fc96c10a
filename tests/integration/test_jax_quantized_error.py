"""The JAX quantized cache's error on smollm2-135m, against full precision and PyTorch's quantized cache
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
# 8 bits in the full suite (with its greedy-token check); 2 bits, where the two caches come closest, extended
@pytest.mark.parametrize("bits", [pytest.param(bits, marks=[pytest.mark.extended] if bits < 8 else [])
                                  for bits in BITS])
def test_quantized_cache_error_against_full_precision(bits):
    check_quantized_cache_error("smollm2-135m", bits)


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["int8", "q4"])
def test_quantized_weights_stay_within_the_kl_target(weights):
    check_weights_error("smollm2-135m", weights)
