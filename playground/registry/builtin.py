"""The built-in KV-cache types and decoding strategies (registered after the knobs and the logits chain's stages).

Each entry names its backend code by module path (imported on first use). Reasons are shown to users verbatim,
so each says why and what to pick instead.
"""

from __future__ import annotations

from playground.errors import PlaygroundError
from playground.registry import builtin_backends, builtin_chain  # noqa: F401  (registers the backends, the stages)
from playground.registry.builtin_knobs import CACHE_BITS, MAX_BEAMS
from playground.registry.entries import CacheNeed, CacheType, RunSpec, Strategy, lazy
from playground.registry.kv_store import check_bits, check_store
from playground.registry.records import RecordField, RunRecords, TokenRecords
from playground.registry.store import caches, register_cache, register_strategy

__all__ = ["CACHE_BITS", "DRAFT_CACHE", "MAX_BEAMS", "MAX_CONTRASTIVE_K", "REFERENCE_CACHE"]

# --- caches -----------------------------------------------------------------------------------------------------

_TORCH_CACHES = "playground.backends.torch.caches.factory"
_JAX_LAYOUTS = "playground.backends.jax.caches.global_layers"
_RETENTION = "playground.retention"
_REFUSALS = "playground.backends.refusals"



# contrastive search scores its candidates in one batched forward of top_k rows per step
MAX_CONTRASTIVE_K = 64


def _check_contrastive(spec: RunSpec) -> None:
    if not 2 <= spec.top_k <= MAX_CONTRASTIVE_K:
        raise PlaygroundError(f"contrastive search weighs top_k candidates per step in one batched forward: "
                              f"top_k={spec.top_k} must be 2 to {MAX_CONTRASTIVE_K} (the method's paper uses 4 to 10)")


def _check_dola_layers(spec: RunSpec) -> None:
    """The form of dola_layers; which indices a model has is checked by the loop, which knows the model."""
    value = spec.dola_layers.strip()
    if value in ("low", "high"):
        return
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isdigit() for p in parts):
        raise PlaygroundError(f"dola_layers={spec.dola_layers!r} is not 'low', 'high' or comma-separated layer "
                              "indices (e.g. 0,2,4)")


def _check_sinks(spec: RunSpec) -> None:
    check_store(spec)
    if spec.sink_tokens >= spec.window:
        raise PlaygroundError(
            f"sink_tokens={spec.sink_tokens} must be smaller than window={spec.window} "
            "(the window holds the sinks plus the most recent tokens)")


register_cache(CacheType(
    name="dynamic", label="dynamic", help="grows with every token; keeps everything in full precision",
    knobs=("cache_dtype",), validate=check_store,
    impl={"torch": lazy(_TORCH_CACHES, "dynamic_cache"), "jax": lazy(_JAX_LAYOUTS, "full_ring")}))
register_cache(CacheType(
    name="static", label="static",
    help="allocated once for the prompt and every new token; fixed shapes (what compilers want)",
    knobs=("cache_dtype",), validate=check_store,
    impl={"torch": lazy(_TORCH_CACHES, "static_cache"), "jax": lazy(_JAX_LAYOUTS, "full_ring")}, preallocated=True))
register_cache(CacheType(
    name="quantized", label="quantized",
    help="stores keys and values in 2, 4 or 8 bits (each side its own), the newest tokens in full precision",
    knobs=("cache_bits", "cache_key_bits", "cache_value_bits", "residual_length"), validate=check_bits,
    impl={"torch": lazy(_TORCH_CACHES, "quantized_cache"), "jax": lazy(_JAX_LAYOUTS, "quantized")},
    prepare={"torch": lazy("playground.backends.torch.caches.kernels", "prepare_quanto")},
    retention=lazy(_RETENTION, "quantized_rows")))
