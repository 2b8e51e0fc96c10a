"""Replaying a sampling run's draws from torch's global generator, so that a run whose first tokens are forced (a
Step from a node of a branch tree) draws its next token as the uninterrupted run draws it there.

generate()'s sampling loop draws each token with `torch.multinomial(probs (1, V), 1)`, which takes the same number
of numbers from the generator whatever the probabilities are (it depends on V alone), and a random stage of the
chain takes its own before it: XTC's coin (`samplers.XTCLogitsWarper`, one `torch.rand(())` per token). Drawing
as much again per forced token leaves the generator where the uninterrupted run left it.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from playground import registry
from playground.spec import RunSpec

# the chain's stages whose PyTorch side draws one number from the global generator per token, before the draw
RANDOM_STAGES = ("xtc",)


def seed_past_forced(spec: RunSpec, config: GenerationConfig, replays: bool, vocab_size: int) -> None:
    """Seed torch's global generator for a run, then, for a sampling loop of one draw per token (`replays`: its
    plug-in's), draw past the run's forced prefix as the uninterrupted run drew there."""
    torch.manual_seed(spec.seed)
    if spec.prefix_ids and replays and config.do_sample and (config.num_beams or 1) == 1:
        replay_draws(spec, vocab_size, len(spec.prefix_ids))


def replay_draws(spec: RunSpec, vocab_size: int, steps: int) -> None:
    """Advance torch's global generator past `steps` tokens of a sampling run of `spec` (seeded already)."""
    coins = sum(1 for name in RANDOM_STAGES if registry.processor(name).active(spec))
    uniform = torch.ones(1, vocab_size)
    for _ in range(steps):
        for _ in range(coins):
            torch.rand(())
        torch.multinomial(uniform, num_samples=1)
