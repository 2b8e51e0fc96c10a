"""One-click comparisons, each with the prompt, length and knobs that make its difference show on the bundled models.

A preset sets the whole comparison (prompt, prompt format, every column) rather than adjusting the user's
columns: a cache only evicts when the run outgrows its window, prompt lookup only pays off on a prompt the
output copies from, and a preset that keeps a 16-token run or a chit-chat prompt would show no difference at all.
Each is sized to finish in well under a minute on a 2-core CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from playground import registry
from playground.constraints.examples import PERSON_PROMPT, PERSON_REGEX, PERSON_SCHEMA
from playground.sweep import prompt_sets
from playground.ui.columns import MAX_COLUMNS, START_SETTINGS
from playground.ui.settings import ColumnSettings

Column = ColumnSettings
STORY_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
# a passage the answer must repeat with one edit: most output tokens already sit in the prompt, so drafts
# (looked up in the prompt, or proposed by a small model) are accepted in runs
COPY_PROMPT = ("Repeat the passage below word for word.\n\n"
               "The cat sat by the window every morning, watching the birds in the garden. When the sun rose over "
               "the hills, the cat stretched, yawned and walked slowly to the kitchen, where a bowl of fresh milk "
               "was waiting.")
# tokens: it holds the chat-formatted prompt (46 SmolLM2 tokens; a window shorter than the prompt cuts off its
# start, and the model ends at once), and the prompt + 64 new tokens outgrow it, so sliding and sink evict
SHOOT_OUT_WINDOW = 64
SHOOT_OUT_CACHES = ("dynamic", "quantized", "sliding", "sink")  # the ones that behave differently over a run


@dataclass(frozen=True)
class Preset:
    """What one click puts on the page, and the sentence that says what to look for."""

    prompt: str
    columns: tuple[Column, ...]
    note: str
    mode: str = "auto"  # page prompt format: the chat template for instruct models, raw text for base models


def _greedy(model: str = "smollm2-135m", max_new_tokens: int = 64, **knobs: Any) -> Column:
    return cast(Column, {"model": model, "weights": "fp32", "backend": "torch", "strategy": "greedy",
                         "cache": "dynamic", "max_new_tokens": max_new_tokens, **knobs})


def _strategies() -> Preset:
    start_sampling = START_SETTINGS[1]
    return Preset(STORY_PROMPT, (
        _greedy(max_new_tokens=48),
        _greedy(max_new_tokens=48, strategy="sampling", temperature=0.7, top_k=50, top_p=0.9),
        _greedy(max_new_tokens=48, strategy="sampling", temperature=start_sampling["temperature"], top_k=50,
                top_p=start_sampling["top_p"]),
        _greedy(max_new_tokens=48, strategy="beam", num_beams=4),
    ), "An open-ended prompt: greedy takes the most likely token, the two samples (temperature 0.7 and 0.9, "
       "same seed) wander off it and from each other, beam search keeps the best of 4 running continuations.")


def _cache_shoot_out() -> Preset:
    knobs: dict[str, dict[str, Any]] = {
        "quantized": {"cache_bits": 4, "residual_length": 16},
        "sliding": {"window": SHOOT_OUT_WINDOW},
        "sink": {"window": SHOOT_OUT_WINDOW, "sink_tokens": 4},
    }
    columns = tuple(_greedy(max_new_tokens=64, cache=cache, **knobs.get(cache, {})) for cache in SHOOT_OUT_CACHES)
    left = [c for c in registry.cache_names() if c not in SHOOT_OUT_CACHES]
    return Preset(STORY_PROMPT, columns, (
        f"Greedy, 64 tokens, on the caches that behave differently. Dynamic grows with every token; 4-bit "
        f"quantized keeps its newest 16 tokens in full precision and drops in size each time it packs them "
        f"(the sawtooth in the KV plot); sliding keeps the last {SHOOT_OUT_WINDOW} tokens and sink the first 4 plus "
        f"the most recent, so both stop growing once the run outgrows the window (about 20 tokens in). Sliding's "
        f"text drifts from dynamic's as soon as it evicts; sink, which keeps the tokens attention leans on, stays "
        f"fluent for longer. "
        f"Not shown ({MAX_COLUMNS} columns at most): {', '.join(left)} (sized for the whole run from the start)."))


def _torch_vs_jax() -> Preset:
    torch_static = _greedy(cache="static")
    return Preset("Explain in a few sentences why the sky is blue.", (
        _greedy(), torch_static, {**torch_static, "backend": "jax"},
    ), "Greedy, fp32, 64 tokens: PyTorch generate (dynamic and static cache) against the jitted JAX decoder. The "
       "text is the same token for token; decode speed differs, and the JAX column shows its compile time "
       "(0 once compiled).")


def _three_compilers() -> Preset:
    eager_static = _greedy(cache="static")
    return Preset("Explain in a few sentences why the sky is blue.", (
        _greedy(), eager_static, {**eager_static, "torch_compile": "default"}, {**eager_static, "backend": "jax"},
    ), "Greedy, fp32, 64 tokens, three engines: PyTorch generate eager (dynamic and static cache), generate with "
       "torch.compile over the static cache (inductor: its decode step compiled on the first run, the compile "
       "time shown apart, 0 once compiled), and the jitted JAX decoder. The text is the same token for token; "
       "compare decode speed and TTFT in the table, and each compiler's compile time. For scale, on a 2-core AMD "
       "EPYC llama.cpp decoded these fp32 weights at 60 tok/s; the JAX decoder at 0.73x that, PyTorch eager at "
       "0.27x and torch.compile at 0.30x (scripts/peer-bench.sh).")


def _assisted() -> Preset:
    # no draft-model column: the only bundled pair (SmolLM2 drafting for Gemma-3, different tokenizers) re-tokenizes
    # every draft, and on a 2-core CPU it ran slower than Gemma-3 alone
    return Preset(COPY_PROMPT, (
        _greedy(max_new_tokens=56),
        _greedy(max_new_tokens=56, strategy="assisted", prompt_lookup=10),
        _greedy(max_new_tokens=56, strategy="assisted", prompt_lookup=3),
    ), "A passage to repeat, so most output tokens are already in the prompt: greedy alone, then with drafts looked "
       "up in the prompt (10 or 3 tokens at a time). The text stays the same; the share of drafts accepted and the "
       "forward passes (table) set the speed-up.")


def _beam_torch_vs_jax() -> Preset:
    beam = _greedy(max_new_tokens=32, strategy="beam", num_beams=4, num_return_sequences=2, cache="static")
    return Preset("Explain in a few sentences why the sky is blue.", (beam, {**beam, "backend": "jax"}), (
        "Beam search, 4 beams, fp32, 32 tokens: transformers' beam search against the same search as one jitted "
        "batch on JAX. The returned sequences, their scores and the beam trees match; the table puts their speeds "
        "side by side, the JAX column's compile time apart (0 once compiled)."))


def _assisted_torch_vs_jax() -> Preset:
    lookup = _greedy(max_new_tokens=56, strategy="assisted", prompt_lookup=10)
    return Preset(COPY_PROMPT, (
        _greedy(max_new_tokens=56, backend="jax", cache="static"), lookup,
        {**lookup, "backend": "jax", "cache": "static"},
    ), "Plain JAX greedy, then prompt lookup on PyTorch generate and on the JAX decoder, which checks all drafts in "
       "one jitted pass and rolls rejected ones back by moving the static cache's position. The tokens are the "
       "same in all three; compare tokens per forward pass and decode speed in the table.")


# tokens: holds the chat-formatted COPY_PROMPT (87 SmolLM2 tokens), and prompt + 56 new tokens outgrow it
EVERY_CACHE_WINDOW = 112


def _assisted_every_cache() -> Preset:
    lookup = _greedy(max_new_tokens=56, strategy="assisted", prompt_lookup=10, backend="jax")
    knobs: dict[str, dict[str, Any]] = {
        "static": {},
        "quantized": {"cache_bits": 4, "residual_length": 16},
        "sliding": {"window": EVERY_CACHE_WINDOW},
        "sink": {"window": EVERY_CACHE_WINDOW, "sink_tokens": 4},
    }
    columns = tuple(cast(Column, {**lookup, "cache": cache, **k}) for cache, k in knobs.items())
    return Preset(COPY_PROMPT, columns, (
        f"Prompt lookup (10 drafts) on the JAX decoder over four caches. Each column's text is plain greedy's over "
        f"its own cache (rejected drafts are rolled back exactly, bounded rings keep 10 spare slots for them): "
        f"sliding and sink evict once the passage outgrows their {EVERY_CACHE_WINDOW} tokens, and quantized reads "
        f"all but its newest 16 tokens at 4 bits. Compare drafts accepted and tokens per forward pass; each "
        f"column compiles on its first run."))


# a story whose last sentences repeat themselves: a small model continues by copying them, which the penalties
# against repetition are for
REPEATING_STORY = prompt_sets.prompt_set("repeating")[0]


def _against_repetition() -> Preset:
    sampled = _greedy(max_new_tokens=96, strategy="sampling", temperature=1.0, top_k=50)
    return Preset(REPEATING_STORY, (
        {**sampled, "dry_multiplier": 0.8},
        {**sampled, "repetition_penalty": 1.3},
        {**sampled, "no_repeat_ngram_size": 3},
        sampled,
    ), "A story that has begun repeating itself, continued at temperature 1.0 with the same seed, against "
       "repetition in three ways: DRY (penalises the token that would extend a sequence already in the text), the "
       "repetition penalty (every token already in the text, so it also pushes the story off its subject) and no "
       "repeated 3-grams (a ban), then nothing, which copies the repeated sentence again. Compare the texts, the "
       "table's repeated 4-grams and distinct bigrams, and a token's sampling cut: the mass each penalty moved.",
       mode="raw")


def _creative_samplers() -> Preset:
    hot = _greedy(max_new_tokens=64, strategy="sampling", temperature=1.5, top_k=0)
    return Preset(STORY_PROMPT, (
        {**hot, "top_p": 0.9},
        {**hot, "min_p": 0.1},
        {**hot, "top_n_sigma": 1.0},
        {**hot, "min_p": 0.05, "xtc_threshold": 0.1, "xtc_probability": 0.5},
    ), "Temperature 1.5 flattens the distribution. Top-p 0.9 still keeps a long tail of unlikely tokens, so its "
       "text drifts into noise; min-p and top-nσ cut relative to the best token and stay readable; XTC (with a "
       "min-p floor) sometimes removes the most likely tokens for variety. Click tokens to compare the cuts: "
       "how many tokens each stage removed and the mass it moved.")


# a story start that SmolLM2, continued as raw text, soon loops on under greedy decoding: the degeneration
# contrastive search was made for shows in the table's repeated 4-grams
LOOPING_START = "Once upon a time, a lighthouse keeper found a message in a bottle."


def _guide_methods() -> Preset:
    return Preset(LOOPING_START, (
        _greedy(),
        _greedy(strategy="contrastive", penalty_alpha=0.6, top_k=4),
        _greedy(strategy="diverse_beam", num_beams=4, num_beam_groups=4, diversity_penalty=1.0,
                num_return_sequences=2),
        _greedy(strategy="dola", dola_layers="high", repetition_penalty=1.2),
    ), "Methods of the transformers generation guide, up to 64 tokens each, all deterministic, on a story start "
       "continued as raw text. Greedy soon repeats its own sentences: the table's repeated 4-grams rise and its "
       "distinct bigrams fall. Contrastive search (α 0.6, 4 candidates) takes a less likely candidate whenever the "
       "likeliest resembles the text so far: it repeats no 4-gram. Diverse beam search (4 beams in 4 groups of "
       "one, diversity penalty 1.0: a group pays 1.0 for each earlier group's token it picks again) returns the "
       "best two groups' texts, which part within a few tokens; its tree is striped by group. DoLa (upper layers, "
       "repetition penalty 1.2) decodes from the final layer's difference to an early one. Marked tokens are "
       "where a method took another token than the model's top one: click one for the candidates' scores or the "
       "layer DoLa contrasted.", mode="raw")


FACT_PROMPT = "Answer in one sentence. Which planet is closest to the Sun, and how long is its year?"


def _dola_vs_greedy() -> Preset:
    penalised = _greedy(max_new_tokens=40, repetition_penalty=1.2)
    return Preset(FACT_PROMPT, (
        penalised,
        {**penalised, "strategy": "dola", "dola_layers": "high"},
        {**penalised, "strategy": "dola", "dola_layers": "low"},
    ), "A factual question, greedy against DoLa contrasting the upper or the lower half of the layers (each with "
       "the repetition penalty of 1.2 the guide pairs it with). DoLa decodes from what the last layers add to an "
       "early layer's guess, which the method's paper found brings out facts. Marked tokens are those where the "
       "contrast changed the final layer's own choice; the line under each token view names the layers it "
       "contrasted, and a click on a token shows every candidate layer's divergence.")


def _json_free_vs_schema() -> Preset:
    free = _greedy(max_new_tokens=60)
    return Preset(PERSON_PROMPT, (
        free,
        {**free, "constraint": "json_schema", "constraint_text": PERSON_SCHEMA},
        {**free, "constraint": "regex", "constraint_text": PERSON_REGEX},
    ), "The same request three times, greedy: free, where the model writes its JSON after a line of prose, so "
       "the output as a whole does not parse; "
       "under a JSON schema (name, age 0-120, city, nothing else), whose output always parses and validates; and "
       "under a regex that fixes the object's shape and allows an age of one or two digits. Each constrained card "
       "says whether its output is valid and how often the mask overrode the model (marked tokens; click one for "
       "its cut: the constraint is the first stage). The table adds the mask's cost, and the log-probability the "
       "unconstrained model gives each output.")


REVIEW_PROMPT = ("Classify the sentiment of this review as positive, negative or neutral.\n\nReview: The battery "
                 "lasts two days, but the screen scratches if you look at it.\nSentiment:")
SENTIMENTS = "positive\nnegative\nneutral"


def _pick_one() -> Preset:
    pick = _greedy(max_new_tokens=8, constraint="choice", constraint_text=SENTIMENTS)
    return Preset(REVIEW_PROMPT, (
        _greedy(max_new_tokens=8),
        pick,
        {**pick, "strategy": "sampling", "temperature": 1.0, "top_k": 0},
    ), "A classification prompt: free greedy may answer in a sentence; with the choice list positive, negative or "
       "neutral the answer is exactly one of them, greedy taking the most likely and sampling (temperature 1, "
       "same seed) drawing one in proportion. Click the first token for the cut: how much of the model's "
       "probability the mask removed.")


PRESETS: dict[str, Preset] = {
    "Greedy vs sampling vs beam": _strategies(),
    "Cache shoot-out": _cache_shoot_out(),
    "PyTorch vs JAX": _torch_vs_jax(),
    "Three compilers": _three_compilers(),
    "Beam on PyTorch vs JAX": _beam_torch_vs_jax(),
    "Assisted vs plain": _assisted(),
    "Assisted on PyTorch vs JAX": _assisted_torch_vs_jax(),
    "Assisted on every cache": _assisted_every_cache(),
    "Samplers against repetition": _against_repetition(),
    "Creative samplers at high temperature": _creative_samplers(),
    "The guide's methods": _guide_methods(),
    "DoLa vs greedy": _dola_vs_greedy(),
    "JSON, free vs schema": _json_free_vs_schema(),
    "Pick one": _pick_one(),
}


@dataclass(frozen=True)
class ContextPreset:
    """What one click puts on the Context tab: the caches with their knobs, the backends, the lengths measured
    for speed, the tokens teacher-forced for quality, and the sentence that says what to look for."""

    caches: dict[str, dict[str, Any]]
    backends: tuple[str, ...]
    lengths: str  # as typed in the lengths box: comma-separated
    tokens: int
    note: str
    model: str = "smollm2-135m"
    measures: tuple[str, ...] = ("speed", "quality")
    buckets: int = 8


# below every length measured, so both bounded caches have evicted by the first length
LONG_DOCUMENT_WINDOW = 256


def _long_document() -> ContextPreset:
    return ContextPreset(
        caches={"static": {}, "sliding": {"window": LONG_DOCUMENT_WINDOW},
                "sink": {"window": LONG_DOCUMENT_WINDOW, "sink_tokens": 4},
                "quantized": {"cache_bits": 4, "residual_length": 128}},
        backends=("jax",), lengths="512,1024", tokens=1024,
        note=(f"SmolLM2 on the first 1024 tokens of Hamlet, on the JAX decoder. Static keeps every position: its KV "
              f"bytes double from 512 to 1024 tokens and its roofline falls with them, and it loses nothing (KL 0). "
              f"Sliding and sink hold {LONG_DOCUMENT_WINDOW} positions at any length, so their bytes stay flat, and "
              f"on a quiet machine their speed too (where the tab warns of a busy machine, the speed figures are "
              f"unreliable: a bounded cache can even seem to speed up from 512 to 1024 tokens); but a plain window "
              f"collapses once the text's first tokens leave it (KL jumps after position "
              f"{LONG_DOCUMENT_WINDOW}, top-1 agreement falls), while 4 attention sinks beside the same window keep "
              f"it close to the full cache (StreamingLLM's finding). 4-bit quantized holds about a quarter of the "
              f"bytes and loses little. It takes about 7 minutes on a 2-core CPU, JAX compiles included; a later "
              f"run reuses the compiled programs from the compile cache."))


CONTEXT_PRESETS: dict[str, ContextPreset] = {
    "Long document: which cache keeps up?": _long_document(),
}
