"""The tiny reference models' weights, defined without transformers' initialization.

Random initialization differs between transformers releases, so the guide references (tests/references/
guide_methods.json, docs/guide-references.md) do not rely on it: after building a tiny model, every parameter is
overwritten from one torch.Generator. Plain torch only, so that the project's venv (transformers 5) and the
throwaway transformers 4.52 venv both import this file (by path: scripts/ is not a package) and get the same
tensors. The parity tests load it the same way:

    spec = importlib.util.spec_from_file_location("guide_weights", ROOT / "scripts/guide_references/weights.py")
    weights = importlib.util.module_from_spec(spec); spec.loader.exec_module(weights)
    model = tiny_llama(seed, **overrides); weights.set_reference_weights(model, seed, std)

with seed, overrides and std as tests/references/guide_methods.json gives them for the model.
"""

from __future__ import annotations

import hashlib

import torch

FUNCTION = "scripts/guide_references/weights.py::set_reference_weights"
STD = 0.02


def set_reference_weights(model: torch.nn.Module, seed: int, std: float = STD) -> list[str]:
    """Overwrite every parameter in place, in sorted-name order, from one CPU generator seeded with `seed`:
    float32 normal * `std` for tensors of two or more dimensions, ones for one-dimensional ones (norm weights).

    A tensor shared under several names (tied embeddings: `lm_head.weight` is `model.embed_tokens.weight`) is
    filled once, under the first of its names in sorted order. Returns the names that were filled.
    """
    generator = torch.Generator().manual_seed(seed)
    named = sorted(model.named_parameters(remove_duplicate=False), key=lambda item: item[0])
    filled: list[str] = []
    seen: set[int] = set()
    with torch.no_grad():
        for name, parameter in named:
            if id(parameter) in seen:
                continue
            seen.add(id(parameter))
            if parameter.dim() >= 2:
                values = torch.randn(tuple(parameter.shape), generator=generator, dtype=torch.float32) * std
            else:
                values = torch.ones(tuple(parameter.shape), dtype=torch.float32)
            parameter.copy_(values.to(parameter.dtype))
            filled.append(name)
    return filled


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter (shared ones under each of their names), in sorted-name order: its name,
    dtype, shape and bytes. Equal digests mean equal weights under equal names."""
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters(remove_duplicate=False), key=lambda item: item[0]):
        tensor = parameter.detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