register_cache(CacheType(
    name="sliding", label="sliding window",
    help="keeps only the last `window` tokens (the model's own window where it has sliding layers)",
    knobs=("window", "cache_dtype"), validate=check_store,
    impl={"torch": lazy(_TORCH_CACHES, "sliding_cache"), "jax": lazy(_JAX_LAYOUTS, "sliding")},
    check_model=lazy(_REFUSALS, "check_sliding"),
    retention=lazy(_RETENTION, "sliding_rows")))
register_cache(CacheType(
    name="sink", label="attention sinks",
    help="keeps the first `sink_tokens` tokens forever plus the most recent ones (StreamingLLM)",
    knobs=("window", "sink_tokens", "cache_dtype"),
    impl={"torch": lazy(_TORCH_CACHES, "sink_cache"), "jax": lazy(_JAX_LAYOUTS, "sink")},
    check_model=lazy(_REFUSALS, "check_sink"),
    validate=_check_sinks,
    retention=lazy(_RETENTION, "sink_rows")))


# --- strategies -------------------------------------------------------------------------------------------------

_TORCH = "playground.backends.torch"
_JAX = "playground.backends.jax.strategies"
# transformers' own one-token-per-step loop on PyTorch, the one-token plug-in on JAX
_ONE_TOKEN = {"torch": lazy(f"{_TORCH}.strategy", "Generate"), "jax": lazy(f"{_JAX}.plain", "single_token")}
_RECORDS = "playground.strategy_records"  # what each strategy's records become in the Result: a module each
_VIEWS = "playground.ui"  # how the page draws them (imported on first use: the registry imports no UI)

BEAM_TREE = RunRecords(
    key="beam_tree", build=lazy(f"{_RECORDS}.beam", "beam_tree"),
    shape="per search step, a list of the candidates weighed",
    fields=(RecordField(name="parent", kind="int", meaning="the candidate of the previous step it extends (null "
                        "at the first step)"),
            RecordField(name="token", kind="int", meaning="its token id"),
            RecordField(name="text", kind="str", meaning="its token's text"),
            RecordField(name="score", kind="float", unit="nats",
                        meaning="the hypothesis's cumulative log-probability, before the length penalty"),
            RecordField(name="kept", kind="bool", meaning="it continues as one of the live beams"),
            RecordField(name="finished", kind="bool", meaning="it ended here (EOS)"),
            RecordField(name="chosen", kind="bool", meaning="on the path of the best returned sequence"),
            RecordField(name="group", kind="int", meaning="diverse beam search only: the hypothesis's group"),
            RecordField(name="penalty", kind="float", unit="nats",
                        meaning="diverse beam search only: the diversity penalty its token paid (in score)")))
BEAM_VIEW = lazy(f"{_VIEWS}.beam_view", "BeamView")


def _check_beams(spec: RunSpec) -> None:
    """Beam search needs two beams at least (one is greedy search) and returns at most its beams."""
    if spec.num_beams < 2:
        raise PlaygroundError(f"num_beams={spec.num_beams} with strategy {spec.strategy!r} is greedy search; "
                              f"use num_beams 2-{MAX_BEAMS}, or strategy 'greedy'")
    if not 1 <= spec.num_return_sequences <= MAX_BEAMS:
        raise PlaygroundError(f"num_return_sequences={spec.num_return_sequences} is out of range; "
                              f"allowed: [1, {MAX_BEAMS}]")
    if spec.num_return_sequences > spec.num_beams:
        raise PlaygroundError(
            f"num_return_sequences={spec.num_return_sequences} exceeds num_beams={spec.num_beams} (beam search "
            "returns at most its beams); raise num_beams or lower num_return_sequences")


def _check_groups(spec: RunSpec) -> None:
    """Diverse beam search: beam search's own limits, and groups that split the beams evenly."""
    _check_beams(spec)
    if spec.num_beams % spec.num_beam_groups:
        raise PlaygroundError(f"num_beam_groups={spec.num_beam_groups} must divide num_beams={spec.num_beams} "
                              "(each group keeps the same number of beams)")


