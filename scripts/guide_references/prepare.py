"""Step 1 of scripts/record-guide-references.sh, in the project's venv (transformers 5): write what the
transformers 4.52 recorder needs to a folder, and the greedy tokens it must reproduce.

For every model of plan.py: the explicit Llama config values, the weights (tiny ones: seed and recipe, checked by
digest; the bundled SmolLM2: its converted safetensors file), the prompt ids (SmolLM2's through the project's
tokenizer and chat template: 4.52 cannot read that tokenizer's config), greedy decoding's new tokens, and the
last prompt position's logits. Usage: .venv/bin/python scripts/guide_references/prepare.py OUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

import plan
import torch
import weights

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the project's playground package and tests.helpers


def llama_values(config: Any) -> tuple[dict[str, Any], float]:
    """The explicit config values the 4.52 side is built from, and the rope theta; refuses what 4.52's
    LlamaConfig would need more than these for (another rope type, scaling)."""
    if config.model_type != "llama":
        raise SystemExit(f"prepare: expected a llama config, got {config.model_type}")
    rope = dict(config.rope_parameters)
    if rope.get("rope_type", "default") != "default" or set(rope) - {"rope_type", "rope_theta"}:
        raise SystemExit(f"prepare: rope parameters {rope} need more than rope_theta in 4.52")
    return {key: getattr(config, key) for key in plan.LLAMA_CONFIG_KEYS}, float(rope["rope_theta"])


def greedy(model: Any, ids: list[int], max_new_tokens: int, config_values: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's greedy decoding: the new tokens and the smallest top-1 / top-2 logit gap on the way."""
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                             max_new_tokens=max_new_tokens, eos_token_id=config_values["eos_token_id"],
                             pad_token_id=config_values["pad_token_id"], return_dict_in_generate=True,
                             output_scores=True, **plan.GREEDY)
    gaps = [float(top[0, 0] - top[0, 1]) for top in (s.float().topk(2, dim=-1).values for s in out.scores)]
    return {"new_ids": out.sequences[0, len(ids):].tolist(), "min_margin": min(gaps)}


def last_logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float().clone()


def describe(model: Any, name: str, prompts: dict[str, dict[str, Any]], max_new_tokens: int, out: Path,
             extra: dict[str, Any]) -> dict[str, Any]:
    """One model's entry: its config values, weight digest, prompts, greedy tokens; its logits go to a file."""
    values, rope_theta = llama_values(model.config)
    logits = {}
    for pid, prompt in prompts.items():
        prompt["greedy"] = greedy(model, prompt["ids"], max_new_tokens, values)
        logits[pid] = last_logits(model, prompt["ids"])
    torch.save(logits, out / f"{name}.logits.pt")
    return {**extra, "config_values": values, "rope_theta": rope_theta,
            "attn_implementation": model.config._attn_implementation, "dtype": str(model.dtype),
            "weights_digest": weights.weights_digest(model), "prompts": prompts, "max_new_tokens": max_new_tokens,
            "logits_file": f"{name}.logits.pt"}


def tiny_models(out: Path) -> dict[str, Any]:
    from tests.helpers import byte_tokenizer, tiny_llama

    tokenizer = byte_tokenizer()
    prompts = {pid: {"text": text, "chat": False, "ids": tokenizer(text).input_ids}
               for pid, text in plan.TINY_PROMPTS.items()}
    models = {}
    for name, spec in plan.TINY_MODELS.items():
        model = tiny_llama(spec["seed"], **spec["overrides"])
        filled = weights.set_reference_weights(model, spec["seed"], spec["std"])
        extra = {"kind": "tiny", "builder": "tests/helpers.py::tiny_llama", "seed": spec["seed"],
                 "overrides": spec["overrides"],
                 "weights": {"function": weights.FUNCTION, "seed": spec["seed"], "std": spec["std"],
                             "filled": filled}}
        models[name] = describe(model, name, json.loads(json.dumps(prompts)), plan.MAX_NEW_TOKENS["tiny"], out,
                                extra)
        print(f"prepare: {name} ready", flush=True)
    return models


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def bundled_model(out: Path) -> dict[str, Any]:
    from playground.models.convert import is_complete
    from playground.models.loaded import LOADED
    from playground.models.paths import converted_dir
    from playground.runner import encode_prompt

    name = plan.BUNDLED_MODEL
    loaded, _ = LOADED.get(name)
    directory = converted_dir() / name
    safetensors = directory / "model.safetensors"
    if not is_complete(directory) or not safetensors.is_file():
        raise SystemExit(f"prepare: no complete conversion of {name} at {directory}")
    prompts = {pid: {"text": text, "chat": True, "ids": encode_prompt(loaded, text, None)}
               for pid, text in plan.BUNDLED_PROMPTS.items()}
    extra = {"kind": "bundled", "loaded_as": f"playground.models.loaded.LOADED.get({name!r})",
             "weights_file": str(safetensors), "weights_file_sha256": file_sha256(safetensors),
             "tokenizer": "the project's (chat template, playground.runner.encode_prompt(loaded, prompt, None))"}
    entry = describe(loaded.model, name, prompts, plan.MAX_NEW_TOKENS["bundled"], out, extra)
    print(f"prepare: {name} ready", flush=True)
    return entry


def main() -> None:
    import transformers

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(plan.TORCH_THREADS)
    inputs = {"project": {"transformers": transformers.__version__, "torch": torch.__version__,
                          "python": platform.python_version()},
              "models": {**tiny_models(out), plan.BUNDLED_MODEL: bundled_model(out)}}
    (out / "inputs.json").write_text(json.dumps(inputs, indent=1, sort_keys=True))
    print(f"prepare: wrote {out / 'inputs.json'}", flush=True)


if __name__ == "__main__":
    main()
