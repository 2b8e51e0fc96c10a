"""PyTorch path on a tiny random model: cache parity, seeds, streaming, stop, and real cache sizes."""

import pytest
import torch

from playground.spec import RunSpec
from tests.helpers import torch_run

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64]])


def generate(loaded, spec, should_stop=lambda: False):
    return torch_run(loaded, PROMPT, spec, should_stop)


def test_static_and_dynamic_greedy_give_identical_tokens(tiny):
    dynamic, _ = generate(tiny, RunSpec(max_new_tokens=40, cache="dynamic"))
    static, _ = generate(tiny, RunSpec(max_new_tokens=40, cache="static"))
    assert len(dynamic.sequences[0]) == 40
    assert dynamic.sequences == static.sequences


def test_streamed_tokens_are_the_returned_tokens_with_one_time_each(tiny):
    out, emitted = generate(tiny, RunSpec(max_new_tokens=12))
    assert emitted == out.sequences[0]
    assert len(out.token_times) == 12
    assert out.token_times == sorted(out.token_times) and out.token_times[0] >= out.start_time


def test_seeded_sampling_repeats_and_seeds_differ(tiny):
    spec = RunSpec(strategy="sampling", max_new_tokens=30, temperature=1.5, top_k=0, seed=7)
    first, _ = generate(tiny, spec)
    again, _ = generate(tiny, spec)
    other, _ = generate(tiny, spec.replace(seed=8))
    assert first.sequences == again.sequences
    assert first.sequences != other.sequences


def test_top_k_one_sampling_equals_greedy(tiny):
    greedy, _ = generate(tiny, RunSpec(max_new_tokens=20))
    top1, _ = generate(tiny, RunSpec(strategy="sampling", top_k=1, max_new_tokens=20, seed=3))
    assert greedy.sequences == top1.sequences


def test_should_stop_ends_generation_early(tiny):
    calls = []

    def stop_after_five():
        calls.append(1)
        return len(calls) >= 5

    out, _ = generate(tiny, RunSpec(max_new_tokens=50), stop_after_five)
    assert out.stopped
    assert len(out.sequences[0]) <= 6


def test_kv_bytes_are_the_real_tensor_sizes(tiny):
    config = tiny.model.config
    per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * 16 * 4  # layers*(k,v)*heads*dim*fp32
    dynamic, _ = generate(tiny, RunSpec(max_new_tokens=10, cache="dynamic"))
    # the last generated token is never fed back, so the cache holds prompt + new - 1 positions
    assert dynamic.kv_cache_bytes == per_token * (PROMPT.shape[1] + 10 - 1)
    static, _ = generate(tiny, RunSpec(max_new_tokens=10, cache="static"))
    assert static.kv_cache_bytes == per_token * (PROMPT.shape[1] + 10)


def test_greedy_token_probabilities_are_the_top_choice(tiny):
    out, _ = generate(tiny, RunSpec(max_new_tokens=15))
    assert len(out.token_info) == 15
    for token, record in zip(out.sequences[0], out.token_info, strict=True):
        best_id, best_p, best_p_model = record["top"][0]
        assert best_id == token and record["p"] == best_p == best_p_model == record["p_model"]  # no processor
        assert 0 < record["p"] <= 1 and record["entropy"] >= 0


def test_sampled_tokens_have_the_probability_they_were_drawn_with(tiny):
    out, _ = generate(tiny, RunSpec(strategy="sampling", top_k=3, max_new_tokens=20, seed=5))
    for token, record in zip(out.sequences[0], out.token_info, strict=True):
        assert record["p"] > 0  # top-k filtered tokens have probability 0 and can never be drawn
        assert token in [i for i, _, _ in record["top"][:3]]


def test_cache_trace_grows_for_dynamic_and_stays_flat_for_static(tiny):
    dynamic, _ = generate(tiny, RunSpec(max_new_tokens=10))
    static, _ = generate(tiny, RunSpec(max_new_tokens=10, cache="static"))
    assert dynamic.kv_trace == sorted(dynamic.kv_trace) and dynamic.kv_trace[0] < dynamic.kv_trace[-1]
    assert len(set(static.kv_trace)) == 1 and static.kv_trace[0] == static.kv_cache_bytes


