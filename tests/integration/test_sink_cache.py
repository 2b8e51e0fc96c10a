"""SinkCache on the bundled SmolLM2: fluent text far past the window (400 tokens through a 128-token window)."""

from __future__ import annotations

import pytest

from playground.backends.torch.caches.sink import SinkCache


@pytest.mark.slow
def test_bundled_smollm2_streams_fluently_past_the_window():
    from playground.models.loaded import LOADED

    loaded, _ = LOADED.get("smollm2-135m")
    tokenizer, model = loaded.tokenizer, loaded.model
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)["input_ids"]
    cache = SinkCache(model.config, window_length=128, num_sink_tokens=4)
    out = model.generate(prompt, past_key_values=cache, max_new_tokens=400, min_new_tokens=400, do_sample=False,
                         repetition_penalty=1.1)
    new = out[0, prompt.shape[1]:]
    print(tokenizer.decode(new))
    assert new.shape[0] == 400
    assert all(layer.keys.shape[-2] == 128 for layer in cache.layers)
    assert len(set(new[-200:].tolist())) > 20  # not collapsed into one repeated token or a short loop
