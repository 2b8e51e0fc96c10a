"""The logits chain inside jit: its stages, their arithmetic, the token choice after it, constraint masks and token
records."""
