"""The traced model: the twin, our attention, the architectures the JAX path runs, layer outputs."""
