"""Logits processors for the samplers transformers lacks: presence/frequency penalty, DRY, top-nσ and XTC."""

from __future__ import annotations

import math

import torch
from transformers import LogitsProcessor

# DRY's reference stops counting a match at this length (text-generation-webui, modules/sampler_hijack.py)
DRY_MAX_MATCH = 50

# the dry_sequence_breakers knob's default text: a JSON array of strings


def _number(name: str, value: object) -> float:
    """`value` as a float, refusing what is not a real number (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number; got {value!r}")
    return float(value)


def in_range(name: str, value: object, low: float, high: float, *, low_open: bool = False) -> float:
    """`value` as a float when it lies in [low, high] ((low, high] with low_open); NaN never does."""
    number = _number(name, value)
    above = number > low if low_open else number >= low
    if not (above and number <= high):
        allowed = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ValueError(f"{name} must lie in {allowed}; got {value!r}")
    return number


def _integer(name: str, value: object, low: int, high: int) -> int:
    """`value` when it is an int in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}]; got {value!r}")
    return value


class PresenceFrequencyPenaltyLogitsProcessor(LogitsProcessor):
    """OpenAI's and vLLM's additive penalties over the generated tokens only (the prompt is not counted):
    scores[t] -= frequency * count[t] + presence * (count[t] > 0)."""

    def __init__(self, presence: float, frequency: float, prompt_length: int) -> None:
        # any real number (the sampler lab takes llama.cpp's 5 and -5; a run keeps [-2, 2]); NaN is refused
        self.presence = in_range("presence", presence, -math.inf, math.inf)
        self.frequency = in_range("frequency", frequency, -math.inf, math.inf)
        if isinstance(prompt_length, bool) or not isinstance(prompt_length, int) or prompt_length < 0:
            raise ValueError(f"prompt_length must be an integer >= 0; got {prompt_length!r}")
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.prompt_length:]
        vocab = scores.shape[-1]
        # one spare column absorbs ids past the scores' vocabulary (they cannot be drawn), dropped after counting
        counts = torch.zeros((scores.shape[0], vocab + 1), dtype=torch.long, device=scores.device)
        counts.scatter_add_(1, generated.clamp(max=vocab), torch.ones_like(generated))
        counts = counts[:, :vocab]
        penalty = self.frequency * counts.to(scores.dtype) + self.presence * (counts > 0).to(scores.dtype)
        return scores - penalty


def _dry_match_lengths(ids: list[int], breakers: frozenset[int]) -> dict[int, int]:
    """For each token that would continue a repeat of the row's ending, the longest such repeat (the reference's
    loop: earlier occurrences of the last token, extended backwards while the tokens before both agree)."""
    best: dict[int, int] = {}
    if not ids or ids[-1] in breakers:
        return best
    last = ids[-1]
    for i in range(len(ids) - 1):
        if ids[i] != last:
            continue
        following = ids[i + 1]
        if following in breakers:
            continue
        length = 1
        while length < DRY_MAX_MATCH:
            j = i - length
            if j < 0:
                break
            previous = ids[-(length + 1)]
            if ids[j] != previous or previous in breakers:
                break
            length += 1
        best[following] = max(best.get(following, 0), length)
    return best


class DRYLogitsProcessor(LogitsProcessor):
    """"Don't Repeat Yourself" (p-e-w's DRY, as text-generation-webui implements it): a token that would extend a
    repeat of at least `allowed_length` tokens loses multiplier * base ** (length - allowed_length), over the whole
    row (prompt and generated); matches stop at sequence breakers."""

    def __init__(self, multiplier: float, base: float, allowed_length: int,
                 breakers: torch.Tensor | frozenset[int]) -> None:
        self.multiplier = in_range("multiplier", multiplier, 0.0, 5.0)
        self.base = in_range("base", base, 1.0, 10.0, low_open=True)
        # a match is at most DRY_MAX_MATCH long, so a longer allowed_length could never penalise
        self.allowed_length = _integer("allowed_length", allowed_length, 1, DRY_MAX_MATCH)
        if isinstance(breakers, torch.Tensor):
            breakers = frozenset(int(token) for token in breakers.flatten().tolist())
        elif not isinstance(breakers, frozenset):
            raise ValueError(f"breakers must be a tensor or a frozenset of token ids; got {breakers!r}")
        self.breakers = breakers

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.multiplier == 0.0:
            return scores
        vocab = scores.shape[-1]
        rows: list[int] = []
        tokens: list[int] = []
        penalties: list[float] = []
        for row, ids in enumerate(input_ids.tolist()):
            for token, length in _dry_match_lengths(ids, self.breakers).items():
                if length >= self.allowed_length and token < vocab:
                    rows.append(row)
                    tokens.append(token)
                    penalties.append(self.multiplier * self.base ** (length - self.allowed_length))
        if not rows:
            return scores
        # the penalty is computed in Python floats, rounded once to the scores' dtype, then subtracted
        penalty = torch.zeros_like(scores)
        penalty[rows, tokens] = torch.tensor(penalties, dtype=scores.dtype, device=scores.device)
        return scores - penalty


class TopNSigmaLogitsWarper(LogitsProcessor):
    """llama.cpp's top-nσ: keep the logits within n population standard deviations of the row's maximum, the mean
    and deviation taken over the finite logits only (those an earlier cut set to -inf do not count)."""

    def __init__(self, n: float) -> None:
        number = _number("n", n)
        if not (number > 0.0 and math.isfinite(number)):
            raise ValueError(f"n must be a finite number > 0 (0 turns top-nσ off: do not build the warper); got {n!r}")
        self.n = number

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        logits = scores.float()
        finite = torch.isfinite(logits)
        count = finite.sum(dim=-1, keepdim=True)
        mean = torch.where(finite, logits, 0.0).sum(dim=-1, keepdim=True) / count
        variance = torch.where(finite, (logits - mean) ** 2, 0.0).sum(dim=-1, keepdim=True) / count
        top = torch.where(finite, logits, -math.inf).amax(dim=-1, keepdim=True)
        # a row with no finite logit has a NaN threshold: nothing compares below it, the row stays as it is
        return scores.masked_fill(logits < top - self.n * variance.sqrt(), -math.inf)


