"""Memory budget: estimate weight and KV-cache bytes before allocating them, and refuse what would not fit."""

from __future__ import annotations

import os
import re
from typing import Any

from playground import device
from playground.errors import PlaygroundError
from playground.models.shapes import attention_shape

# the rest is for what the budget does not count: the Python process, torch's and XLA's libraries and
# workspaces, activations during a step, the page's server (compiled JAX programs are counted at their bound)
DEFAULT_BUDGET_SHARE = 0.6
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def budget_bytes() -> int:
    """PLAYGROUND_MEMORY_BUDGET (bytes, or with a K/M/G suffix); default 60% of the memory the device has for
    this process: the GPU's memory on a GPU, else the container's cgroup limit or physical RAM if that is
    smaller (see host.py)."""
    raw = os.environ.get("PLAYGROUND_MEMORY_BUDGET", "").strip()
    if not raw:
        return int(device.current().memory()[0] * DEFAULT_BUDGET_SHARE)
    return parse_size("PLAYGROUND_MEMORY_BUDGET", raw)


def parse_size(name: str, raw: str) -> int:
    """A size setting: bytes, or a number with a K/M/G/T suffix (8G, 512MiB, 1.5 GB)."""
    text = raw.strip().upper().removesuffix("B")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)I?", text)
    if not match:
        raise PlaygroundError(f"{name}={raw!r} is not a size; use bytes or e.g. 8G")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def size_text(n: int) -> str:
    """A size in a refusal, in the largest binary unit it fills (a prefill's few MB of working memory read
    "0.00 GiB" before): 1.50 GiB, 4.2 MiB, 12 KiB, 512 B."""
    for unit, scale, digits in (("GiB", 2**30, 2), ("MiB", 2**20, 1), ("KiB", 2**10, 0)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n} B"


def weight_bytes_estimate(config: Any, weights: str) -> int:
    """Bytes the weights will take at this precision, counted on a meta-device copy (no memory used).

    bitsandbytes quantizes the Linear layers except lm_head; embeddings and norms stay fp32.
    """
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    linear, other = 0, 0
    seen: set[int] = set()
    for name, module in model.named_modules():
        for param in module.parameters(recurse=False):
            if id(param) in seen:
                continue  # tied embeddings count once
            seen.add(id(param))
            if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
                linear += param.numel()
            else:
                other += param.numel()
    per_linear = {"fp32": 4, "bf16": 2, "int8": 1, "nf4": 0.5, "q4": 0.75}[weights]  # q4: 8 bytes a group of 32
    per_other = 2 if weights == "bf16" else 4
    return int(linear * per_linear + other * per_other)


def kv_bytes_estimate(config: Any, tokens: int, sequences: int = 1, element_bytes: int = 4,
                      windowed: bool = True) -> int:
    """Upper bound of a full-precision cache holding `tokens` positions for `sequences` hypotheses.

    `windowed`: sliding layers hold at most their window (False: a cache that stores them at full length).
    """
    shape = attention_shape(config)
    window = (shape.sliding_window if windowed else None) or tokens
    positions = sum(min(tokens, window) if kind == "sliding_attention" else tokens for kind in shape.layer_types)
    return 2 * shape.kv_heads * shape.head_dim * positions * sequences * element_bytes


SMALLER_REQUEST = "lower max_new_tokens or num_beams, pick smaller weights (bf16, int8, nf4)"


def check_fits(what: str, need: int, resident: int, budget: int | None = None, hint: str = SMALLER_REQUEST) -> None:
    """Refuse `need` more bytes when resident + need would pass the budget; `hint` says what to change."""
    budget = budget_bytes() if budget is None else budget
    if resident + need > budget:
        raise PlaygroundError(
            f"{what} needs about {size_text(need)} but only {size_text(max(0, budget - resident))} of the "
            f"{size_text(budget)} memory budget is free; {hint}, or raise PLAYGROUND_MEMORY_BUDGET")
