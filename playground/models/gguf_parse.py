"""One parse per GGUF file while a model converts: the hooks into gguf's reader and name table that transformers'
GGUF loading builds afresh for each part of the file (tests/unit/test_gguf_parse.py fails with the hook's name
when gguf or transformers changes one). Loading belongs to the models, so these live here, not with the
PyTorch backend's hooks.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

# gguf's file reader, which transformers' GGUF loading imports when it runs and builds afresh for each of the
# config, the weights and the tokenizer's config
GGUF_READER = "GGUFReader"
# gguf's table of tensor names for an architecture, which transformers' GGUF loading imports when it runs and
# builds afresh for every module of the model as it maps the weights' names
GGUF_NAME_MAP = "get_tensor_name_map"

_GGUF_LOCK = threading.Lock()


def _over_a_plain_array(reader_class: type) -> type:
    """gguf's reader, holding its memory map (the `data` it sets first) as a plain ndarray view of the map.

    The parse slices `data` once or more for every value of every field, and numpy's memmap runs Python code
    (`__array_finalize__`) for each slice where a plain view does not: Gemma3's parse, its 262k-token vocabulary,
    7.7 s -> 2.2 s. The view reads the same mapping, so nothing is copied and the file stays mapped.
    """
    class PlainArrayReader(reader_class):
        @property
        def data(self) -> np.ndarray:
            return self._plain_data

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._plain_data = value.view(np.ndarray)

    return PlainArrayReader


@contextmanager
def one_gguf_parse() -> Iterator[None]:
    """Within the block, each GGUF file is parsed once, however often transformers builds a reader for it.

    Loading a model and its tokenizer from a GGUF file parses the whole file three times (config, weights, the
    tokenizer's config), and gguf's reader walks every field in Python: Gemma3's 262k-token vocabulary takes
    seconds per parse. The readers only read, so one per file serves all three, and each parses over a plain
    view of its memory map (_over_a_plain_array). Mapping the weights' names builds gguf's name table for the
    architecture once per module of the model (SmolLM2: 397 tables, 6.3 s of a 14 s conversion); the tables
    are only read, so one per architecture and depth serves them all. The replacements are process-wide for the
    block, so blocks run one at a time.
    """
    import gguf

    with _GGUF_LOCK:
        original = getattr(gguf, GGUF_READER)
        original_name_map = getattr(gguf, GGUF_NAME_MAP)
        readers: dict[tuple[str, str], Any] = {}

        plain_reader = _over_a_plain_array(original)

        def reader(path: Any, mode: str = "r") -> Any:
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = plain_reader(path, mode)
            return readers[key]

        setattr(gguf, GGUF_READER, reader)
        setattr(gguf, GGUF_NAME_MAP, functools.cache(original_name_map))
        try:
            yield
        finally:
            setattr(gguf, GGUF_READER, original)
            setattr(gguf, GGUF_NAME_MAP, original_name_map)
