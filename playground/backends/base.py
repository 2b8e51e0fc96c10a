"""The Backend interface: what the runner hands a backend, and what every backend measures and returns."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from playground.strategy_records.composite import StrategyOutputs, StrategyTokenInfo

if TYPE_CHECKING:  # type names only: importing this module must not import torch
    import torch

    from playground.backends.prefix_store import Kept, ReusePlan
    from playground.constraints.matching import Replay
    from playground.models.loaded import LoadedModel
    from playground.spec import RunSpec

# How many alternatives each token record lists (both backends compute exactly this many).
TOP_ALTERNATIVES = 5

# Backends call this with each chunk of new token ids (first sequence) as soon as they exist.
EmitTokens = Callable[[list[int]], None]
# Backends poll this between steps/chunks; True means the user pressed stop or the request ran out of time.
ShouldStop = Callable[[], bool]
# (fraction, message) while a backend prepares a run, e.g. compiles for it; the runner shows it on the column
ReportProgress = Callable[[float, str], None]
# A strategy that weighs several hypotheses streams nothing (its best sequence is only known at the end): backends
# call this with the leading hypothesis's new token ids as the search goes, a preview the page shows until the
# real result replaces it
PreviewTokens = Callable[[list[int]], None]


class TokenInfo(StrategyTokenInfo, total=False):
    """What a backend knew about one generated token (ids; the Result turns them into text). Both backends
    mean the same by each key; a strategy's own keys come from its records' module (`StrategyTokenInfo`)."""

    p: float  # probability of the chosen token under the distribution it was drawn from: after every stage of
    #           the logits chain (playground/registry/chain.py)
    entropy: float  # of that distribution, in nats
    p_model: float  # probability of the chosen token under the model's own softmax (temperature 1, no processor)
    entropy_model: float  # of the model's own distribution, in nats
    top: list[tuple[int, float, float]]  # the model's TOP_ALTERNATIVES most likely: (token id, p, p_model)
    top_cut: list[str | None]  # per entry of `top`: the chain stage that removed it first, None if it survived
    stages: list[tuple[str, int, float]]  # per stage of the chain, in order: (name, tokens it removed, the
    #                                       probability mass it moved: total variation between before and after)
    state: dict[str, float]  # what a stage carries from token to token, as it stood when this token was drawn:
    #                          "mirostat_mu" (bits), "adaptive_p_average" (the chosen tokens' running average)


@dataclass
class GenerationOutput(StrategyOutputs):
    """What a backend measured; the runner turns it into the Result JSON. The fields only some strategies
    fill are their records' (`StrategyOutputs`, keyword-only).

    All times are time.perf_counter() values, so the runner can relate them to its own clock.
    """

    sequences: list[list[int]]  # new token ids per returned sequence, best first
    start_time: float  # when the backend began work on the prompt (after the model was loaded)
    token_times: list[float]  # when each new token of sequences[0] became available on the host
    kv_cache_bytes: int  # bytes held by the cache's tensors at the end of the run
    compile_s: float = 0.0  # time spent compiling before the first token (JAX path; 0 when nothing compiled)
    scores: list[float] | None = None  # each returned sequence's score, where the strategy ranks them
    forward_passes: int | None = None  # main-model forward passes, measured
    stopped: bool = False  # ended early by should_stop()
    token_info: list[TokenInfo] | None = None  # per token of sequences[0]
    kv_trace: list[int] = field(default_factory=list)  # cache bytes after each decoding step
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific figures shown as is
    # a constrained run: per returned sequence, the engine's replay of it (whether the grammar may end after it,
    # or the first token it refused; the Result adds the independent check); None without a constraint
    constraint_replay: list[Replay] | None = None
    # bytes of the weights the run read (main and draft) where they are not the loaded torch models' own
    # (a JAX engine's int8 copy); None: the loaded models' bytes
    weight_bytes: int | None = None
    reused_tokens: int = 0  # positions restored from the prefix store instead of prefilled
    kept: Kept | None = None  # this run's cache for the prefix store, where the runner asked for it
    reuse_note: str | None = None  # why a match could not be restored (the run went cold), in one line
    # a warm run of a cache restored rather than recomputed, against the cold run of its tokens: exact, kl_mean,
    # kl_max, max_p_difference, first_difference (backends/torch/reuse_vs_cold.py); None where not measured
    vs_cold: dict[str, Any] | None = None


@dataclass(frozen=True)
class Held:
    """Bytes a backend will hold, what they are (for the refusal) and what to lower when they do not fit."""

    what: str
    bytes: int
    hint: str = "lower max_new_tokens or num_beams, pick smaller weights (bf16, int8, nf4)"


@dataclass(frozen=True)
class MemoryNeed:
    """What a run adds to the memory budget before it allocates anything."""

    run: Held  # held while the run lasts: its caches (and its draft's)
    # held as long as a model stays loaded (a backend's own copy of its weights), reserved once per model
    resident: list[tuple[LoadedModel, Held]] = field(default_factory=list)


class Backend(Protocol):
    """A way to run a validated RunSpec on a loaded model. The runner holds the one generation lock around
    `generate`, so a backend never runs two generations at once and needs no lock of its own. Importing a
    backend's module imports neither torch nor jax (the page asks `preflight` while it starts)."""

    name: str

    def source_weights(self, spec: RunSpec) -> str:
        """The precision of the torch model this backend runs from (the runner loads that one)."""
        ...

    def preflight(self, spec: RunSpec, config: Mapping[str, Any] | None,
                  draft_config: Mapping[str, Any] | None) -> None:
        """Refuse what this backend cannot run, from the model's (and draft's) config on disk, before anything
        loads; a config not on disk yet is None (then the backend refuses once the model is loaded)."""
        ...

    def memory_needed(self, loaded: LoadedModel, spec: RunSpec, prompt_tokens: int,
                      draft: LoadedModel | None) -> MemoryNeed:
        """What the run will allocate beside the loaded torch weights."""
        ...

    def logprobs_along(self, loaded: LoadedModel, spec: RunSpec, prompt_ids: list[int],
                       new_ids: list[int]) -> torch.Tensor:
        """Log-probabilities (N, V) of the distribution each of `new_ids` came from, under this backend's model at
        spec's weights with full attention: set against the fp32 model's, what the precision costs. Not timed."""
        ...

    def logprobs_through_cache(self, loaded: LoadedModel, spec: RunSpec, text_ids: list[int], chunk: int,
                               progress: ReportProgress | None = None) -> Iterator[torch.Tensor]:
        """Log-probabilities (rows, V) of the token after each position of `text_ids` but the last, `chunk` rows
        at a time, through spec's cache: at each position the model sees what decoding would show it there (a
        window, sinks, a quantized store). What a cache costs in quality against the full one. Not timed."""
        ...

    def generate(self, loaded: LoadedModel, prompt_ids: list[int], spec: RunSpec, emit: EmitTokens,
                 should_stop: ShouldStop, draft: LoadedModel | None = None,
                 progress: ReportProgress | None = None, preview: PreviewTokens | None = None,
                 reuse: ReusePlan | None = None) -> GenerationOutput:
        """Generate after the prompt's token ids (plain ids: each backend makes its own arrays of them),
        streaming through `emit`; `draft` is the assistant model, if any;
        `progress` hears of long preparations before the first token (a compile), `preview` of a search's
        leading hypothesis while it searches. `reuse` (only where `reuse_refusal` has none): start from the prefix
        store's match and hand back this run's cache as `GenerationOutput.kept`."""
        ...

    def reuse_refusal(self, loaded: LoadedModel, spec: RunSpec) -> str | None:
        """Why this run can neither start from nor leave a kept cache (one line); None when it can."""
        ...


def eos_ids(*sources: Any) -> tuple[int, ...]:
    """The ids generation stops at, in their configured order, from the first source that names any (a
    GenerationConfig, then e.g. the tokenizer). Configs hold an int, a list of ints or None under
    `eos_token_id`; written once so that every backend stops at the same tokens."""
    for source in sources:
        eos = getattr(source, "eos_token_id", None)
        if eos is None:
            continue
        found = tuple(dict.fromkeys(int(e) for e in (eos if isinstance(eos, Iterable) else [eos])))
        if found:
            return found
    return ()


def first_eos(*sources: Any) -> int | None:
    """The first stop id, for settings that take a single id (a pad id)."""
    ids = eos_ids(*sources)
    return ids[0] if ids else None


def same_vocabulary(a: Any, b: Any) -> bool:
    """Whether two tokenizers map the same texts to the same ids (a draft model's token ids can then be verified
    as they are; otherwise the drafts go through text)."""
    return a is b or (len(a) == len(b) and a.get_vocab() == b.get_vocab())