def _check_draft_source(spec: RunSpec) -> None:
    if (spec.assistant is None) == (spec.prompt_lookup == 0):
        raise PlaygroundError(
            "strategy 'assisted' needs exactly one source of draft tokens: an assistant model "
            "(assistant, e.g. smollm2-135m) or prompt lookup (prompt_lookup, e.g. 10)")


register_strategy(Strategy(
    name="greedy", label="greedy", help="the most likely token at every step", plain=True, impl=_ONE_TOKEN))
register_strategy(Strategy(
    name="sampling", label="sampling",
    help="draws each token from the distribution the logits chain leaves (temperature, top-k, top-p, ...)",
    sampling="always", plain=True, impl=_ONE_TOKEN))
register_strategy(Strategy(
    name="beam", label="beam search", help="keeps the num_beams most likely hypotheses at every step",
    knobs=("num_beams", "length_penalty", "num_return_sequences", "early_stopping"),
    picks="the num_beams most likely hypotheses are kept",
    validate=_check_beams, rows_knob="num_beams",
    impl={"torch": lazy(f"{_TORCH}.beam_tree", "BeamSearch"), "jax": lazy(f"{_JAX}.beam", "beam")},
    run_records=(BEAM_TREE,), view=BEAM_VIEW))
register_strategy(Strategy(
    name="assisted", label="assisted",
    help="drafts several tokens (a small model or n-grams from the prompt) and verifies them in one pass",
    knobs=("assistant", "prompt_lookup", "assisted_sampling"), sampling="optional",
    validate=_check_draft_source, drafts=True,
    impl={"torch": lazy(f"{_TORCH}.assist_steps", "Assisted"), "jax": lazy(f"{_JAX}.assisted", "assisted")},
    token_records=(TokenRecords(key="draft", build=lazy(f"{_RECORDS}.assisted", "draft_flags"), fields=(
        RecordField(name="draft", kind="bool",
                    meaning="an accepted draft token (true) or the main model's own token (false)"),)),),
    run_records=(
        RunRecords(key="assisted_steps", build=lazy(f"{_RECORDS}.assisted", "assisted_steps"),
                   shape="a list, one per verification step", fields=(
                       RecordField(name="drafted", kind="list[int]",
                                   meaning="the token ids the draft proposed (main vocabulary; may be empty)"),
                       RecordField(name="drafted_text", kind="list[str]", meaning="their texts"),
                       RecordField(name="accepted", kind="int",
                                   meaning="how many of them, from the first, the main model kept"))),
        RunRecords(key="draft_tokens_proposed", in_extra=True, fields=(
            RecordField(name="draft_tokens_proposed", kind="int", unit="tokens",
                        meaning="drafted tokens over the run (metrics.acceptance_rate: the share accepted)"),))),
    view=lazy(f"{_VIEWS}.assist_view", "AssistedView")))

register_strategy(Strategy(
    name="beam_sample", label="beam sampling",
    help="beam search whose continuations are drawn from the distribution the logits chain leaves, not taken best "
         "first: varied like sampling, weighed like beam search",
    sampling="always", picks="continuations are drawn, and the num_beams most likely of them kept",
    knobs=("num_beams", "length_penalty", "num_return_sequences", "early_stopping"),
    validate=_check_beams, rows_knob="num_beams", run_records=(BEAM_TREE,), view=BEAM_VIEW,
    impl={"torch": lazy(f"{_TORCH}.beam_tree", "BeamSearch"), "jax": lazy(f"{_JAX}.beam", "beam_sample")}))

register_strategy(Strategy(
    name="diverse_beam", label="diverse beam search",
    help="beam search in groups: a group loses diversity_penalty on each token an earlier group just chose, so the "
         "groups return different texts",
    picks="each group keeps its most likely hypotheses after the diversity penalty",
    knobs=("num_beams", "num_beam_groups", "diversity_penalty", "length_penalty", "num_return_sequences",
           "early_stopping"),
    validate=_check_groups, rows_knob="num_beams", run_records=(BEAM_TREE,), view=BEAM_VIEW,
    impl={"torch": lazy(f"{_TORCH}.diverse_beam", "DiverseBeam"), "jax": lazy(f"{_JAX}.diverse_beam", "diverse_beam")}))

