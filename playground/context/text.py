"""The context command's text as tokens, refused where it is too short for the request or would never fill the
cache's window. It is tokenized as a prompt without the chat template is (the tokenizer's own special tokens,
such as Gemma's BOS, included), and its first tokens are what every measurement reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from playground import registry
from playground.context.request import ContextRequest
from playground.errors import PlaygroundError
from playground.spec import RunSpec

if TYPE_CHECKING:
    from playground.models.loaded import LoadedModel


def text_ids(loaded: LoadedModel, text: str, request: ContextRequest, spec: RunSpec,
             where: str) -> tuple[list[int], int]:
    """The first token ids of the text that the request reads and the text's length in tokens; refuses a text
    too short for the request (`where` names the text: "--text-file 'x.txt'", "the pasted text"), or a window
    the text would never fill (it would measure the full cache again)."""
    ids = list(loaded.tokenizer(text).input_ids)
    longest = request.longest()
    if len(ids) < longest:
        raise PlaygroundError(f"{where} is {len(ids)} tokens for {loaded.name}; the request reads {longest} (the "
                              "longest length, or the quality tokens): give a longer text or ask for fewer tokens")
    check_window(request, spec)
    return ids[:longest], len(ids)


def check_window(request: ContextRequest, spec: RunSpec) -> None:
    """Refuse a window the text measured would never fill: it would measure the full cache again."""
    longest = request.longest()
    if "window" in registry.cache_type(spec.cache).knobs and spec.window >= longest:
        raise PlaygroundError(f"window={spec.window} is not smaller than the {longest} tokens of text measured: the "
                              "window would never fill and evict; lower the window or measure more tokens")
