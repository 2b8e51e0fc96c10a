"""Decoding Playground: compare decoding strategies and KV caches on PyTorch and a jitted JAX decoder."""

from playground.errors import PlaygroundError
from playground.spec import RunSpec

__all__ = ["PlaygroundError", "RunSpec"]
