"""Fixtures for the history store tests: a store in tmp_path, a controllable clock, figures."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chatapp.store import Figures, HistoryStore

FULL_FIGURES = Figures(
    model="SmolLM2-135M-Instruct",
    device="cpu",
    mode="iobinding",
    tokens_per_s=123.456789,
    ttft_s=0.0421,
    perplexity=3.14159,
    prompt_perplexity=12.5,
    prompt_tokens=42,
    reused_tokens=10,
    generated_tokens=64,
    context_length=2048,
    finish_reason="eos",
    precision="exact",
    variant="model_gguf.onnx",
)


class FakeClock:
    """Starts at a fixed time and moves one second per call: readable, ordered timestamps."""

    def __init__(self, start: datetime = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite3"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(db_path: Path, clock: FakeClock) -> Iterator[HistoryStore]:
    s = HistoryStore(db_path, clock=clock)
    yield s
    s.close()


def raw(path: Path) -> sqlite3.Connection:
    """An independent connection, to check what is really in the file."""
    return sqlite3.connect(path, isolation_level=None)


def count_rows(path: Path, table: str) -> int:
    conn = raw(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()
