"""Step 2 of scripts/record-guide-references.sh, in the throwaway transformers 4.52 venv: rebuild every model
prepare.py described, check it against transformers 5 (weights digest, last-position logits, greedy tokens), then
record the generation guide's methods (plan.METHODS) as 4.52's core generate() runs them.

Usage: python scripts/guide_references/record.py INPUTS_DIR OUTPUT_JSON
Exits non-zero, writing nothing, when any check fails.
"""

from __future__ import annotations

import json
import logging
import platform
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import plan
import torch
import transformers
import weights
from transformers.generation import utils as generation_utils

ABOUT = ("Reference token ids from transformers 4.52's core generate() (contrastive search, diverse beam search, "
         "DoLa) for the parity tests of the torch and JAX paths; docs/guide-references.md says how to read it")
COMMAND = "scripts/record-guide-references.sh"


class Probe:
    """What 4.52's private helpers saw during one generate() call (diagnostics, not the reference itself)."""

    def __init__(self) -> None:
        self.margins: list[float] = []
        self.dola_layers: list[int] = []
        self.candidates: dict[int, torch.Tensor] = {}

    def reset(self) -> None:
        self.margins, self.dola_layers, self.candidates = [], [], {}


PROBE = Probe()
_ranking_fast = generation_utils._ranking_fast
_dola_select_contrast = generation_utils._dola_select_contrast
_relative_top_filter = generation_utils._relative_top_filter


def ranking_fast(context_hidden, next_hidden, next_top_k_probs, cosine_matrix_mask, alpha, beam_width):
    """4.52's contrastive re-ranking, unchanged; the gap between its best and second-best score is noted (the
    score recomputed as 4.52 computes it, and checked to pick the same candidate)."""
    selected = _ranking_fast(context_hidden, next_hidden, next_top_k_probs, cosine_matrix_mask, alpha, beam_width)
    norm_context = context_hidden / context_hidden.norm(dim=2, keepdim=True)
    norm_next = next_hidden / next_hidden.norm(dim=2, keepdim=True)
    cosine = torch.matmul(norm_context, norm_next.transpose(1, 2)).squeeze(-1)
    cosine = cosine + (1 - cosine_matrix_mask.to(cosine.dtype)) * torch.finfo(cosine.dtype).min
    score = (1.0 - alpha) * next_top_k_probs.view(-1) - alpha * cosine.max(dim=-1).values
    score = torch.stack(torch.split(score, beam_width))
    if not torch.equal(score.argmax(dim=-1), selected):
        raise SystemExit("record: the contrastive-score probe disagrees with 4.52's choice")
    top = score.topk(2, dim=-1).values
    PROBE.margins.append(float(top[0, 0] - top[0, 1]))
    return selected


def dola_select_contrast(candidate_premature_layers, candidate_premature_logits, final_logits):
    PROBE.candidates = candidate_premature_logits
    return _dola_select_contrast(candidate_premature_layers, candidate_premature_logits, final_logits)


def relative_top_filter(scores, baseline_scores, *args, **kwargs):
    """Notes which premature layer DoLa contrasted with at this step (by the identity of its logits)."""
    picked = [layer for layer, logits in PROBE.candidates.items() if logits is baseline_scores]
    if len(picked) == 1:
        PROBE.dola_layers.append(picked[0])
    return _relative_top_filter(scores, baseline_scores, *args, **kwargs)


generation_utils._ranking_fast = ranking_fast
generation_utils._dola_select_contrast = dola_select_contrast
generation_utils._relative_top_filter = relative_top_filter


class Warnings(logging.Handler):
    """transformers' logged warnings and Python warnings, each message once, with the record it first came in
    (4.52 logs some with warning_once: those appear at their first occurrence in the run only)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.current = "setup"
        self.seen: dict[str, dict[str, Any]] = {}

    def note(self, message: str) -> None:
        entry = self.seen.setdefault(message, {"message": message, "records": []})
        if self.current not in entry["records"]:
            entry["records"].append(self.current)

    def emit(self, record: logging.LogRecord) -> None:
        self.note(record.getMessage())


WARNINGS = Warnings()


def build(entry: dict[str, Any]) -> Any:
    """The 4.52 model from explicit config values, its weights from the recipe (tiny) or the converted file."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**entry["config_values"], rope_theta=entry["rope_theta"],
                         attn_implementation=entry["attn_implementation"])
    model = LlamaForCausalLM(config).eval()
    if config.rope_theta != entry["rope_theta"] or config.rope_scaling is not None:
        raise SystemExit(f"record: 4.52 config has rope_theta {config.rope_theta}, scaling {config.rope_scaling}")
    if entry["kind"] == "tiny":
        filled = weights.set_reference_weights(model, entry["weights"]["seed"], entry["weights"]["std"])
        if filled != entry["weights"]["filled"]:
            raise SystemExit(f"record: 4.52 fills {filled}, transformers 5 filled {entry['weights']['filled']}")
    else:
        from safetensors.torch import load_file

        missing, unexpected = model.load_state_dict(load_file(entry["weights_file"]), strict=False)
        allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
        if set(missing) - allowed or unexpected:
            raise SystemExit(f"record: loading {entry['weights_file']}: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
    if config.tie_word_embeddings and model.lm_head.weight is not model.model.embed_tokens.weight:
        raise SystemExit("record: 4.52 did not tie the embeddings")
    if model.config._attn_implementation != entry["attn_implementation"]:
        raise SystemExit(f"record: 4.52 attention is {model.config._attn_implementation}")
    return model


def base_kwargs(entry: dict[str, Any]) -> dict[str, Any]:
    values = entry["config_values"]
    return {"do_sample": False, "max_new_tokens": entry["max_new_tokens"], "eos_token_id": values["eos_token_id"],
            "pad_token_id": values["pad_token_id"]}


def generate(model: Any, ids: list[int], kwargs: dict[str, Any]) -> Any:
    PROBE.reset()
    input_ids = torch.tensor([ids])
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), return_dict_in_generate=True,
                             output_scores=True, **kwargs)
    for warning in caught:
        WARNINGS.note(f"{warning.category.__name__}: {warning.message}")
    return out


