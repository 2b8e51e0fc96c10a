"""When each new token reaches the host: a transformers streamer that times what generate() puts in it."""

from __future__ import annotations

import time

import torch
from transformers.generation.streamers import BaseStreamer

from playground.backends.base import EmitTokens


class TimingStreamer(BaseStreamer):
    """Records when each new token reaches the host and forwards it; the first put() is the prompt."""

    def __init__(self, emit: EmitTokens) -> None:
        self.emit = emit
        self.token_times: list[float] = []
        self.chunk_sizes: list[int] = []  # assisted generation puts accepted drafts + 1 per main forward
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter()
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        ids = value.reshape(-1).tolist()  # (1,) per step for batch 1
        self.token_times.extend([now] * len(ids))
        self.chunk_sizes.append(len(ids))
        self.emit(ids)

    def end(self) -> None:
        pass
