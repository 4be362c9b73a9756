"""Regenerate keeps the earlier answers: ‹ 2/3 › on the answer switches between them, the
choice is what the chat continues from, and the history, its exports and imports keep them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl

from chatapp.engine.engine import Engine
from chatapp.gui.chat.controller import State
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.store import HistoryStore
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling


@pytest.fixture
def window(make_window, tiny_model_dir: Path) -> MainWindow:
    win = make_window(["--model", str(tiny_model_dir)])
    assert win.chat.controller.backend_session.state is State.READY
    return win


def regenerate(qtbot, window: MainWindow, tokens: int) -> None:
    set_sampling(window, greedy(tokens))
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.regenerate_button.click()


def click_version(window: MainWindow, index: int, version: int) -> None:
    transcript = window.chat.chat_view.transcript
    emit(transcript.anchorClicked, QUrl(transcript.links.href("version", index, version)))


def stored_answer(path: Path):
    with HistoryStore(path) as store:
        [info] = store.list_conversations()
        return store.load_conversation(info.id).messages[1]


def test_regenerate_keeps_versions_switchable_saved_exported_and_imported(
    qtbot, window: MainWindow, history_file: Path, tmp_path: Path, monkeypatch
) -> None:
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "question")
    first = window.chat.conversation.messages[1].content
    regenerate(qtbot, window, 6)
    regenerate(qtbot, window, 9)
    answer = window.chat.conversation.messages[1]
    assert len(window.chat.conversation.messages) == 2
    assert answer.version_count == 3 and answer.version == 2
    contents = [v.content for v in answer.versions()]
    assert contents[0] == first and len(set(contents)) == 3  # 3, 6, 9 tokens
    window.chat.chat_view.flush()
    assert "Assistant   ‹ 3/3 ›" in window.chat.chat_view.transcript.toPlainText()
    row = stored_answer(history_file)
    assert row.content == contents[2] and row.version == 2
    assert [a.content for a in row.alternatives] == contents[:2]

    # ‹ : the second answer is shown, saved as the one shown, and sent from now on.
    click_version(window, 1, 1)
    window.chat.chat_view.flush()
    assert window.chat.conversation.messages[1].content == contents[1]
    assert "Assistant   ‹ 2/3 ›" in window.chat.chat_view.transcript.toPlainText()
    assert stored_answer(history_file).content == contents[1]
    seen: list[list[str]] = []
    original = Engine.chat

    def recording_chat(self, messages, *args, **kwargs):
        seen.append([m.content for m in messages])
        return original(self, messages, *args, **kwargs)

    monkeypatch.setattr(Engine, "chat", recording_chat)
    send_and_wait(qtbot, window, "next")
    assert seen[-1][-3:] == ["question", contents[1], "next"]
    monkeypatch.setattr(Engine, "chat", original)

    # A version number out of range, or a forged link, changes nothing.
    click_version(window, 1, 7)
    emit(window.chat.chat_view.transcript.anchorClicked, QUrl("version:1/0"))
    assert window.chat.conversation.messages[1].content == contents[1]

    # Reopened (as after a restart), exported as JSON and imported: the versions come along.
    ui = window.feature(HistoryUi)
    conversation_id = window.chat.conversation.id
    window.new_chat_action.trigger()
    assert ui.open(conversation_id)
    reopened = window.chat.conversation.messages[1]
    assert reopened.version == 1 and [v.content for v in reopened.versions()] == contents
    ui.ask_save_path = lambda *_args: str(tmp_path / "chat.json")
    ui.export_json_action.trigger()
    data = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
    exported = data["conversation"]["messages"][1]
    assert exported["content"] == contents[1] and exported["version"] == 1
    assert [a["content"] for a in exported["alternatives"]] == [contents[0], contents[2]]
    window.new_chat_action.trigger()
    ui.ask_open_path = lambda *_args: str(tmp_path / "chat.json")
    assert ui.import_conversation() is not None
    imported = window.chat.conversation.messages[1]
    assert imported.version == 1 and [v.content for v in imported.versions()] == contents
    window.chat.chat_view.flush()
    assert "‹ 2/3 ›" in window.chat.chat_view.transcript.toPlainText()

    # Markdown: the version shown, then the others under their own heading; a Markdown
    # export picked for Import is refused in one line that says what to import instead.
    ui.ask_save_path = lambda *_args: str(tmp_path / "chat.md")
    ui.export_markdown_action.trigger()
    markdown = (tmp_path / "chat.md").read_text(encoding="utf-8")
    assert "· version 2 of 3\n\n" + contents[1] in markdown
    others = markdown.split("#### Other versions (2)")[1]
    assert "> **Version 1 of 3**" in others and "> **Version 3 of 3**" in others
    assert others.index(contents[0].splitlines()[0]) < others.index(contents[2].splitlines()[0])
    listed = len(ui.controller.sync_core.conversations())
    ui.ask_open_path = lambda *_args: str(tmp_path / "chat.md")
    assert ui.import_conversation() is None
    assert "Could not import chat.md" in window.banner.text()
    assert "Markdown transcript" in window.banner.text() and "JSON export" in window.banner.text()
    assert len(ui.controller.sync_core.conversations()) == listed
