"""What scripts/record-guide-references.sh records: the models, the prompts and the generation guide's methods.

Plain Python (no torch, no transformers): prepare.py (the project's venv) and record.py (the transformers 4.52
venv) both import it. Changing anything here changes tests/references/guide_methods.json: rerun the script.
"""

from __future__ import annotations

from typing import Any

# tiny Llamas: tests/helpers.py::tiny_llama(seed, **overrides), then weights.set_reference_weights(model, seed,
# std). Three layouts, for DoLa's choice of premature layers in 4.52 (untied embeddings start at layer 0, tied ones
# at 2 when the model has more than 2 layers; `low` = range(start, N // 2, 2), `high` = range(N // 2, N, 2)):
#   tiny-2l:      low [0] (the embeddings' output), high [1]
#   tiny-8l:      low [0, 2], high [4, 6]: a choice between two candidates by Jensen-Shannon divergence, step by
#                 step. With std 0.02 the choice never changed over 64 steps (always the first candidate, so a
#                 wrong choice would pass unseen); with std 0.1 it changes from step to step
#   tiny-4l-tied: start == N // 2, so low [2] and high [2]
TINY_MODELS: dict[str, dict[str, Any]] = {
    "tiny-2l": {"seed": 0, "std": 0.02, "overrides": {}},
    "tiny-8l": {"seed": 1, "std": 0.1, "overrides": {"num_hidden_layers": 8}},
    "tiny-4l-tied": {"seed": 2, "std": 0.02, "overrides": {"num_hidden_layers": 4, "tie_word_embeddings": True}},
}

# tiny prompts: ids over the byte tokenizer's 256 byte tokens (tests/helpers.py::byte_tokenizer), given as ids;
# the text is what byte_tokenizer() encodes to them, kept for reading only
TINY_PROMPTS: dict[str, str] = {
    "p0": "Once upon a time",
    "p1": "ab ab ab ab",  # repetitive: contrastive search's degeneration penalty has something to push against
}

BUNDLED_MODEL = "smollm2-135m"
# through the chat template, as playground.runner.encode_prompt(loaded, prompt, None) does for an instruct model
BUNDLED_PROMPTS: dict[str, str] = {
    "p0": "What is the capital of France?",
    "p1": "Write a short poem about the sea.",
}

MAX_NEW_TOKENS = {"tiny": 32, "bundled": 32}

# the generation guide's methods; every record passes these explicitly, plus do_sample=False, the model's
# eos_token_id / pad_token_id, max_new_tokens and an all-ones attention mask; everything else is at 4.52's
# GenerationConfig default, where it adds no logits processor to these methods (top_k's default 50 only acts when
# sampling)
METHODS: list[dict[str, Any]] = [
    {"method": "contrastive_search", "variant": "alpha0.6-k4",
     "kwargs": {"penalty_alpha": 0.6, "top_k": 4, "num_return_sequences": 1}},
    {"method": "contrastive_search", "variant": "alpha0.3-k6",
     "kwargs": {"penalty_alpha": 0.3, "top_k": 6, "num_return_sequences": 1}},
    {"method": "diverse_beam_search", "variant": "beams4-groups2-div1.0",
     "kwargs": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0, "num_return_sequences": 4,
                "length_penalty": 1.0, "early_stopping": False}},
    {"method": "dola", "variant": "low-rep1.2",
     "kwargs": {"dola_layers": "low", "repetition_penalty": 1.2}},
    {"method": "dola", "variant": "high-rep1.2",
     "kwargs": {"dola_layers": "high", "repetition_penalty": 1.2}},
]

# the greedy check's kwargs (with the same explicit eos/pad, max_new_tokens and mask)
GREEDY: dict[str, Any] = {"num_beams": 1}

# every Llama config value the 4.52 side is given explicitly (a transformers 5 config.json would load in 4.52
# with defaults for what moved, e.g. rope_theta, which lives in rope_parameters there)
LLAMA_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
    "tie_word_embeddings", "attention_bias", "attention_dropout", "mlp_bias", "bos_token_id", "eos_token_id",
    "pad_token_id",
)

TORCH_THREADS = 1  # as each pytest-xdist worker runs (tests/conftest.py); also keeps the recording's CPU use modest
