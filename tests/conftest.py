"""Shared fixtures: tiny random-weight models built from a config, and a byte-level tokenizer for them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def byte_tokenizer():
    """A real round-tripping tokenizer over 256 byte tokens + eos, built in memory (no hub, no files)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<eos>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<eos>")


def tiny_llama(seed: int = 0, **overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=256, pad_token_id=256, bos_token_id=None, **overrides)
    return LlamaForCausalLM(config).eval()


def tiny_gemma(seed: int = 0, sliding_window: int = 8):
    """Gemma3 layout in miniature: sliding layers (window 8) around one global layer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=sliding_window,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              max_position_embeddings=4096, eos_token_id=256, pad_token_id=256, bos_token_id=None)
    return Gemma3ForCausalLM(config).eval()


def tiny_loaded(name: str = "tiny-llama", model=None, instruct: bool = False):
    from playground.models.catalog import LoadedModel

    return LoadedModel(name, "fp32", model if model is not None else tiny_llama(), byte_tokenizer(), 0.0, instruct)


@pytest.fixture
def tiny():
    return tiny_loaded()


@pytest.fixture(autouse=True, scope="session")
def _isolated_env():
    """Tests never touch a hub; the conversion cache is the user's (so bundled models convert once)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield
