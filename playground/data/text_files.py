"""Text files a user hands the CLI (a prompt, a long document) read whole or refused in one line, and the long
text that ships with the package (texts/ beside this module: Hamlet, public domain, its licence beside it)."""

from __future__ import annotations

from pathlib import Path

from playground.errors import PlaygroundError

DEFAULT_TEXT = Path(__file__).parent / "texts" / "hamlet.txt"
# a text file is read whole: past this it is refused before it is read (the shipped text is 174 kB)
MAX_TEXT_FILE_BYTES = 64 << 20


def read_text_file(path: str | Path, flag: str, max_chars: int | None = None, limit_name: str = "") -> str:
    """The UTF-8 text of `path`, or a PlaygroundError naming `flag`, the file and what is wrong: missing, not a
    file, empty, binary (a NUL byte, or bytes that are not UTF-8), or over `max_chars` characters (`limit_name`
    says which limit that is)."""
    file = Path(path)
    where = f"{flag} {str(path)!r}"
    if not file.exists():
        raise PlaygroundError(f"{where}: no such file")
    if not file.is_file():
        raise PlaygroundError(f"{where} is not a file; give a UTF-8 text file")
    size = file.stat().st_size
    if size > MAX_TEXT_FILE_BYTES:
        raise PlaygroundError(f"{where} is {size} bytes; a text file may be at most {MAX_TEXT_FILE_BYTES} bytes")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise PlaygroundError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlaygroundError(f"{where} is not UTF-8 text (byte {exc.start} cannot be decoded); give a text "
                              "file") from None
    return checked_text(text, where, max_chars, limit_name)


def checked_text(text: str, where: str, max_chars: int | None = None, limit_name: str = "") -> str:
    """`text` (a file's, or pasted on the page), or a PlaygroundError naming `where`: binary (a NUL byte), empty,
    or over `max_chars` characters."""
    if "\x00" in text:
        raise PlaygroundError(f"{where} holds NUL bytes (binary data); give text")
    if not text.strip():
        raise PlaygroundError(f"{where} is empty; give some text")
    if max_chars is not None and len(text) > max_chars:
        raise PlaygroundError(f"{where} has {len(text)} characters; the limit is {max_chars}"
                              + (f" ({limit_name})" if limit_name else ""))
    return text