class XTCLogitsWarper(LogitsProcessor):
    """llama.cpp's XTC ("exclude top choices"): with chance `probability` per step, of the tokens whose probability
    reaches `threshold`, all but the least likely are removed, steering away from the most predictable choices
    while keeping a viable one. The coin comes from torch's global RNG, so a seeded run repeats."""

    def __init__(self, threshold: float, probability: float) -> None:
        # above 0.5 at most one token can reach the threshold, and XTC needs two to act
        self.threshold = in_range("threshold", threshold, 0.0, 0.5, low_open=True)
        self.probability = in_range("probability", probability, 0.0, 1.0, low_open=True)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        coin = float(torch.rand(()))  # one draw per call, for the whole batch
        if coin > self.probability:
            return scores
        probs = torch.softmax(scores.float(), dim=-1)
        ordered, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        passing = (ordered >= self.threshold).sum(dim=-1, keepdim=True)
        # the passing tokens are a prefix of the order: drop its positions before the last one (none when < 2 pass)
        positions = torch.arange(scores.shape[-1], device=scores.device)
        drop_sorted = positions < passing - 1
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        return scores.masked_fill(drop, -math.inf)


class TopALogitsWarper(LogitsProcessor):
    """text-generation-webui's top-a: tokens less likely than top_a x (the best probability)² are removed."""

    def __init__(self, top_a: float, min_tokens_to_keep: int = 1) -> None:
        self.top_a = in_range("top_a", top_a, 0.0, 1.0, low_open=True)
        self.min_tokens_to_keep = _integer("min_tokens_to_keep", min_tokens_to_keep, 1, 1_000_000)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float(), dim=-1)
        best = probs.amax(dim=-1, keepdim=True)
        remove = probs < self.top_a * best * best
        if self.min_tokens_to_keep > 1:
            kept = torch.topk(scores, min(self.min_tokens_to_keep, scores.shape[-1]), dim=-1).indices
            remove = remove.scatter(-1, kept, False)
        return scores.masked_fill(remove, -math.inf)


class PLessLogitsWarper(LogitsProcessor):
    """p-less (mode 1): tokens less likely than Σp² are removed; p-less-norm (mode 2): less likely than
    (N·Σp² - 1) / (N - 1), N being the tokens still in the set. The best token always stays (Σp² <= max p; also
    where rounding puts a uniform row's Σp² a hair above its p)."""

    def __init__(self, mode: int) -> None:
        self.mode = _integer("mode", mode, 1, 2)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float(), dim=-1)
        square = (probs * probs).sum(dim=-1, keepdim=True)
        threshold = square
        if self.mode == 2:
            count = torch.isfinite(scores).sum(dim=-1, keepdim=True).float()
            threshold = torch.where(count > 1, (count * square - 1.0) / (count - 1.0).clamp(min=1.0), 0.0)
        best = scores >= scores.amax(dim=-1, keepdim=True)
        return scores.masked_fill((probs < threshold) & ~best, -math.inf)


def keep_best(scores: torch.Tensor) -> torch.Tensor:
    """A temperature of 0, as llama.cpp reads it: the best logit(s) of each row stay as they are, the rest go."""
    return scores.masked_fill(scores < scores.amax(dim=-1, keepdim=True), -math.inf)


class KeepBestLogitsWarper(LogitsProcessor):
    """The temperature stage at 0 (the sampler lab's edge; transformers' TemperatureLogitsWarper refuses 0):
    greedy as a distribution, the best token keeps p = 1."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return keep_best(scores)


class DynamicTemperatureLogitsWarper(LogitsProcessor):
    """llama.cpp's temp-ext (dynamic temperature): the logits divided by a temperature from max(0, base - range)
    to base + range as the candidates' entropy over ln(their count) goes from 0 to 1, raised to `exponent`. A row
    of one candidate is left alone; a temperature of 0 keeps only the best logit(s)."""

    def __init__(self, base: float, spread: float, exponent: float) -> None:
        self.base = in_range("temperature", base, 0.0, math.inf)  # 0 keeps the best logit(s)
        self.spread = in_range("dynatemp_range", spread, 0.0, 5.0, low_open=True)
        self.exponent = in_range("dynatemp_exponent", exponent, 0.0, 10.0, low_open=True)

    def temperature(self, scores: torch.Tensor) -> torch.Tensor:
        """(B, 1) the temperature each row gets."""
        logits = scores.float()
        finite = torch.isfinite(logits)
        log_p = torch.log_softmax(logits, dim=-1)
        entropy = -torch.where(finite, log_p.exp() * log_p, 0.0).sum(dim=-1, keepdim=True)
        count = finite.sum(dim=-1, keepdim=True).float()
        normalised = entropy / count.clamp(min=2.0).log()
        low = max(self.base - self.spread, 0.0)
        return low + (self.base + self.spread - low) * normalised.pow(self.exponent)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        temperature = self.temperature(scores)
        single = torch.isfinite(scores).sum(dim=-1, keepdim=True) <= 1
        scaled = torch.where(temperature > 0, scores / temperature.where(temperature > 0, 1.0), keep_best(scores))
        return torch.where(single, scores, scaled.to(scores.dtype))
