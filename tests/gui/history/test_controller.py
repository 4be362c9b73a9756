"""HistoryController on its own (no window, no model): keeping the store in step with memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.controller import ChatController
from chatapp.gui.history.controller import HistoryController
from chatapp.session.conversation import Conversation
from chatapp.store import HistoryStore


@pytest.fixture
def chat(qtbot) -> Iterator[ChatController]:
    controller = ChatController()
    yield controller
    assert controller.shutdown()


def test_messages_of_an_empty_stored_conversation_are_appended_to_it(
    chat: ChatController, tmp_path: Path
) -> None:
    # A conversation stored without messages (created elsewhere), shown with two in memory:
    # syncing appends them to that stored conversation rather than starting a new one.
    store = HistoryStore(tmp_path / "history.sqlite3")
    history = HistoryController(chat, store)
    try:
        info = store.create_conversation("Empty so far")
        conversation = Conversation(id=info.id)
        conversation.add_user("Hello?")
        figures = AnswerFigures("naive", "cpu", 10.0, 0.1, 2.0, 3.0, 5, 0, 2, 512, "eos")
        conversation.add_answer("Hi.", figures)
        chat.chat.conversation = conversation
        history.sync_core.sync()
        stored = store.load_conversation(info.id)
        assert [m.content for m in stored.messages] == ["Hello?", "Hi."]
        assert [m.id for m in conversation.messages] == [m.id for m in stored.messages]
        assert stored.messages[1].figures is not None
        assert stored.messages[1].figures.mode == "naive"
        assert [c.id for c in store.list_conversations()] == [info.id]

        # Both taken back (a first question that failed): the conversation goes again.
        conversation.messages.clear()
        history.sync_core.sync()
        assert store.list_conversations() == [] and conversation.id is None
    finally:
        history.sync_core.close()


def test_rename_reports_success_and_store_failures(chat: ChatController, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    history = HistoryController(chat, store)
    messages: list[str] = []
    history.events.message.connect(lambda text, _level: messages.append(text))
    try:
        info = store.create_conversation("Old")
        assert history.sync_core.rename(info.id, "  New   title ")
        assert store.load_conversation(info.id).title == "New title"
        assert not history.sync_core.rename(
            info.id + 99, "Nobody"
        )  # the store says it is not there
        assert messages and "not" in messages[-1].lower()
        assert not history.sync_core.rename(info.id, "   ")
    finally:
        history.sync_core.close()


def test_a_locked_history_is_waited_for_on_the_tools_thread(
    qtbot, chat: ChatController, tmp_path: Path
) -> None:
    """Issue 37: the GUI thread's writes wait 50 ms at most; the tools runner waits for the
    lock, and once it is free the messages are saved without a word."""
    import sqlite3

    store = HistoryStore(tmp_path / "history.sqlite3")
    history = HistoryController(chat, store)
    messages: list[str] = []
    history.events.message.connect(lambda text, _level: messages.append(text))
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        assert store.diagnostics()["busy_timeout_ms"] == 50
        other.execute("BEGIN IMMEDIATE")
        conversation = Conversation()
        conversation.add_user("Hello while it is locked")
        chat.chat.conversation = conversation
        history.sync_core.sync()
        assert history.sync_core.failure is not None and messages == []
        other.execute("ROLLBACK")  # while the tools thread waits
        qtbot.waitUntil(lambda: history.sync_core.failure is None, timeout=10_000)
        assert messages == []
        (info,) = store.list_conversations()
        assert [m.content for m in store.load_conversation(info.id).messages] == [
            "Hello while it is locked"
        ]
    finally:
        other.close()
        history.sync_core.close()
