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
    """Tests never touch a hub; the conversion cache is the user's (so bundled models convert once)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield
