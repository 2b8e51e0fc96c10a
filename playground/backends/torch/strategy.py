"""The contract between the PyTorch path's one model.generate call (generate.py) and a decoding strategy's plug-in.

generate.py owns what every strategy does alike: the generation config's common settings, the cache, the logits
chain and its probes, the stop criterion, the timing and the cache trace. A plug-in brings what is its own: its
settings of transformers' config, the loop generate() runs (transformers' own, or one of ours passed as
`custom_generate`), what it records on the way for the view, and whether its tokens stream as they are chosen.

A registry entry names its plug-in's factory (`Strategy.torch`: spec -> plug-in, a fresh one per request, so a
plug-in may keep what it records); an entry without one runs transformers' one-token-per-step loop (`Generate`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from transformers import GenerationConfig
from transformers.cache_utils import Cache

from playground import registry
from playground.backends.base import PreviewTokens, TokenInfo
from playground.backends.torch.probes import TokenProbe
from playground.backends.torch.transformers_hooks import own_loop
from playground.models.loaded import LoadedModel
from playground.spec import RunSpec
from playground.strategy_records.composite import StrategyOutputs

if TYPE_CHECKING:
    from playground.backends.torch.timing import TimingStreamer


@dataclass(frozen=True)
class Call:
    """One model.generate call as a plug-in sees it."""

    loaded: LoadedModel
    spec: RunSpec
    cache: Cache
    streamer: TimingStreamer | None  # the timing streamer, where the plug-in streams
    probe: TokenProbe | None  # the chain's probe, where the plug-in has one distribution per token
    draft: LoadedModel | None = None  # assisted decoding's draft model
    preview: PreviewTokens | None = None  # hears the leading hypothesis while nothing streams


@dataclass
class Recorded(StrategyOutputs):
    """What a plug-in recorded for the view, beside what generate.py measures for every strategy (its own
    output fields, keyword-only, are its records' `StrategyOutputs`)."""

    token_info: list[TokenInfo] | None = None  # per token of the first sequence
    forward_passes: int | None = None  # of the main model, where the forward hook's count is not it
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TorchStrategy(Protocol):
    """A decoding strategy's part of one model.generate call."""

    streams: bool  # tokens reach `emit` as they are chosen; else the best sequence once, when generate() returns
    probes: bool  # one distribution per token, which the chain's probe records (not so for several hypotheses)
    # a sampling run draws the same numbers at every token (draw_replay.py): a forced prefix's draws are replayed
    replays_draws: bool

    def configure(self, config: GenerationConfig) -> None:
        """transformers' settings for this strategy, set before the config is validated."""

    def loop_settings(self, config: GenerationConfig) -> None:
        """Settings only our own loop reads, set after validation (transformers 5 would call them unused)."""

    def min_tokens_to_keep(self, eos: tuple[int, ...]) -> int:
        """How many tokens each filter of the chain keeps at least (beam sampling: one more than the EOS ids)."""

    def generate_kwargs(self, call: Call) -> dict[str, Any]:
        """generate()'s arguments beside the prompt, config, cache, streamer and stopping criteria."""

    def recording(self, call: Call) -> AbstractContextManager[None]:
        """Around the generate() call: the hooks that record what the view needs."""

    def recorded(self, call: Call, first: list[int]) -> Recorded:
        """After the call: what was recorded, for the first returned sequence `first`."""


class Generate:
    """transformers' own one-token-per-step loop (`_sample`: greedy and sampling); the base of the others."""

    streams = True
    probes = True
    replays_draws = True

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def configure(self, config: GenerationConfig) -> None:
        pass

    def loop_settings(self, config: GenerationConfig) -> None:
        pass

    def min_tokens_to_keep(self, eos: tuple[int, ...]) -> int:
        return 1

    def generate_kwargs(self, call: Call) -> dict[str, Any]:
        return {}

    def recording(self, call: Call) -> AbstractContextManager[None]:
        return nullcontext()

    def recorded(self, call: Call, first: list[int]) -> Recorded:
        return Recorded(token_info=probed(call, first))


class OwnLoop(Generate):
    """A decoding loop of ours that generate() runs as `custom_generate` (a method transformers 5 no longer has
    in its core). generate() prepares the inputs, cache, processors and stopping criteria and passes `_sample`'s
    arguments, but no streamer: the loop's `emit` feeds ours. `record` collects the loop's per-step records
    (each with a `row`, and a `token_info()` where the loop decodes one token per step)."""

    def __init__(self, spec: RunSpec, loop: Callable[..., Any], settings: Callable[[RunSpec, Any], None]) -> None:
        super().__init__(spec)
        self.loop = loop
        self.settings = settings
        self.steps: list[Any] = []

    def loop_settings(self, config: GenerationConfig) -> None:
        self.settings(self.spec, config)

    def generate_kwargs(self, call: Call) -> dict[str, Any]:
        streamer = call.streamer
        if streamer is None:
            return own_loop(self.loop, record=self.steps)
        return own_loop(self.loop, record=self.steps, emit=lambda ids: streamer.put(torch.tensor(ids)))

    def recording(self, call: Call) -> AbstractContextManager[None]:
        return _quiet_validation()

    def recorded(self, call: Call, first: list[int]) -> Recorded:
        """The probe's record of each token, with what the loop recorded for it (row 0: the first sequence)."""
        info = probed(call, first)
        for known, step in zip(info or [], (s for s in self.steps if s.row == 0), strict=False):
            known.update(step.token_info())
        return Recorded(token_info=info)


def plug_in(spec: RunSpec) -> TorchStrategy:
    """The plug-in of `spec`'s strategy for one request."""
    factory = registry.strategy(spec.strategy).plugin("torch")
    if factory is None:  # RunSpec refuses such a spec before it gets here
        raise ValueError(f"strategy {spec.strategy!r} has no PyTorch plug-in")
    plugin: TorchStrategy = factory(spec)
    return plugin


def probed(call: Call, first: list[int]) -> list[TokenInfo] | None:
    """The probe's record of each token of the first sequence; None without a probe."""
    if call.probe is None:
        return None
    return call.probe.finish(first[-1] if first else None)[: len(first)]


@contextmanager
def _quiet_validation() -> Iterator[None]:
    """generate() validates its config again and logs a warning that settings only our loop reads (contrastive
    search's top_k) "may be ignored": transformers 5 no longer runs the method, and the loop does read them."""
    logger = logging.getLogger("transformers.generation.configuration_utils")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
