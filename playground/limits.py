"""How much one request may ask for: the limits a public deployment tightens through the environment."""

from __future__ import annotations

import os

from playground.errors import PlaygroundError

# a prompt's characters per token allowed before it is tokenized: more than any tokenizer averages, so the
# token limit below is the one that bites, and a huge paste is still refused before it is tokenized
CHARS_PER_PROMPT_TOKEN = 16
# what a shared link may carry; longer prompts are pasted, not linked (a link's length is the browser's limit)
MAX_LINK_PROMPT_CHARS = 20_000


def is_public() -> bool:
    """A public deployment: a Hugging Face Space (SPACE_ID set) or PLAYGROUND_PUBLIC=1; PLAYGROUND_PUBLIC=0 turns
    it off (a private Space). It tightens the limits here and in the grammar, the sweep and the model catalog."""
    flag = os.environ.get("PLAYGROUND_PUBLIC", "").strip().lower()
    if flag in ("1", "true", "yes"):
        return True
    if flag in ("0", "false", "no"):
        return False
    return bool(os.environ.get("SPACE_ID"))


def _setting(name: str, default: str, kind: type[int] | type[float], means: str,
             zero: bool = False) -> int | float:
    """An environment setting's value, or one line naming the setting and what it takes (`zero`: 0 is allowed)."""
    text = os.environ.get(name, default)
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not zero):
        sign = "a non-negative" if zero else "a positive"
        raise PlaygroundError(f"{name}={text!r} is not {sign} {'whole ' if kind is int else ''}number; "
                              f"it sets {means}")
    return value


def max_new_tokens_cap() -> int:
    """Upper bound on generated tokens per request; a public Space must not be tied up for minutes."""
    return int(_setting("PLAYGROUND_MAX_NEW_TOKENS", "1024", int, "the most tokens a request may generate"))


def max_prompt_tokens() -> int:
    """Upper bound on a prompt's tokens (after the chat template): a public Space's prefill stays short. A
    local user raises it up to the model's context."""
    return int(_setting("PLAYGROUND_MAX_PROMPT_TOKENS", "2048", int, "the most tokens a prompt may have"))


def max_prompt_chars() -> int:
    """A prompt's characters, checked before it is tokenized."""
    return max(100_000, CHARS_PER_PROMPT_TOKEN * max_prompt_tokens())


def prompt_tokens_refusal(tokens: int) -> str:
    """The one line that refuses a prompt over the token limit, naming the limit and the setting."""
    return (f"prompt is {tokens} tokens; the limit is {max_prompt_tokens()} tokens (PLAYGROUND_MAX_PROMPT_TOKENS: "
            "shorten the prompt, or raise the setting up to the model's context)")


def max_request_seconds() -> float:
    """Wall-time limit of one generation; past it the run stops at the next token and says so."""
    return float(_setting("PLAYGROUND_MAX_REQUEST_SECONDS", "600", float, "a generation's time limit in seconds"))


def max_api_choices() -> int:
    """Choices one OpenAI-style request may ask for (n times its prompts): each is a run in the one queue."""
    return int(_setting("PLAYGROUND_MAX_API_CHOICES", "8", int, "the most choices one API request may ask for"))


def queue_size() -> int:
    """Requests that may wait for the generation slot (the page's queue and the OpenAI API's, together)."""
    return int(_setting("PLAYGROUND_QUEUE_SIZE", "32", int, "how many requests may wait for the generation slot",
                        zero=True))


def api_max_wait_seconds() -> float:
    """How long an OpenAI-style request may be expected to wait for the generation slot before it is refused with
    429 and Retry-After (0: whenever the slot is busy), so that a client is never left hanging behind long work."""
    return float(_setting("PLAYGROUND_API_MAX_WAIT_SECONDS", "60", float,
                          "how long an API request may wait for the generation slot, in seconds", zero=True))