def new_tokens(sequence: torch.Tensor, prompt_len: int, eos: int) -> list[int]:
    """The tokens after the prompt, up to and including the first eos (beam outputs pad shorter rows after it)."""
    new = sequence[prompt_len:].tolist()
    return new[: new.index(eos) + 1] if eos in new else new


def score_margin(scores: tuple[torch.Tensor, ...]) -> float | None:
    """The smallest top-1 / top-2 gap over the steps' processed scores (steps with one finite score skipped)."""
    gaps = []
    for step in scores:
        top = step[0].float().topk(2).values
        if torch.isfinite(top[1]):
            gaps.append(float(top[0] - top[1]))
    return min(gaps) if gaps else None


def rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.3g}")


def greedy_check(name: str, entry: dict[str, Any], model: Any) -> list[dict[str, Any]]:
    """4.52's greedy tokens and last-position logits against transformers 5's, prompt by prompt."""
    reference_logits = torch.load(Path(sys.argv[1]) / entry["logits_file"])
    checks = []
    for pid, prompt in entry["prompts"].items():
        WARNINGS.current = f"{name}/{pid}/greedy"
        out = generate(model, prompt["ids"], {**base_kwargs(entry), **plan.GREEDY})
        got = new_tokens(out.sequences[0], len(prompt["ids"]), entry["config_values"]["eos_token_id"])
        with torch.no_grad():
            logits = model(torch.tensor([prompt["ids"]])).logits[0, -1].float()
        checks.append({"model": name, "prompt": pid, "max_new_tokens": entry["max_new_tokens"],
                       "transformers_4_52": got, "transformers_5": prompt["greedy"]["new_ids"],
                       "equal": got == prompt["greedy"]["new_ids"],
                       "last_logits_max_abs_diff": float((logits - reference_logits[pid]).abs().max()),
                       "min_margin": rounded(score_margin(out.scores))})
    return checks


def dola_candidates(model: Any) -> dict[str, list[int]]:
    """4.52's candidate premature layers for `low` and `high` (its rule, read off a one-step run)."""
    found = {}
    WARNINGS.current = "dola candidate layers"
    for which in ("low", "high"):
        PROBE.reset()
        generate(model, [0, 1], {"do_sample": False, "max_new_tokens": 1, "dola_layers": which,
                                 "repetition_penalty": 1.2, "pad_token_id": model.config.pad_token_id})
        found[which] = sorted(PROBE.candidates)
    return found


def beam_penalties(model: Any, ids: list[int], sequences: list[list[int]], scores: list[float],
                   length_penalty: float) -> dict[str, Any]:
    """Each returned sequence's own log-probability (one teacher-forced pass) and how much lower 4.52's score
    puts it: the Hamming diversity penalties its beam was charged on the way, which 4.52 keeps in the score."""
    logprobs, penalties = [], []
    for sequence, score in zip(sequences, scores, strict=True):
        with torch.no_grad():
            steps = model(torch.tensor([ids + sequence])).logits[0, len(ids) - 1:-1].float().log_softmax(-1)
        total = float(steps.gather(1, torch.tensor(sequence)[:, None]).sum())
        logprobs.append(round(total, 4))
        penalties.append(round(total - score * len(sequence) ** length_penalty, 3) + 0.0)
    return {"sequence_logprobs": logprobs, "diversity_penalty_in_score": penalties}


