"""Prompt lookup (Saxena, 2023; transformers' PromptLookupCandidateGenerator): draft tokens by finding the text's
last n-gram earlier in the prompt and the output so far, and proposing what followed it.

It runs on the host, over numpy: every verify pass already brings its tokens to the host (they stream), and
searching a few thousand ids is microseconds there, where on the device it would be one more program and
a fixed-size search per pass.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MAX_NGRAM = 2  # transformers' default max_matching_ngram_size


def lookup(history: np.ndarray, drafts: int, max_ngram: int = MAX_NGRAM) -> np.ndarray:
    """Up to `drafts` ids that followed the first earlier occurrence of the history's last n-gram (the longest
    n <= max_ngram that occurs), as transformers picks them; empty when nothing matches."""
    length = len(history)
    for size in range(min(max_ngram, length - 1), 0, -1):
        windows = sliding_window_view(history, size)  # (L - size + 1, size)
        starts = np.flatnonzero((windows[:-1] == history[-size:]).all(axis=1))  # not the tail itself
        if len(starts):
            start = int(starts[0]) + size
            return history[start: min(start + drafts, length)]
    return history[:0]
