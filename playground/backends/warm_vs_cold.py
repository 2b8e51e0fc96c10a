"""How far a warm run's next-token distributions are from the cold run's, on either backend: the figures the
Result's `reuse` record gives for the caches that are restored rather than recomputed."""

from __future__ import annotations

from typing import Any

import numpy as np

EXACT_P = 1e-5  # the largest probability gap still called exact (the exact caches' bound)


def compare(warm: np.ndarray, cold: np.ndarray) -> dict[str, Any]:
    """Log-probabilities (N, V) at each new token, warm and cold: KL(cold || warm) per position (nats), the
    largest probability gap, and the first position whose most likely token differs; `exact` where there is none
    and every gap is within EXACT_P. Computed in float64, so a KL near 0 is not lost in float32's rounding."""
    warm, cold = warm.astype(np.float64), cold.astype(np.float64)
    p_cold = np.exp(cold)
    kl = np.maximum((p_cold * (cold - warm)).sum(-1), 0.0)  # (N,)
    gap = float(np.abs(p_cold - np.exp(warm)).max())
    differ = np.flatnonzero(cold.argmax(-1) != warm.argmax(-1))
    first = int(differ[0]) if differ.size else None
    return {"exact": first is None and gap <= EXACT_P, "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
            "max_p_difference": gap, "first_difference": first}
