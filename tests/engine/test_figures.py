"""The figures record: made from RunStats, plain values, and every field flows through the
history and its JSON export without code of its own (the "one place" of a new figure)."""

from __future__ import annotations

import json
import math
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.figures import FIGURES, AnswerFigures
from chatapp.engine.metrics import RunStats, StepTiming
from chatapp.engine.modes import Mode
from chatapp.session import formatting
from chatapp.store import ConversationDraft, HistoryStore, MessageDraft
from chatapp.store.export import parse_json, to_json
from chatapp.store.schema import CURRENT_VERSION, MIGRATIONS, migrate


def sample(index: int = 0) -> AnswerFigures:
    """A value of its type for every field: a new figure is covered without editing this."""
    values = {str: lambda i: f"text {i}", float: lambda i: 1.5 + i, int: lambda i: 3 + i}
    return AnswerFigures(**{f.name: values[f.kind](n + index) for n, f in enumerate(FIGURES)})


def test_every_measured_figure_comes_from_run_stats() -> None:
    stats = RunStats(mode=Mode.NAIVE, device="cpu", prompt_tokens=5, context_length=64)
    stats.prompt_logprobs.extend([-1.0, -2.0])
    stats.reused_tokens, stats.ttft_s = 2, 0.05
    for i in range(4):
        stats.token_ids.append(i)
        stats.logprobs.append(np.float32(-0.5))
        stats.latencies_s.append(0.01)
        stats.steps.append(StepTiming(0.001, 0.008, 0.001, h2d_bytes=100, d2h_bytes=40))
    stats.finish_reason = "length"
    figures = AnswerFigures.from_stats(stats)
    for figure in FIGURES:
        if figure.measured:
            assert hasattr(stats, figure.name), figure.name
            assert getattr(figures, figure.name) is not None, figure.name
            assert type(getattr(figures, figure.name)) is figure.kind, figure.name
    assert figures.mode == "naive" and type(figures.mode) is str  # a plain str, not the enum
    assert figures.perplexity == math.exp(0.5)
    assert figures.h2d_bytes_per_token == 100.0 and figures.transfer_bytes_per_token == 140.0
    assert figures.model is None  # the history fills it in
    assert AnswerFigures.from_stats(stats, "error").finish_reason == "error"


def test_unknown_figures_are_none_and_read_as_zero_where_summed() -> None:
    empty = AnswerFigures.from_stats(RunStats(mode="iobinding", device="cpu"))
    assert empty.perplexity is None and empty.prompt_perplexity is None  # not NaN
    assert AnswerFigures().is_empty() and AnswerFigures().tokens_in_context == 0
    assert AnswerFigures(perplexity=math.inf).perplexity is None
    assert AnswerFigures.from_mapping({"tokens_per_s": 2, "not_a_figure": 1}).tokens_per_s == 2.0


def test_every_figure_has_a_column_and_survives_the_history_and_json(tmp_path: Path) -> None:
    figures = sample()
    now = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        stored = store.add_conversation(
            ConversationDraft(
                "all figures",
                now,
                now,
                messages=(MessageDraft("user", "q"), MessageDraft("assistant", "a", figures)),
            )
        )
        loaded = store.load_conversation(stored.id)
    assert loaded.messages[1].figures == figures
    exported = json.loads(to_json(loaded))["conversation"]["messages"][1]["figures"]
    assert exported == figures.to_dict()
    assert parse_json(to_json(loaded)).messages[1].figures == figures


def test_figure_columns_follow_the_record_through_the_migrations(tmp_path: Path) -> None:
    def columns(conn: sqlite3.Connection) -> dict[str, str]:
        return {r[1]: r[2] for r in conn.execute("PRAGMA table_info(messages)")}

    conn = sqlite3.connect(tmp_path / "h.sqlite3", isolation_level=None)
    migrate(conn, "h", {1: MIGRATIONS[1]})
    # Version 1 writes its columns itself: they must be the record's `since=1` fields.
    first = {f.name: f.sql_type for f in FIGURES if f.since == 1}
    assert {k: v for k, v in columns(conn).items() if k in first} == first
    assert not {f.name for f in FIGURES if f.since > 1} & set(columns(conn))
    migrate(conn, "h")
    assert columns(conn).items() >= {f.name: f.sql_type for f in FIGURES}.items()
    assert max(f.since for f in FIGURES) <= CURRENT_VERSION
    conn.close()


@pytest.mark.parametrize(
    "logprobs",
    [[-1e6], [-800.0] * 3, [-1e308, -1e308], [-1500.0, -0.1], [-float("inf")]],
)
def test_a_perplexity_that_overflows_is_unknown_never_an_error(logprobs: list[float]) -> None:
    """A model with huge weights: exp(-mean logprob) is past a float's range."""
    stats = RunStats("naive", "cpu", logprobs=list(logprobs), prompt_logprobs=list(logprobs))
    assert stats.perplexity == math.inf
    figures = AnswerFigures.from_stats(stats)
    assert figures.perplexity is None and figures.prompt_perplexity is None
    assert stats.to_dict()["perplexity"] is None
    assert formatting.perplexity(stats.perplexity) == formatting.MISSING


def test_a_perplexity_just_inside_the_range_is_kept() -> None:
    stats = RunStats("naive", "cpu", logprobs=[-700.0])
    assert stats.perplexity == pytest.approx(math.exp(700.0))
    assert formatting.perplexity(stats.perplexity) == "> 1,000"