register_strategy(Strategy(
    name="contrastive", label="contrastive search",
    help="of the top_k most likely tokens, the one that scores best on (1 - α)·p minus α times its greatest "
         "similarity to the text so far: coherent, and less repetitive than greedy",
    picks="of the top_k most likely, the best on (1 - α)·p - α·(greatest similarity to the text) is taken",
    knobs=("penalty_alpha", "top_k"), validate=_check_contrastive, peak_rows_knob="top_k",
    impl={"torch": lazy(f"{_TORCH}.contrastive", "plug_in"), "jax": lazy(f"{_JAX}.contrastive", "contrastive")},
    cache_need={"torch": CacheNeed(("dynamic",), "contrastive search keeps the chosen candidate's row of a cache "
                                   "repeated top_k times at every step, which the dynamic cache selects in place")},
    check_model=lazy(_REFUSALS, "check_contrastive"),
    token_records=(TokenRecords(
        key="contrastive", build=lazy(f"{_RECORDS}.contrastive", "contrastive_candidates"),
        shape="a list, most probable first",
        fields=(RecordField(name="id", kind="int", meaning="a candidate's token id"),
                RecordField(name="text", kind="str", meaning="its text"),
                RecordField(name="p", kind="float", meaning="its probability after the logits chain's penalties"),
                RecordField(name="penalty", kind="float", meaning="degeneration penalty: its greatest cosine "
                            "similarity to the text so far"),
                RecordField(name="score", kind="float", meaning="(1 - penalty_alpha)·p - penalty_alpha·penalty: "
                            "the highest is the token"))),),
    view=lazy(f"{_VIEWS}.contrastive_view", "ContrastiveView")))

register_strategy(Strategy(
    name="dola", label="DoLa",
    help="contrasts the final layer's next-token log-probabilities with an early layer's (the one most unlike "
         "it) and decodes greedily from the difference: facts the late layers add stand out",
    picks="the most likely token under the contrast (the chain acts on the final layer's log-probabilities minus "
          "the premature layer's) is taken",
    knobs=("dola_layers",), validate=_check_dola_layers,
    impl={"torch": lazy(f"{_TORCH}.dola", "plug_in"), "jax": lazy(f"{_JAX}.dola", "dola")},
    check_model=lazy(_REFUSALS, "check_dola"),
    token_records=(TokenRecords(key="dola", build=lazy(f"{_RECORDS}.dola", "dola_contrasts"), fields=(
        RecordField(name="layer", kind="int", meaning="the premature layer contrasted with the final one"),
        RecordField(name="layers", kind="list[int]", meaning="the candidate premature layers"),
        RecordField(name="js", kind="list[float]", unit="nats", meaning="per candidate layer, its Jensen-Shannon "
                    "divergence from the final layer (the largest is contrasted)"),
        RecordField(name="greedy_id", kind="int", meaning="the final layer's own most likely token"),
        RecordField(name="greedy_text", kind="str", meaning="its text"),
        RecordField(name="changed", kind="bool", meaning="the contrast took another token than greedy's"))),),
    run_records=(RunRecords(key="dola_layers", in_extra=True, fields=(
        RecordField(name="dola_layers", kind="list[int]", meaning="the candidate premature layers (JAX path)"),)),),
    view=lazy(f"{_VIEWS}.dola_view", "DolaView")))

# The cache that is allocated once and keeps every position in full precision: what a forward over a whole known
# text uses (the teacher-forced fp32 reference, the page's warm-up of the static column)
REFERENCE_CACHE = next(c.name for c in caches() if c.preallocated and c.retention is None and not c.no_rollback)
# A draft model's own cache on the JAX path: preallocated for the whole run, and it rolls rejected drafts back.
DRAFT_CACHE = REFERENCE_CACHE
