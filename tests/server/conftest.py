"""A tiny model served on 127.0.0.1 for the module, and a reference engine beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from tests.serving import Served, serving


@pytest.fixture(scope="module")
def served(varied_model_dir: Path) -> Iterator[Served]:
    # The untied tiny model: its greedy answers change from token to token, bytes included.
    with serving(Engine(varied_model_dir, threads=1)) as s:
        yield s


@pytest.fixture(scope="module")
def reference(varied_model_dir: Path) -> Engine:
    """The same model in an engine of its own: what the server's answers must equal."""
    return Engine(varied_model_dir, threads=1)
