"""The benchmark's assisted-decoding part: prompt lookup on an input-grounded prompt, PyTorch against JAX.

Prompt lookup pays where the output repeats its input (editing, summarizing with quotes, code changes), so it
is measured on such a prompt: a passage of about 330 tokens (an original paragraph on lighthouse keeping,
written for this benchmark) that the model is asked to copy. Plain JAX greedy decoding runs on the same prompt
as the baseline (`jax-grounded`); each assisted configuration reports its acceptance rate and tokens per
forward pass, and whether its tokens equal plain greedy's.
"""

from __future__ import annotations

GROUNDED_PROMPT = (
    "Copy the following passage exactly, word for word.\n\n"
    "Before electric lamps and radio beacons, a lighthouse was only as reliable as the family who kept it. "
    "The keeper rose before dusk to trim the wicks, polish the brass and wipe the salt from the great lens, "
    "because a single smear could dim the beam that ships relied on to find the harbour mouth. Through the "
    "night he climbed the spiral stairs every few hours to wind the clockwork that turned the lens, and to "
    "refill the reservoir of whale oil, later paraffin, that fed the flame. In fog he rang a bell by hand, "
    "sometimes for a whole night, counting the strokes so that passing crews could tell one station from the "
    "next. The logbook recorded the weather, the ships that passed, the oil burned and every repair, and the "
    "inspectors who arrived by boat twice a year read it line by line. Many keepers lived with their wives "
    "and children on rocks so small that a storm could cut them off for weeks; supplies came by tender when "
    "the sea allowed, and gardens were planted in soil carried over in sacks. When a keeper fell ill, his "
    "wife or eldest daughter often kept the light burning in his place, and several of them were later "
    "appointed keepers in their own right. Automation arrived slowly over the twentieth century, station by "
    "station, until the last resident keepers locked their doors, and the lights they had tended for "
    "generations went on turning without anyone on the rock to watch them."
)
