"""Tiny random-weight models of many architectures, built from configs, for the JAX path's parity grid.

Each entry gives the PyTorch model; every one runs on the PyTorch path. The JAX path must give the same
greedy tokens for the model types it lists as verified, and refuse the others before compiling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_IDS = dict(vocab_size=257, eos_token_id=256, pad_token_id=256, bos_token_id=None)
_SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
_HEADED = dict(_SIZES, head_dim=16)


def _build(cls_name: str, config_name: str, **values: Any) -> Callable[[], Any]:
    def build() -> Any:
        import transformers

        config = getattr(transformers, config_name)(**values, **_IDS)
        return getattr(transformers, cls_name)(config).eval()
    return build


# name -> builder; the names say what each case exercises
GRID: dict[str, Callable[[], Any]] = {
    "llama": _build("LlamaForCausalLM", "LlamaConfig", **_SIZES),
    "gpt2": _build("GPT2LMHeadModel", "GPT2Config", n_embd=64, n_layer=2, n_head=4, n_positions=512),
    "mixtral": _build("MixtralForCausalLM", "MixtralConfig", **_SIZES, num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": _build("Qwen3MoeForCausalLM", "Qwen3MoeConfig", **_HEADED, moe_intermediate_size=32, num_experts=4,
                        num_experts_per_tok=2),
    "qwen2_sliding": _build("Qwen2ForCausalLM", "Qwen2Config", **_SIZES, use_sliding_window=True, sliding_window=4,
                            max_window_layers=1),
    "qwen3": _build("Qwen3ForCausalLM", "Qwen3Config", **_HEADED),
    "phi": _build("PhiForCausalLM", "PhiConfig", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4),
    "phi3": _build("Phi3ForCausalLM", "Phi3Config", **_SIZES),
    "mistral_sliding": _build("MistralForCausalLM", "MistralConfig", **_SIZES, sliding_window=4),
    "gemma": _build("GemmaForCausalLM", "GemmaConfig", **_HEADED),
    "gemma2_sliding": _build("Gemma2ForCausalLM", "Gemma2Config", **_HEADED, sliding_window=4),
    "gemma3_sliding": _build("Gemma3ForCausalLM", "Gemma3TextConfig", **_HEADED, sliding_window=4,
                             layer_types=["sliding_attention", "full_attention"]),
    "olmo": _build("OlmoForCausalLM", "OlmoConfig", **_SIZES),
    "olmo2": _build("Olmo2ForCausalLM", "Olmo2Config", **_SIZES),
    "gpt_neox": _build("GPTNeoXForCausalLM", "GPTNeoXConfig", hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4),
    "gpt_bigcode": _build("GPTBigCodeForCausalLM", "GPTBigCodeConfig", n_embd=64, n_layer=2, n_head=4),
    "bloom": _build("BloomForCausalLM", "BloomConfig", hidden_size=64, n_layer=2, n_head=4),
    "starcoder2": _build("Starcoder2ForCausalLM", "Starcoder2Config", **_SIZES),
    "stablelm": _build("StableLmForCausalLM", "StableLmConfig", **_SIZES),
    "cohere": _build("CohereForCausalLM", "CohereConfig", **_SIZES),
    "granite": _build("GraniteForCausalLM", "GraniteConfig", **_SIZES),
    "smollm3": _build("SmolLM3ForCausalLM", "SmolLM3Config", **_SIZES),
    # refused: each for its own reason
    "gpt_oss": _build("GptOssForCausalLM", "GptOssConfig", **_HEADED, num_local_experts=4, num_experts_per_tok=2,
                      sliding_window=4),
    "gptj": _build("GPTJForCausalLM", "GPTJConfig", n_embd=64, n_layer=2, n_head=4, rotary_dim=8),
    "falcon": _build("FalconForCausalLM", "FalconConfig", hidden_size=64, num_hidden_layers=2, num_attention_heads=4),
    "opt": _build("OPTForCausalLM", "OPTConfig", hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                  num_attention_heads=4, word_embed_proj_dim=64),
    "mamba": _build("MambaForCausalLM", "MambaConfig", hidden_size=64, num_hidden_layers=2),
}

# a prompt longer than the sliding windows above, so the windows evict during the prompt and the decode
PROMPT = torch.tensor([[5, 17, 99, 3, 44, 8, 120, 33, 9, 71]])


def build(name: str, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return GRID[name]()