@pytest.mark.parametrize(("top_k", "expected"), [(0, False), (7, True)])
def test_top_k_0_turns_top_k_off_instead_of_taking_transformers_default(tiny, top_k, expected):
    """transformers builds none of the chain (no top-k of 50 by default); the chain has a top-k exactly when asked."""
    from transformers.generation.logits_process import TopKLogitsWarper

    from playground.backends.torch.chain import TorchContext, processors
    from playground.backends.torch.config import generation_config

    spec = RunSpec(strategy="sampling", top_k=top_k)
    config = generation_config(spec, tiny.model)
    built = tiny.model._get_logits_processor(generation_config=tiny.model._prepare_generation_config(config)[0],
                                             input_ids_seq_length=3, encoder_input_ids=None,
                                             prefix_allowed_tokens_fn=None, logits_processor=None)
    assert not any(isinstance(p, TopKLogitsWarper) for p in built)
    chain = processors(spec, TorchContext(3, (256,), None, torch.device("cpu")))
    assert any(isinstance(p, TopKLogitsWarper) for _, p in chain) is expected


class _SlowBuild:
    """quanto's extension as a fresh install has it: not built, and a while to build."""

    name = "quanto_cpp"

    def __init__(self, folder, seconds: float) -> None:
        self.build_directory, self.seconds, self.builds = str(folder), seconds, 0

    @property
    def lib(self):
        import time

        self.builds += 1
        time.sleep(self.seconds)
        return object()


def test_the_quantized_caches_kernel_build_is_reported_as_compile_time_outside_the_timings(tiny, monkeypatch,
                                                                                          tmp_path):
    """A first 2/4-bit quantized run builds quanto's kernels before generating: announced, counted as compile
    time (as the JAX path counts its compiles), and left out of time to first token."""
    from optimum.quanto.library import extensions

    from playground.backends import slow_stages
    from playground.backends.torch.backend import TorchBackend
    from playground.backends.torch.caches.kernels import BUILD_NOTE
    from playground.result import build_metrics

    build = _SlowBuild(tmp_path, 0.5)
    monkeypatch.setattr(extensions, "get_extension", lambda name: build)
    monkeypatch.setattr(slow_stages, "ANNOUNCE_AFTER_S", 0.1)
    (tmp_path / "quanto_cpp.so").write_bytes(b"")  # a built file is there (a shared build directory): still slow
    heard: list[str] = []
    spec = RunSpec(cache="quantized", cache_bits=4, residual_length=4, max_new_tokens=12, min_new_tokens=12)
    out = TorchBackend().generate(tiny, PROMPT[0].tolist(), spec, lambda ids: None, lambda: False,
                                  progress=lambda fraction, message: heard.append(message))
    metrics = build_metrics(out, out.token_times[-1], 0.0, None)
    assert build.builds == 1 and heard[0] == BUILD_NOTE and heard[-1].startswith("built quanto's CPU kernels")
    assert out.compile_s >= 0.5 and metrics["compile_s"] >= 0.5
    assert 0 <= metrics["ttft_s"] < 0.5 < metrics["total_s"]  # the build is in the run's window, not its TTFT
    plain = TorchBackend().generate(tiny, PROMPT[0].tolist(), spec.replace(cache="dynamic"), lambda ids: None,
                                    lambda: False)
    assert plain.compile_s == 0.0 and build.builds == 1  # other caches need no kernels


def test_a_quick_stage_says_nothing_and_a_slow_one_says_what_it_is_doing_and_how_long_it_took(monkeypatch):
    import time

    from playground.backends import slow_stages

    monkeypatch.setattr(slow_stages, "ANNOUNCE_AFTER_S", 0.05)
    heard: list[str] = []

    def hear(fraction: float, message: str) -> None:
        heard.append(message)

    with slow_stages.announced_if_slow(hear, "waiting", "took {seconds:.1f}"):
        pass
    assert heard == []
    with slow_stages.announced_if_slow(hear, "waiting", "took {seconds:.1f}"):
        time.sleep(0.3)
    assert heard[0] == "waiting" and heard[1].startswith("took 0.")


def test_eager_columns_never_let_generate_compile_the_forward_by_itself(tiny):
    """On an accelerator generate() compiles the forward whenever the cache is static; our config turns that off.
    Here the accelerator is stood in for by a compile config that asks for every device."""
    from transformers import CompileConfig, StaticCache

    from playground.backends.torch.config import generation_config

    config = generation_config(RunSpec(cache="static"), tiny.model)
    config.compile_config = CompileConfig()
    config.compile_config._compile_all_devices = True
    cache = {"past_key_values": StaticCache(config=tiny.model.config, max_cache_len=32)}
    assert config.disable_compile is True
    assert tiny.model._valid_auto_compile_criteria(cache, config) is False
    config.disable_compile = False  # what transformers would do with our config otherwise
    assert tiny.model._valid_auto_compile_criteria(cache, config) is True


def test_the_kernel_build_promises_no_duration():
    """"about a minute" was said and 146 s was taken: the note names the build, the page adds its seconds."""
    from playground.backends.torch.caches.kernels import build_note

    for kind in ("cpu", "cuda"):
        assert "minute" not in build_note(kind) and build_note(kind).endswith("(once per environment)")
