"""A history another process keeps locked (issue 37): with a worker to wait for the lock, the
caller's thread never waits for it; a brief lock passes without a word once the worker saw it
free, a long one is told once, as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.session import history_failures
from chatapp.session.chat import Chat, chat_on
from chatapp.session.history_failures import NORMAL_BUSY_TIMEOUT_S, QUICK_BUSY_TIMEOUT_S
from chatapp.session.history_sync import HistorySync
from chatapp.session.running import InlineRunner
from chatapp.store import HistoryStore
from chatapp.store.history_file import wait_for_write_lock
from tests.session.test_history_sync import GREEDY, Told


@pytest.fixture
def runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def chat(runner: InlineRunner, tiny_model_dir: Path) -> Iterator[Chat]:
    session = chat_on(runner)
    session.backend_session.open_model(tiny_model_dir, threads=1)
    runner.drain()
    yield session
    session.backend_session.host.engine = None


@pytest.fixture
def history(tmp_path: Path) -> Iterator[HistoryStore]:
    store = HistoryStore(tmp_path / "history.sqlite3")
    yield store
    store.close()


@pytest.fixture
def lock(history: HistoryStore) -> Iterator[sqlite3.Connection]:
    """Another process's connection; `BEGIN IMMEDIATE` on it holds the write lock."""
    other = sqlite3.connect(history.path, isolation_level=None)
    yield other
    if other.in_transaction:
        other.execute("ROLLBACK")
    other.close()


def busy_timeout_ms(store: HistoryStore) -> int:
    return int(store.diagnostics()["busy_timeout_ms"])


def locked_send(
    chat: Chat, runner: InlineRunner, history: HistoryStore, lock: sqlite3.Connection
) -> tuple[HistorySync, InlineRunner, Told]:
    told, waits = Told(), InlineRunner()
    sync = told.attach(HistorySync(chat, history, submit_wait=waits))
    lock.execute("BEGIN IMMEDIATE")
    assert chat.send("hello", GREEDY)
    runner.drain()
    return sync, waits, told


def test_this_thread_waits_only_briefly_and_a_worker_waits_for_the_lock(
    chat: Chat, runner: InlineRunner, history: HistoryStore, lock: sqlite3.Connection
) -> None:
    sync, waits, told = locked_send(chat, runner, history, lock)
    assert busy_timeout_ms(history) == round(QUICK_BUSY_TIMEOUT_S * 1000)
    assert sync.failure is not None and sync.unsaved_indices() == [0, 1]
    assert told.messages == []  # not yet: a worker waits for the lock first
    assert [job.name for job, _w, _r in waits.queue] == ["history lock wait"]  # one, not two
    lock.execute("ROLLBACK")  # the other process lets go
    waits.drain()
    assert sync.failure is None and sync.unsaved_indices() == []
    assert told.messages == []  # a brief lock passed without a word
    stored = history.load_conversation(chat.conversation.id or 0)
    assert [m.role for m in stored.messages] == ["user", "assistant"]


def test_a_lock_held_past_the_wait_is_told_once(
    chat: Chat,
    runner: InlineRunner,
    history: HistoryStore,
    lock: sqlite3.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(history_failures, "NORMAL_BUSY_TIMEOUT_S", 0.05)
    sync, waits, told = locked_send(chat, runner, history, lock)
    waits.drain()
    assert sync.failure is not None
    ((text, level),) = told.messages
    assert level == "error" and "busy" in text and "tries again" in text
    sync.retry()  # the window's timer, with the lock still held
    waits.drain()
    assert len(told.messages) == 1 and waits.queue == []
    lock.execute("ROLLBACK")
    assert sync.retry()
    assert told.messages[-1] == (
        "The chat history works again: every message is saved.",
        "info",
    )


def test_without_a_worker_writes_wait_as_before(
    chat: Chat, runner: InlineRunner, history: HistoryStore
) -> None:
    HistorySync(chat, history)
    assert busy_timeout_ms(history) == round(NORMAL_BUSY_TIMEOUT_S * 1000)


@pytest.mark.parametrize("held", [False, True])
def test_the_worker_says_whether_the_lock_came_free(
    history: HistoryStore, lock: sqlite3.Connection, held: bool
) -> None:
    if held:
        lock.execute("BEGIN IMMEDIATE")
    assert wait_for_write_lock(history.path, 0.05) is not held