def record(name: str, entry: dict[str, Any], model: Any, pid: str, method: dict[str, Any]) -> dict[str, Any]:
    prompt = entry["prompts"][pid]
    record_id = f"{name}/{pid}/{method['method']}/{method['variant']}"
    WARNINGS.current = record_id
    kwargs = {**base_kwargs(entry), **method["kwargs"]}
    out = generate(model, prompt["ids"], kwargs)
    eos = entry["config_values"]["eos_token_id"]
    sequences = [new_tokens(row, len(prompt["ids"]), eos) for row in out.sequences]
    output: dict[str, Any] = {"sequences": sequences, "finished_by_eos": [eos in row for row in sequences]}
    diagnostics: dict[str, Any] = {}
    if method["method"] == "diverse_beam_search":
        output["sequences_scores"] = [float(s) for s in out.sequences_scores]
        diagnostics.update(beam_penalties(model, prompt["ids"], sequences, output["sequences_scores"],
                                          kwargs["length_penalty"]))
    elif method["method"] == "contrastive_search":
        diagnostics["min_margin"] = rounded(min(PROBE.margins))
    else:
        diagnostics["min_margin"] = rounded(score_margin(out.scores))
        diagnostics["premature_layers"] = PROBE.dola_layers
    tiny = ({"seed": entry["seed"], "overrides": entry["overrides"], "weights_seed": entry["weights"]["seed"],
             "weights_std": entry["weights"]["std"]} if entry["kind"] == "tiny" else None)
    return {"id": record_id, "model": name, "tiny": tiny, "method": method["method"], "variant": method["variant"],
            "prompt": pid, "prompt_ids": prompt["ids"], "max_new_tokens": entry["max_new_tokens"],
            "generate_kwargs": kwargs, "output": output, "diagnostics": diagnostics}


def model_summary(name: str, entry: dict[str, Any], model: Any) -> dict[str, Any]:
    keep = ("kind", "builder", "seed", "overrides", "weights", "loaded_as", "weights_file_sha256", "tokenizer",
            "config_values", "rope_theta", "attn_implementation", "dtype", "weights_digest", "max_new_tokens")
    summary = {key: entry[key] for key in keep if key in entry}
    if "weights_file" in entry:
        summary["weights_file"] = "<playground cache>/models/" + "/".join(Path(entry["weights_file"]).parts[-2:])
    summary["prompts"] = {pid: {"text": p["text"], "chat": p["chat"], "ids": p["ids"]}
                          for pid, p in entry["prompts"].items()}
    summary["dola_candidate_layers"] = dola_candidates(model)
    return summary


SCALAR = r"(?:-?[0-9][0-9.eE+-]*|true|false|null)"
SCALAR_LIST = re.compile(rf"\[\s*({SCALAR}(?:,\s*{SCALAR})*)\s*\]")


def dumps(data: Any) -> str:
    """Pretty, sorted keys, with lists of numbers and booleans (token ids, scores, flags) kept on one line."""
    text = json.dumps(data, indent=2, sort_keys=True)
    return SCALAR_LIST.sub(lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def main() -> None:
    inputs_dir, output = Path(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(plan.TORCH_THREADS)
    logging.getLogger("transformers").addHandler(WARNINGS)
    inputs = json.loads((inputs_dir / "inputs.json").read_text())
    models, checks, records, failures = {}, [], [], []
    for name in [*plan.TINY_MODELS, plan.BUNDLED_MODEL]:
        entry = inputs["models"][name]
        WARNINGS.current = f"{name}/build"
        model = build(entry)
        digest = weights.weights_digest(model)
        if digest != entry["weights_digest"]:
            failures.append(f"{name}: weights digest {digest} != transformers 5's {entry['weights_digest']}")
        for check in greedy_check(name, entry, model):
            checks.append(check)
            print(f"record: greedy {name}/{check['prompt']}: equal={check['equal']} "
                  f"max|dlogits|={check['last_logits_max_abs_diff']:.3g}", flush=True)
            if not check["equal"]:
                failures.append(f"{name}/{check['prompt']}: 4.52 greedy {check['transformers_4_52']} != "
                                f"transformers 5 greedy {check['transformers_5']}")
        if failures:
            break
        models[name] = model_summary(name, entry, model)
        for pid in entry["prompts"]:
            for method in plan.METHODS:
                records.append(record(name, entry, model, pid, method))
                print(f"record: {records[-1]['id']}", flush=True)
    if failures:
        raise SystemExit("record: the 4.52 models do not reproduce transformers 5; nothing written:\n  "
                         + "\n  ".join(failures))
    result = {"about": ABOUT, "command": COMMAND,
              "reference": {"transformers": transformers.__version__, "torch": torch.__version__,
                            "python": platform.python_version(), "device": "cpu", "dtype": "float32",
                            "torch_threads": plan.TORCH_THREADS},
              "checked_against": inputs["project"], "greedy_checks": checks, "models": models,
              "methods": plan.METHODS, "records": records, "reference_warnings": list(WARNINGS.seen.values())}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(dumps(result))
    print(f"record: wrote {len(records)} records, {len(checks)} greedy checks to {output}", flush=True)


if __name__ == "__main__":
    main()
