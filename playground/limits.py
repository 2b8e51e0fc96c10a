"""How much one request may ask for: the limits a public deployment tightens through the environment."""

from __future__ import annotations

import os

# a prompt's characters, checked before it is tokenized (the token limit below is the one that usually bites)
MAX_PROMPT_CHARS = 100_000
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


def max_new_tokens_cap() -> int:
    """Upper bound on generated tokens per request; a public Space must not be tied up for minutes."""
    return int(os.environ.get("PLAYGROUND_MAX_NEW_TOKENS", "1024"))


def max_prompt_tokens() -> int:
    return int(os.environ.get("PLAYGROUND_MAX_PROMPT_TOKENS", "2048"))


def max_request_seconds() -> float:
    """Wall-time limit of one generation; past it the run stops at the next token and says so."""
    return float(os.environ.get("PLAYGROUND_MAX_REQUEST_SECONDS", "600"))


def max_api_choices() -> int:
    """Choices one OpenAI-style request may ask for (n times its prompts): each is a run in the one queue."""
    return int(os.environ.get("PLAYGROUND_MAX_API_CHOICES", "8"))


def queue_size() -> int:
    """Requests that may wait for the generation slot (the page's queue and the OpenAI API's, together)."""
    return int(os.environ.get("PLAYGROUND_QUEUE_SIZE", "32"))
