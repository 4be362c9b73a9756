"""A tiny model served on 127.0.0.1 for the module, a reference engine beside it, and the
official openai client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def client(served: Served) -> Iterator[Any]:
    """The official openai client (a client nobody here wrote) on the served model."""
    openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")
    with openai.OpenAI(base_url=served.api, api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def model(served: Served) -> str:
    return served.worker.card.id


@pytest.fixture(scope="module")
def default_served(default_model_dir: Path) -> Iterator[Served]:
    """The default model (SmolLM2-135M, its own chat template) served; skips without it."""
    with serving(Engine(default_model_dir, threads=1)) as s:
        yield s
