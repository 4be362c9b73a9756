"""No message is lost silently: a full disk, a read-only history, a failed import or a model
error each end with a banner in words, and the chat stays whole; while messages are not saved
they are marked, retried, and leaving the chat asks first (issue 12)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.engine import Engine
from chatapp.gui.chat.controller import State
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.store import HistoryStore
from chatapp.store.errors import wrap
from tests.gui.conftest import (
    ANSWER_TIMEOUT_MS,
    answer_unsaved,
    greedy,
    send_and_wait,
    set_sampling,
)


def loaded(make_window, model: Path) -> MainWindow:
    window = make_window(["--model", str(model)])
    assert window.chat.controller.backend_session.state is State.READY
    set_sampling(window, greedy(4))
    return window


def rows(path: Path) -> list[list[str]]:
    with HistoryStore(path) as store:
        return [
            [m.content for m in store.load_conversation(i.id).messages]
            for i in store.list_conversations()
        ]


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Every history write fails as SQLite does on a full disk while `full` is set."""
    state = {"full": False}
    real = HistoryStore._write

    @contextlib.contextmanager
    def write(self: HistoryStore) -> Iterator[sqlite3.Connection]:
        if state["full"]:
            full = sqlite3.OperationalError("database or disk is full")
            raise wrap(full, self.path) from full
        with real(self) as conn:
            yield conn

    monkeypatch.setattr(HistoryStore, "_write", write)
    return state


def test_a_full_disk_keeps_the_chat_marks_it_asks_and_saves_it_later(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path, disk: dict[str, bool]
) -> None:
    window = loaded(make_window, tiny_model_dir)
    ui = window.feature(HistoryUi)
    send_and_wait(qtbot, window, "saved question")
    disk["full"] = True
    long = "a question the history cannot save"
    send_and_wait(qtbot, window, long)
    # Said in words, kept on screen, marked.
    assert window.banner.isVisible() and window.banner.level == "error"
    assert "full" in window.banner.text() and "not saved" in window.banner.text()
    assert [m.content for m in window.chat.conversation.messages][2] == long
    window.chat.chat_view.flush()
    assert window.chat.chat_view.transcript.toPlainText().count("not saved") == 2
    assert ui.unsaved.retry_timer.isActive()
    assert rows(history_file) == [["saved question", window.chat.conversation.messages[1].content]]

    # New chat asks; "cancel" keeps everything.
    asked = answer_unsaved(window, "cancel")
    window.chat.chat_view.new_chat_button.click()
    assert len(asked) == 1 and "2 messages of this chat are not in the chat history" in asked[0][1]
    assert len(window.chat.conversation.messages) == 4
    # Closing asks too, and "cancel" keeps the window open.
    window.close()
    assert len(asked) == 2 and asked[1][0] == "Close chatapp" and window.isVisible()

    # Space again: the retry saves everything, and the window says so.
    disk["full"] = False
    ui.unsaved.retry()
    assert "works again" in window.banner.text() and window.banner.level == "info"
    assert not ui.unsaved.retry_timer.isActive()
    window.chat.chat_view.flush()
    assert "not saved" not in window.chat.chat_view.transcript.toPlainText()
    assert rows(history_file) == [[m.content for m in window.chat.conversation.messages]]
    window.chat.chat_view.new_chat_button.click()  # nothing unsaved: no question
    assert len(asked) == 2 and window.chat.conversation.messages == []


def test_a_read_only_history_is_shown_read_only_and_offers_an_export(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path, tmp_path: Path, monkeypatch
) -> None:
    history_file.parent.mkdir(parents=True)
    with HistoryStore(history_file) as store:
        old = store.create_conversation("an old chat")
        store.append_message(old.id, "user", "old question")
    real = os.access

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:  # a read-only folder
        if mode & os.W_OK and Path(path) in (history_file, history_file.parent):
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    window = loaded(make_window, tiny_model_dir)
    ui = window.feature(HistoryUi)
    assert ui.panel.titles() == ["an old chat"]  # shown, not hidden
    assert ui.panel.read_only_label.isVisible()
    assert not ui.import_action.isEnabled() and not ui.delete_action.isEnabled()
    assert ui.open(old.id) and window.chat.conversation.messages[0].content == "old question"

    window.new_chat_action.trigger()
    send_and_wait(qtbot, window, "new question")
    assert window.banner.level == "warning" and "read-only" in window.banner.text()
    window.chat.chat_view.flush()
    assert "not saved" in window.chat.chat_view.transcript.toPlainText()
    # Closing offers the export; the export holds the chat as shown.
    answer_unsaved(window, "export")
    ui.ask_save_path = lambda *_args: str(tmp_path / "kept.json")
    window.close()
    data = json.loads((tmp_path / "kept.json").read_text(encoding="utf-8"))
    contents = [m["content"] for m in data["conversation"]["messages"]]
    assert contents == [m.content for m in window.chat.conversation.messages]
    assert contents[0] == "new question"
    assert rows(history_file) == [["old question"]]  # the file is unchanged


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("garbage.json", b"\x00\xff\xfe not json", "Could not import garbage.json"),
        ("empty.json", b"", "Could not import empty.json"),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "Could not import deep.json"),
        ("<img src='file:::dev:zero'>.json", b"{}", "Could not import <img src="),
        ("missing.json", None, "Could not import missing.json"),
    ],
)
def test_import_failures_are_said_in_the_window(
    make_window, tiny_model_dir: Path, tmp_path: Path, name: str, content, says: str
) -> None:
    window = loaded(make_window, tiny_model_dir)
    ui = window.feature(HistoryUi)
    path = tmp_path / name  # a name with markup in it is shown as text (banner.py)
    if content is not None:
        path.write_bytes(content)
    ui.ask_open_path = lambda *_args: str(path)
    assert ui.import_conversation() is None
    assert window.banner.isVisible() and window.banner.level == "error"
    assert window.banner.text().startswith(says) and "\n" not in window.banner.text()
    assert ui.panel.titles() == []


def test_a_model_error_keeps_the_chat_and_says_so(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path, monkeypatch
) -> None:
    window = loaded(make_window, tiny_model_dir)
    send_and_wait(qtbot, window, "first")
    before = [m.content for m in window.chat.conversation.messages]

    def broken(*_args, **_kwargs):
        raise RuntimeError("the accelerator went away")

    monkeypatch.setattr(Engine, "chat", broken)
    window.chat.chat_view.set_prompt_text("second")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.send_button.click()
    assert window.banner.isVisible() and window.banner.level == "error"
    assert window.banner.text()
    assert [m.content for m in window.chat.conversation.messages][:2] == before
    assert rows(history_file)[0][:2] == before
