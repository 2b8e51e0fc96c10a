"""Fixtures for every test; the helpers they build on live in tests/helpers.py."""

from __future__ import annotations

import os

import pytest

from tests.helpers import tiny_loaded


@pytest.fixture
def tiny():
    return tiny_loaded()


@pytest.fixture(autouse=True, scope="session")
def _isolated_env():
    """Tests never touch a hub; the conversion cache is the user's (so bundled models convert once).

    JAX's on-disk compilation cache is off in the test process: it would hold hundreds of programs of random
    tiny models that no later run asks for, and XLA's CPU executable deserializer has crashed the whole run
    (SIGSEGV) after about 30 minutes of such reads. The restart tests turn it on in the processes they start.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["PLAYGROUND_COMPILE_CACHE"] = "0"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield
