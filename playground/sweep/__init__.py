"""Sweeps: one knob over several values, on a set of prompts, with text-quality measures per run."""
