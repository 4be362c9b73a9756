"""The fake hub, running for a test, with HF_ENDPOINT pointing at it and no token of the user's
read (HF_TOKEN unset, HF_HOME in tmp_path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub.fake_hub import FakeHub, running


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder and a Hugging Face home of the test's own; returns the models folder."""
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    return models


@pytest.fixture
def fake_hub(hub_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with running(FakeHub()) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub
