"""CLI contract: bad input exits 2 with a single `error:` line on stderr and no traceback.

The refusals run `main` in the test's own process (`cli`): each is parsed and refused before any model loads, and a
fresh Python for each took seconds of imports. The tests marked `subprocess` run `python -m playground` itself."""

import json
import subprocess

import pytest

import playground.__main__ as entry
from tests.helpers import run_cli, save_tiny_model

subprocess_test = pytest.mark.subprocess  # runs the CLI in a fresh Python


@pytest.fixture
def cli(monkeypatch, capsys):
    """`main(args)` in this process as the console script runs it (the process-wide thread and device settings
    left as the test worker has them), its exit code and output as a finished process's."""
    monkeypatch.setattr(entry.host, "apply_thread_limits", lambda *a, **k: None)
    monkeypatch.setattr(entry.device, "configure_process", lambda *a, **k: None)

    def run(*args: str) -> subprocess.CompletedProcess:
        try:
            entry.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["playground", *args], code, out, err)
    return run


@pytest.mark.parametrize(("args", "fragment"), [
    (["--max-new-tokens", "0"], "max_new_tokens=0 is out of range"),
    (["--max-new-tokens", "100000"], "max_new_tokens=100000 is out of range"),
    (["--strategy", "nucleus"], "invalid choice: 'nucleus'"),
    (["--cache", "paged"], "invalid choice: 'paged'"),
    (["--model", "no such model!"], "unknown model 'no such model!'"),
    (["--model", "org/name"], "cannot reach the Hugging Face hub"),
    (["--top-p", "abc"], "invalid float value: 'abc'"),
    (["--prefix-ids", "1,x"], "prefix ids must be whole numbers separated by commas"),
    (["--prefix-ids=-4"], "prefix_ids[0]=-4 is not a token id"),
    (["--backend", "jax", "--weights", "bf16"], "weights=bf16 cannot run: bf16 weights are not offered on the JAX"),
    (["--backend", "jax", "--weights", "nf4"], "weights=nf4 cannot run: nf4 is bitsandbytes' 4-bit layout"),
    (["--weights", "q4"], "backend=torch weights=q4 cannot run: q4 weights are the JAX engine's own 4-bit layout"),
    (["--backend", "jax", "--strategy", "beam", "--num-beams", "2", "--num-return-sequences", "3"],
     "raise num_beams or lower num_return_sequences"),
    (["--torch-compile", "--cache", "dynamic"], "torch.compile needs the static cache's fixed shapes"),
    (["--backend", "jax", "--cache", "static", "--torch-compile"], "torch.compile is PyTorch's compiler"),
    (["--torch-compile", "fastest"], "invalid choice: 'fastest'"),
    (["--regex", "[0-9"], "constraint_text is not a valid regular expression"),
    (["--grammar", "/no/such/grammar.lark"], "--grammar: cannot read '/no/such/grammar.lark'"),
    (["--regex", "a", "--choices", "b"], "not allowed with argument"),
    (["--cache", "quantized", "--cache-key-bits", "8", "--cache-value-bits", "2"],
     "cache_key_bits=8 with cache_value_bits=2 cannot run on backend torch"),
    (["--cache", "quantized", "--cache-value-bits", "3"], "cache_value_bits 3 is not one of: 0, 2, 4, 8"),
    (["--cache-dtype", "bf16", "--weights", "bf16"], "with weights='bf16' they are bfloat16 already"),
])
def test_bad_input_exits_2_with_one_error_line(cli, args, fragment):
    done = cli("run", "--prompt", "hi", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert done.stdout == ""


def test_empty_prompt_is_an_error(cli):
    done = cli("run", "--prompt", "")
    assert done.returncode == 2 and done.stderr.strip() == "error: prompt is empty; type some text to continue"


def test_models_lists_the_catalog(cli):
    done = cli("models")
    assert done.returncode == 0
    assert "smollm2-135m" in done.stdout and "gemma3-270m" in done.stdout


def test_bench_names_its_suites_when_given_another(cli):
    done = cli("bench", "--suite", "speed")
    assert done.returncode == 2 and "choose from 'default', 'caches', 'sweeps', 'compile'" in done.stderr


@pytest.mark.parametrize(("args", "fragment"), [
    (["--minutes", "0"], "--minutes must be above 0"), (["--url", "http://127.0.0.1:1"], "--url needs --pid")])
def test_soak_refuses_what_it_cannot_run(cli, args, fragment):
    done = cli("soak", *args)
    assert done.returncode == 2 and fragment in done.stderr


@subprocess_test
@pytest.mark.extended  # inductor's compile: test_presets' Three compilers preset and test_torch_compile.py keep it
def test_a_torch_compile_run_gives_eager_tokens_with_its_compile_time_apart(tmp_path):
    model = save_tiny_model(tmp_path / "tiny")
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PLAYGROUND_MODEL_ROOTS": str(tmp_path)}
    args = ("run", "--model", model, "--prompt", "hello", "--cache", "static", "--max-new-tokens", "16", "--json")
    eager = run_cli(*args, env=env)
    compiled = run_cli(*args, "--torch-compile", env=env, timeout=300)
    assert eager.returncode == 0 and compiled.returncode == 0, compiled.stderr[-2000:]
    eager_result, result = json.loads(eager.stdout), json.loads(compiled.stdout)
    assert result["spec"]["torch_compile"] == "default" and result["token_ids"] == eager_result["token_ids"]
    metrics = result["metrics"]
    assert metrics["compile_s"] > 0 and metrics["ttft_s"] < metrics["compile_s"]  # compiled before the prompt ran
    assert result["extra"]["torch_compile"]["graphs_compiled_in_run"] == 0


@subprocess_test
def test_a_prompt_file_is_the_prompt_and_its_limit_is_named(tmp_path):
    model = save_tiny_model(tmp_path / "tiny")
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PLAYGROUND_MODEL_ROOTS": str(tmp_path)}
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello there")
    args = ("run", "--model", model, "--max-new-tokens", "4", "--json")
    from_file = run_cli(*args, "--prompt-file", str(prompt), env=env)
    given = run_cli(*args, "--prompt", "hello there", env=env)
    assert from_file.returncode == 0, from_file.stderr[-2000:]
    assert json.loads(from_file.stdout)["token_ids"] == json.loads(given.stdout)["token_ids"]
    assert json.loads(from_file.stdout)["prompt_tokens"] == 11  # the byte tokenizer: one token per byte
    over = run_cli(*args, "--prompt-file", str(prompt), env={**env, "PLAYGROUND_MAX_PROMPT_TOKENS": "8"})
    assert over.returncode == 2 and over.stdout == ""
    assert over.stderr.strip().splitlines()[-1] == (  # after the load's progress lines
        "error: prompt is 11 tokens; the limit is 8 tokens (PLAYGROUND_MAX_PROMPT_TOKENS: shorten the prompt, or "
        "raise the setting up to the model's context)")


@pytest.mark.parametrize(("write", "fragment"), [
    (None, "no such file"), (b"", "is empty"), (b"\x00\x01\x02", "holds NUL bytes (binary data)")])
def test_a_bad_prompt_file_is_one_error_line(cli, tmp_path, write, fragment):
    path = tmp_path / "prompt.txt"
    if write is not None:
        path.write_bytes(write)
    done = cli("run", "--prompt-file", str(path))
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and line.startswith(f"error: --prompt-file '{path}'") and fragment in line


def test_prompt_and_prompt_file_exclude_each_other(cli):
    done = cli("run", "--prompt", "hi", "--prompt-file", "x.txt")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


@subprocess_test
def test_context_prints_the_quality_json(tmp_path):
    model = save_tiny_model(tmp_path / "tiny")
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PLAYGROUND_MODEL_ROOTS": str(tmp_path)}
    text = tmp_path / "text.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 4)
    done = run_cli("context", "--model", model, "--text-file", str(text), "--measure", "quality", "--tokens", "40",
                   "--buckets", "2", "--cache", "sliding", "--window", "8", "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["text"]["tokens"] == 212 and result["cache_knobs"] == {"window": 8, "cache_dtype": "fp32"}
    assert "speed" not in result
    quality = result["quality"]
    assert quality["tokens"] == 40 and [(b["start"], b["end"]) for b in quality["buckets"]] == [(1, 21), (21, 40)]
    assert "quality: 39/39 positions" in done.stderr  # progress goes to stderr


@pytest.mark.parametrize(("args", "fragment"), [
    (["--cache", "quantized", "--cache-bits", "3"], "cache_bits 3 is not one of: 2, 4, 8"),
    (["--lengths", "512,8192"], "--lengths 8192: a length and the 64 tokens decoded after it must fit smollm2-135m's "
                                "context of 8192 tokens; the longest length allowed is 8128"),
    (["--measure", "latency"], "--measure 'latency': give speed and/or quality"),
    (["--text-file", "/no/such/text.txt"], "--text-file '/no/such/text.txt': no such file"),
])
def test_context_refuses_bad_input_in_one_line(cli, args, fragment):
    done = cli("context", *args)
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and line.startswith("error: ") and fragment in line and done.stdout == ""


@subprocess_test
def test_the_console_entry_refuses_in_one_line_from_a_fresh_python():
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = run_cli("run", "--prompt", "hi", "--max-new-tokens", "0", env=env)
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == ""
    assert line.startswith("error: ") and "max_new_tokens=0 is out of range" in line
