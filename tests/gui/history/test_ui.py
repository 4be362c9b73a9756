"""The chat history in the window (tiny model): saving, the conversation list, edit and
regenerate, export/import, the context policy, and faults (kill, corrupt file, two instances)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QLineEdit,
    QListWidget,
    QMessageBox,
    QPushButton,
    QSplitter,
    QWidget,
)

import chatapp
from chatapp.engine import loops
from chatapp.engine.engine import Engine
from chatapp.gui.chat.controller import State
from chatapp.gui.chat.transcript import CUT_TEXT
from chatapp.gui.common.geometry import splitter_panes
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.settings import SETTINGS_ENV
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.session.answer import AnswerRequest
from chatapp.store import ConversationDraft, Figures, HistoryStore, MessageDraft
from tests.gui.conftest import (
    ANSWER_TIMEOUT_MS,
    counted_transcript,
    greedy,
    send_and_wait,
    set_sampling,
)

REPO = Path(chatapp.__file__).resolve().parent.parent


def _known(report: object) -> bool:
    return report is not None


def history(window: MainWindow) -> HistoryUi:
    return window.feature(HistoryUi)


def stored(path: Path) -> list[tuple[str, list[tuple[str, str, Figures | None]]]]:
    """Every conversation in the file, read by a separate connection (like a restart)."""
    with HistoryStore(path) as store:
        out = []
        for info in store.list_conversations():
            conv = store.load_conversation(info.id)
            out.append((info.title, [(m.role, m.content, m.figures) for m in conv.messages]))
        return out


def click_row(qtbot, window: MainWindow, conversation_id: int) -> None:
    panel = history(window).panel
    item = panel.item_for(conversation_id)
    assert item is not None, panel.titles()
    rect = panel.list.visualItemRect(item)
    qtbot.mouseClick(panel.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


@pytest.fixture
def slow_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    original = loops.KVLoop.forward

    def slow_forward(self, new_ids, all_logits=False, rows=None):
        time.sleep(0.004)
        return original(self, new_ids, all_logits, rows)

    monkeypatch.setattr(loops.KVLoop, "forward", slow_forward)


@pytest.fixture
def window(make_window, tiny_model_dir: Path) -> MainWindow:
    win = make_window(["--model", str(tiny_model_dir)])
    assert win.chat.controller.backend_session.state is State.READY
    set_sampling(win, greedy(8))
    return win


# ---- saving, the list, opening and continuing ----------------------------------------------------
def test_answers_are_saved_with_figures_then_reopened_and_continued(
    qtbot,
    window: MainWindow,
    history_file: Path,
    generate_requests: list[AnswerRequest],
) -> None:
    panel = history(window).panel
    assert window.findChild(QListWidget, "conversationList") is panel.list
    assert panel.list.count() == 0 and "No saved chats" in panel.empty_label.text()
    send_and_wait(qtbot, window, "first question\nwith a second line")
    # Created lazily, with the first message, titled after it; committed at once.
    assert panel.titles() == ["first question"]
    send_and_wait(qtbot, window, "second question")
    [(title, messages)] = stored(history_file)
    assert title == "first question"
    assert [(r, c) for r, c, _ in messages] == [
        (m.role, m.content) for m in window.chat.conversation.messages
    ]
    figures = messages[1][2]
    live = window.chat.conversation.messages[1].figures
    assert figures is not None and messages[0][2] is None
    assert figures.model == window.chat.controller.backend_session.model.name
    assert (figures.mode, figures.device, figures.generated_tokens) == ("iobinding", "cpu", 8)
    assert figures.tokens_per_s == pytest.approx(live.tokens_per_s)
    assert figures.prompt_tokens == live.prompt_tokens
    conversation_id = window.chat.conversation.id
    assert isinstance(conversation_id, int)
    assert panel.list.currentItem() is panel.item_for(conversation_id)
    transcript_before = window.chat.chat_view.transcript.toPlainText()

    window.chat.chat_view.new_chat_button.click()
    assert window.chat.conversation.messages == [] and window.chat.conversation.id is None
    assert panel.list.currentItem() is None and panel.list.count() == 1  # nothing stored yet

    click_row(qtbot, window, conversation_id)
    assert window.chat.conversation.id == conversation_id
    assert [m.content for m in window.chat.conversation.messages] == [
        "first question\nwith a second line",
        *[c for _, c, _ in messages[1:2]],
        "second question",
        messages[3][1],
    ]
    # The figures panel shows the last answer's figures, as right after it was written.
    assert window.chat.side_panel.figures_box.tokens_per_second_value.text() != "–"
    restored = window.chat.conversation.messages[1].figures
    assert restored.tokens_per_s == pytest.approx(live.tokens_per_s)
    assert restored.generated_tokens == 8 and restored.mode == "iobinding"
    # The same transcript, figure lines included, apart from the per-turn token counts.
    text = window.chat.chat_view.transcript.toPlainText()
    assert "IO-Binding · CPU ·" in text and "hit the token limit" in text
    assert _without_tokens(text) == _without_tokens(transcript_before)

    send_and_wait(qtbot, window, "third question")
    sent = [m.content for m in generate_requests[-1].messages]
    assert sent[:4] == [m[1] for m in messages]  # the restored history is what the model sees
    [(_, after)] = stored(history_file)
    assert len(after) == 6 and after[4][1] == "third question"
    assert window.chat.conversation.id == conversation_id


def _without_tokens(text: str) -> str:
    import re

    # One count per answer: beside its name once the context is measured, else on its figure line.
    return re.sub(
        r"   \d+ tokens of context(?=   (Edit|Copy))| · \d+ tokens(?= ·|$)", "", text, flags=re.M
    )


def test_new_chat_list_rename_and_delete_with_confirmation(
    qtbot,
    window: MainWindow,
    history_file: Path,
) -> None:
    ui = history(window)
    send_and_wait(qtbot, window, "ducks")
    first = window.chat.conversation.id
    window.new_chat_action.trigger()
    assert ui.panel.list.count() == 1
    send_and_wait(qtbot, window, "geese")
    second = window.chat.conversation.id
    assert ui.panel.titles() == ["geese", "ducks"]  # most recent first
    assert ui.panel.ids() == [second, first]

    # Rename: the inline editor commits by setting the item's text.
    ui.panel.item_for(first).setText("  About   ducks ")
    assert [t for t, _ in stored(history_file)] == ["geese", "About ducks"]
    assert ui.panel.titles() == ["geese", "About ducks"]
    ui.panel.item_for(first).setText("   ")  # an empty name is refused
    assert ui.panel.titles() == ["geese", "About ducks"]

    # Delete asks first; "no" keeps it.
    asked = []
    ui.confirm = lambda title, text: asked.append(text) or False
    ui.panel.list.setCurrentItem(ui.panel.item_for(first))
    qtbot.keyClick(ui.panel.list, Qt.Key.Key_Delete)
    assert asked and "About ducks" in asked[0]
    assert len(stored(history_file)) == 2
    ui.confirm = lambda title, text: True
    ui.panel.list.setCurrentItem(ui.panel.item_for(first))
    qtbot.keyClick(ui.panel.list, Qt.Key.Key_Delete)
    assert [t for t, _ in stored(history_file)] == ["geese"]
    assert ui.panel.ids() == [second]
    assert window.chat.conversation.id == second  # another conversation: the chat stays

    # Deleting the conversation shown empties the chat (the real dialog, answered "Delete").
    ui.confirm = HistoryUi._confirm.__get__(ui)

    def answer_dialog() -> None:
        box = window.findChild(QMessageBox, "confirmDeleteBox")
        if box is None or not box.isVisible():
            QTimer.singleShot(10, answer_dialog)
            return
        box.button(QMessageBox.StandardButton.Yes).click()

    QTimer.singleShot(0, answer_dialog)
    ui.delete_action.trigger()
    assert stored(history_file) == []
    assert window.chat.conversation.messages == [] and window.chat.conversation.id is None
    assert ui.panel.list.count() == 0
    assert not ui.delete_action.isEnabled() and not ui.export_json_action.isEnabled()


def test_search_is_debounced_and_finds_text_in_messages(qtbot, window: MainWindow) -> None:
    ui = history(window)
    for text in ("tell me about Pelicans", "what is a heron", "more about pelican beaks"):
        window.new_chat_action.trigger()
        send_and_wait(qtbot, window, text)
    searches: list[str] = []
    ui.panel.sig_search.connect(searches.append)
    with qtbot.waitSignal(ui.panel.sig_search, timeout=2000):
        qtbot.keyClicks(ui.panel.search_edit, "PELICAN")
    assert searches == ["PELICAN"]  # one search for seven keystrokes
    assert sorted(ui.panel.titles()) == ["more about pelican beaks", "tell me about Pelicans"]
    item = ui.panel.list.item(0)
    assert "pelican" in item.data(Qt.ItemDataRole.UserRole + 1).lower()
    with qtbot.waitSignal(ui.panel.sig_search, timeout=2000):
        qtbot.keyClicks(ui.panel.search_edit, "zzz")
    assert ui.panel.list.count() == 0 and "Nothing found" in ui.panel.empty_label.text()
    ui.panel.search_edit.clear()
    with qtbot.waitSignal(ui.panel.sig_search, timeout=2000):
        pass
    assert ui.panel.list.count() == 3


def test_opening_is_refused_while_an_answer_streams(qtbot, window: MainWindow, slow_steps) -> None:
    send_and_wait(qtbot, window, "one")
    first = window.chat.conversation.id
    window.new_chat_action.trigger()
    set_sampling(window, greedy(300))
    window.chat.chat_view.set_prompt_text("two")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_delta, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.send_button.click()
    second = window.chat.conversation.id
    assert second is not None and second != first  # the question is stored already
    click_row(qtbot, window, first)
    assert window.chat.conversation.id == second
    assert "Wait for the answer" in window.statusBar().currentMessage()
    assert history(window).panel.list.currentItem() is history(window).panel.item_for(second)
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.stop_button.click()
    click_row(qtbot, window, first)
    assert window.chat.conversation.id == first


# ---- edit, regenerate, copy ------------------------------------------------------------------
def test_edit_a_user_message_replaces_everything_after_it(
    qtbot,
    window: MainWindow,
    history_file: Path,
) -> None:
    send_and_wait(qtbot, window, "alpha")
    send_and_wait(qtbot, window, "beta")
    send_and_wait(qtbot, window, "gamma")
    view = window.chat.chat_view
    view.set_prompt_text("a draft I was writing")
    emit_anchor(view, "edit", 2)  # the "Edit" link of "beta"
    assert view.editing == 2 and view.edit_bar.isVisible()
    assert view.prompt_text() == "beta"
    assert "replaces the 3 messages after it" in view.edit_label.text()
    qtbot.keyClick(view.prompt_edit, Qt.Key.Key_Escape)  # cancel: the draft comes back
    assert view.editing is None and view.prompt_text() == "a draft I was writing"

    emit_anchor(view, "edit", 2)
    view.set_prompt_text("BETA, edited")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        view.send_button.click()
    assert view.editing is None and not view.edit_bar.isVisible()
    assert [m.content for m in window.chat.conversation.messages][:3] == [
        "alpha",
        window.chat.conversation.messages[1].content,
        "BETA, edited",
    ]
    assert len(window.chat.conversation.messages) == 4
    [(_, rows)] = stored(history_file)
    assert [(r, c) for r, c, _ in rows] == [
        (m.role, m.content) for m in window.chat.conversation.messages
    ]
    assert rows[3][2] is not None  # the new answer has its figures

    # Copy, from the transcript's context action and the Conversation menu.
    QGuiApplication.clipboard().clear()
    view.copy_message(2)
    assert QGuiApplication.clipboard().text() == "BETA, edited"
    history(window).copy_action.trigger()
    assert "BETA, edited" in QGuiApplication.clipboard().text()
    assert QGuiApplication.clipboard().text().startswith("# alpha")


def emit_anchor(view, verb: str, *numbers: int) -> None:
    emit(view.transcript.anchorClicked, QUrl(view.transcript.links.href(verb, *numbers)))


def test_regenerate_keeps_the_old_answer_stored_until_the_new_one_exists(
    qtbot, window: MainWindow, history_file: Path, slow_steps
) -> None:
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "question")
    old = window.chat.conversation.messages[-1]
    set_sampling(window, greedy(200))
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_delta, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.regenerate_button.click()
    [(_, rows)] = stored(history_file)  # mid-answer: the old one is still there
    assert [c for _, c, _ in rows] == ["question", old.content]
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.stop_button.click()
    new = window.chat.conversation.messages[-1]
    assert new.figures.finish_reason == "stop"
    [(_, rows)] = stored(history_file)
    assert [c for _, c, _ in rows] == ["question", new.content]
    assert rows[1][2].finish_reason == "stop"
    assert new.id is not None and new.id != old.id


def test_a_regenerate_that_fails_at_once_keeps_the_old_answer(
    qtbot, window: MainWindow, history_file: Path, monkeypatch
) -> None:
    send_and_wait(qtbot, window, "question")
    old = [(m.role, m.content) for m in window.chat.conversation.messages]

    def broken(*_args, **_kwargs):
        raise RuntimeError("simulated fault")

    monkeypatch.setattr(Engine, "chat", broken)
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.regenerate_button.click()
    assert [(m.role, m.content) for m in window.chat.conversation.messages] == old
    assert window.chat.chat_view.prompt_text() == ""
    [(_, rows)] = stored(history_file)
    assert [(r, c) for r, c, _ in rows] == old


def test_a_first_question_that_fails_leaves_no_empty_conversation(
    qtbot,
    window: MainWindow,
    history_file: Path,
) -> None:
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.set_prompt_text("word " * 700)  # over the tiny model's context
        window.chat.chat_view.send_button.click()
    assert stored(history_file) == []
    assert history(window).panel.list.count() == 0
    send_and_wait(qtbot, window, "short")
    assert [t for t, _ in stored(history_file)] == ["short"]


# ---- export and import --------------------------------------------------------------------------
def test_export_markdown_and_json_then_import(
    qtbot, window: MainWindow, tmp_path: Path, history_file: Path
) -> None:
    ui = history(window)
    window.chat.side_panel.system_prompt_box.edit.setPlainText("Be brief.")
    send_and_wait(qtbot, window, "export me")
    send_and_wait(qtbot, window, "and me")
    asked = []

    def save_to(name: str):
        def ask(caption: str, suggested: str, filters: str) -> str:
            asked.append((caption, Path(suggested).name, filters))
            return str(tmp_path / name)

        return ask

    ui.ask_save_path = save_to("chat")  # no suffix: the format's is added
    ui.export_markdown_action.trigger()
    markdown = (tmp_path / "chat.md").read_text(encoding="utf-8")
    assert asked[-1][1] == "export-me.md" and "Markdown" in asked[-1][0]
    assert markdown.startswith("# export me")
    assert "### User" in markdown and "and me" in markdown and "tokens/s" in markdown
    assert "> Be brief." in markdown

    ui.ask_save_path = save_to("chat.json")
    menu = ui.panel.context_menu(ui.panel.item_for(window.chat.conversation.id))
    [json_action] = [a for a in menu.actions() if a.text() == "Export as JSON…"]
    json_action.trigger()
    data = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
    assert data["format"] == "chatapp-conversation"
    assert [m["content"] for m in data["conversation"]["messages"]][::2] == ["export me", "and me"]
    assert data["conversation"]["messages"][1]["figures"]["generated_tokens"] == 8

    ui.ask_save_path = lambda *_args: None  # cancelled: nothing written
    assert ui.export_current("json") is None

    # Import: a new conversation, opened, with the figures under its answers.
    window.new_chat_action.trigger()
    ui.ask_open_path = lambda *_args: str(tmp_path / "chat.json")
    imported = ui.import_conversation()
    assert imported is not None and window.chat.conversation.id == imported
    assert ui.panel.titles() == ["export me (imported)", "export me"]
    assert [m.content for m in window.chat.conversation.messages][::2] == ["export me", "and me"]
    assert window.chat.conversation.messages[1].figures.generated_tokens == 8
    text = counted_transcript(qtbot, window, messages=4)
    assert "· hit the token limit" in text
    assert len(re.findall(r"^Assistant\s+\d+ tokens of context\b", text, re.MULTILINE)) == 2
    assert len(stored(history_file)) == 2

    (tmp_path / "bad.json").write_text('{"format": "something else"}', encoding="utf-8")
    ui.ask_open_path = lambda *_args: str(tmp_path / "bad.json")
    assert ui.import_conversation() is None
    assert window.banner.level == "error" and "not a chatapp conversation" in window.banner.text()
    assert len(stored(history_file)) == 2


# ---- context policy -----------------------------------------------------------------------------
def _long_conversation(path: Path, turns: int, words: int) -> int:
    with HistoryStore(path) as store:
        now = store._now()
        messages = []
        for i in range(turns):
            messages.append(MessageDraft("user", f"question {i}: " + "apple " * words))
            messages.append(
                MessageDraft(
                    "assistant",
                    f"answer {i}: " + "pear " * words,
                    Figures(mode="naive", device="cpu", generated_tokens=words, tokens_per_s=99.0),
                )
            )
        return store.add_conversation(
            ConversationDraft("long chat", now, now, messages=tuple(messages))
        ).id


def test_oldest_turns_are_dropped_and_the_transcript_says_where(
    qtbot, window: MainWindow, history_file: Path, monkeypatch
) -> None:
    """Tiny model: 512 tokens of context. Ten turns of ~60 tokens do not fit with 64 kept
    free for the answer: the oldest are not sent, the system prompt is."""
    conversation_id = _long_conversation(history_file, turns=10, words=25)
    ui = history(window)
    ui.refresh()
    set_sampling(window, greedy(64))
    window.chat.side_panel.system_prompt_box.edit.setPlainText("You are terse.")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.context, timeout=10_000, check_params_cb=_known
    ) as blocker:
        click_row(qtbot, window, conversation_id)
    report = blocker.args[0]
    assert report is not None and report.limit == 512 and report.reserve == 64
    assert report.dropped > 0 and report.dropped % 2 == 0 and report.fits
    assert report.prompt_tokens + report.reserve <= 512
    assert len(report.turns) == 10
    assert all(t.tokens > 25 for t in report.turns)
    assert report.overhead_tokens + sum(t.tokens for t in report.turns) > 512 - 64

    text = window.chat.chat_view.transcript.toPlainText()
    assert text.count(CUT_TEXT) == 1
    cut_at = text.index(CUT_TEXT)
    first_sent = report.dropped // 2
    assert (
        text.index(f"question {first_sent - 1}:") < cut_at < text.index(f"question {first_sent}:")
    )
    # Each message's tokens on its header (question and answer add up to the turn's); the
    # limit in the side panel.
    first_question, first_answer = report.message_tokens(0), report.message_tokens(1)
    assert first_question is not None and first_answer is not None
    assert first_question + first_answer == report.turns[0].tokens
    assert text.startswith(f"You   {first_question} tokens of context   Edit   Copy\n")
    assert f"Assistant   {first_answer} tokens of context   Copy\n" in text
    assert (
        window.chat.side_panel.figures_box.context_value.text() == f"{report.prompt_tokens} / 512"
    )
    assert "not sent" in window.chat.side_panel.figures_box.context_value.toolTip()

    seen: list[list[str]] = []
    original = Engine.chat

    def recording_chat(self, messages, *args, **kwargs):
        seen.append([f"{m.role}:{m.content}" for m in messages])
        return original(self, messages, *args, **kwargs)

    monkeypatch.setattr(Engine, "chat", recording_chat)
    send_and_wait(qtbot, window, "and now?")
    [sent] = seen
    assert sent[0] == "system:You are terse."
    assert sent[1].startswith(f"user:question {report.dropped // 2}:")
    assert not any(m.startswith("user:question 0:") for m in sent)
    assert sent[-1] == "user:and now?"
    answer = window.chat.conversation.messages[-1]
    assert answer.figures.prompt_tokens + 64 <= 512
    window.chat.chat_view.flush()  # a long chat is drawn a slice at a time
    assert window.chat.chat_view.transcript.toPlainText().count(CUT_TEXT) == 1


def test_per_turn_tokens_match_the_tokenizer(qtbot, window: MainWindow) -> None:
    send_and_wait(qtbot, window, "count my tokens please")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.context, timeout=10_000, check_params_cb=_known
    ) as blocker:
        history(window).measure()
    report = blocker.args[0]
    engine = window.host.engine
    messages = window.chat.conversation.engine_messages("")
    assert report.cut_index is None and report.dropped == 0
    assert report.prompt_tokens == engine.count_tokens(messages)
    assert report.overhead_tokens + report.turns[0].tokens == report.prompt_tokens
    assert CUT_TEXT not in window.chat.chat_view.transcript.toPlainText()


# ---- faults -------------------------------------------------------------------------------------
def test_a_corrupt_history_is_moved_aside_and_the_window_says_where(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path
) -> None:
    history_file.parent.mkdir(parents=True)
    history_file.write_bytes(b"this is not an SQLite database, just bytes" * 200)
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.banner.isVisible() and window.banner.level == "warning"
    moved = [p for p in history_file.parent.iterdir() if ".corrupt-" in p.name]
    assert len(moved) == 1 and moved[0].read_bytes().startswith(b"this is not")
    assert str(moved[0]) in window.banner.text() and "damaged" in window.banner.text()
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "a fresh start")
    assert [t for t, _ in stored(history_file)] == ["a fresh start"]
    assert window.banner.isVisible()  # the notice stays until dismissed (it is a warning)


def test_a_history_from_a_newer_version_is_left_alone_and_chat_still_works(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path
) -> None:
    history_file.parent.mkdir(parents=True)
    with sqlite3.connect(history_file) as conn:
        conn.execute("PRAGMA user_version = 99")
    before = history_file.read_bytes()
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.banner.level == "warning" and "newer version" in window.banner.text()
    assert "not saved in this session" in window.banner.text()
    ui = history(window)
    assert not ui.controller.sync_core.enabled and not ui.panel.isEnabled()
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "not saved")
    assert len(window.chat.conversation.messages) == 2
    assert history_file.read_bytes() == before


def test_two_windows_on_one_file_both_work_and_see_each_other(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path
) -> None:
    """Two instances share the file (WAL): each sees the other's writes through
    has_external_changes(), polled on a timer and on window activation."""
    a = make_window(["--model", str(tiny_model_dir)])
    b = make_window(["--model", str(tiny_model_dir)])
    for w in (a, b):
        set_sampling(w, greedy(4))
    ua, ub = history(a), history(b)
    assert ua.controller.sync_core.store is not ub.controller.sync_core.store
    ub.poll_timer.setInterval(20)
    send_and_wait(qtbot, a, "from window A")
    shared = a.chat.conversation.id
    qtbot.waitUntil(lambda: ub.panel.titles() == ["from window A"], timeout=5000)

    # B opens it and continues; A, showing it, follows on its next poll.
    click_row(qtbot, b, shared)
    send_and_wait(qtbot, b, "B continues")

    def a_follows() -> bool:
        # A's own timer may have polled already while B answered (a busy machine).
        ua.poll()
        return [m.content for m in a.chat.conversation.messages] == [
            m.content for m in b.chat.conversation.messages
        ]

    qtbot.waitUntil(a_follows, timeout=5000)
    assert len(a.chat.conversation.messages) == 4

    # Both write to it at once (A has not polled yet): neither loses anything; the second
    # writer's turn continues in a copy instead of deleting what it did not know about.
    ua.poll_timer.stop()
    ub.poll_timer.stop()
    a.chat.chat_view.set_prompt_text("A again")
    b.chat.chat_view.set_prompt_text("B again")
    b.chat.chat_view.send_button.click()
    a.chat.chat_view.send_button.click()
    qtbot.waitUntil(
        lambda: (
            a.chat.controller.backend_session.state is State.READY
            and b.chat.controller.backend_session.state is State.READY
        ),
        timeout=ANSWER_TIMEOUT_MS,
    )
    conversations = dict(stored(history_file))
    assert sorted(conversations) == ["from window A", "from window A (copy)"]
    original = conversations["from window A"]
    assert [c for _, c, _ in original][::2] == ["from window A", "B continues", "B again"]
    assert a.chat.conversation.id != shared
    assert [m.content for m in a.chat.conversation.messages][::2] == [
        "from window A",
        "B continues",
        "A again",
    ]
    assert "another chatapp window" in a.banner.text()
    with HistoryStore(history_file) as check:
        assert check.integrity_check() == ["ok"]

    # Deleted in B while A shows it: A keeps it on screen and saves it again if continued.
    ub.poll()
    ub.confirm = lambda *_args: True
    assert ub.delete(a.chat.conversation.id)
    assert ua.poll() and a.chat.conversation.id is None
    assert "deleted in another chatapp window" in a.banner.text()
    send_and_wait(qtbot, a, "still mine")
    assert a.chat.conversation.id is not None
    assert len(a.chat.conversation.messages) == 8
    ub.poll()
    assert len(ub.panel.ids()) == 2


@pytest.mark.parametrize("action", ["send", "regenerate"])
def test_killed_mid_answer_loses_only_that_answer(
    qtbot, make_window, tmp_path: Path, tiny_model_dir: Path, history_file: Path, action: str
) -> None:
    """The real window in another process, killed with SIGKILL while an answer streams."""
    data = tmp_path / "data"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CHATAPP_DATA_DIR": str(data),
        SETTINGS_ENV: str(tmp_path / "settings.ini"),
        "QT_QPA_PLATFORM": "offscreen",
    }
    err = tmp_path / "stderr.txt"
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.gui.history.kill_target", str(tiny_model_dir), action],
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            env=env,
            cwd=REPO,
        )
    try:
        answered = proc.stdout.readline()
        assert answered.startswith("ANSWERED"), err.read_text()
        first_answer = answered.rstrip("\n").split(" ", 1)[1] if " " in answered else ""
        assert proc.stdout.readline().strip() == "STREAMING", err.read_text()
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    [(title, rows)] = stored(data / "history.sqlite3")
    assert title == "first question"
    expected = ["first question", first_answer]
    if action == "send":
        expected.append("second question")  # the question survives, its answer never existed
    assert [" ".join(c.split()) if r == "assistant" else c for r, c, _ in rows] == [
        " ".join(e.split()) for e in expected
    ]
    assert rows[1][2] is not None and rows[1][2].generated_tokens is not None
    with HistoryStore(data / "history.sqlite3") as check:
        assert check.integrity_check() == ["ok"]
    if action == "send":
        # Restarted: the question without its answer is there, and Regenerate answers it.
        assert history_file == data / "history.sqlite3"
        window = make_window(["--model", str(tiny_model_dir)])
        set_sampling(window, greedy(4))
        click_row(qtbot, window, history(window).panel.ids()[0])
        assert window.chat.conversation.messages[-1].content == "second question"
        assert window.chat.chat_view.regenerate_button.isEnabled()
        with qtbot.waitSignal(
            window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
        ):
            window.chat.chat_view.regenerate_button.click()
        [(_, rows)] = stored(history_file)
        assert [r for r, _, _ in rows] == ["user", "assistant", "user", "assistant"]
        assert rows[2][1] == "second question"


def test_the_conversation_list_sits_left_of_the_chat(
    qtbot, window: MainWindow, make_window, tiny_model_dir: Path
) -> None:
    splitter = window.splitter
    assert splitter.count() == 3 and splitter.widget(0) is history(window).panel
    qtbot.waitUntil(lambda: splitter.sizes()[0] >= 230, timeout=2000)  # the default layout
    sizes = splitter.sizes()
    assert sizes[0] < sizes[1]
    splitter.setSizes([sizes[0] - 20, sizes[1] + 20, sizes[2]])
    saved = splitter.sizes()
    window.close()
    assert splitter_panes(window.settings.value("window/splitter")) == 3
    # The saved three-pane layout comes back (at the same window width: the offscreen screen
    # is 800 px wide, so a restored window gets its minimum width, not the saved one).
    again = make_window(["--model", str(tiny_model_dir)])
    again.resize(window.size())
    qtbot.waitUntil(lambda: again.width() == window.width(), timeout=2000)
    again._apply_splitter()
    assert again.splitter.sizes() == saved
    # A layout saved before the list existed (two panes) is ignored: the default is used.
    two = QSplitter()
    two.addWidget(QWidget())
    two.addWidget(QWidget())
    assert splitter_panes(two.saveState()) == 2
    again.settings.setValue("window/splitter", two.saveState())
    again._apply_splitter()
    assert again.splitter.sizes()[0] >= 230
    menus = [a.text() for a in again.menuBar().actions()]
    assert menus.index("&Conversation") == menus.index("&Help") - 1
    assert again.findChild(QPushButton, "historyNewButton") is not None


def test_keyboard_edit_last_message_and_rename(qtbot, window: MainWindow, history_file) -> None:
    send_and_wait(qtbot, window, "first")
    send_and_wait(qtbot, window, "second")
    window.activateWindow()
    window.chat.chat_view.prompt_edit.setFocus()
    qtbot.keyClick(
        window.chat.chat_view.prompt_edit, Qt.Key.Key_Up, Qt.KeyboardModifier.ControlModifier
    )
    assert window.chat.chat_view.editing == 2 and window.chat.chat_view.prompt_text() == "second"
    ui = history(window)
    ui.rename_action.trigger()  # F2: the row's inline editor
    editor = ui.panel.list.findChild(QLineEdit)
    assert editor is not None and editor.text() == "first"
    editor.setText("renamed by keyboard")
    qtbot.keyClick(editor, Qt.Key.Key_Return)  # the delegate commits on the next event turn
    qtbot.waitUntil(lambda: ui.panel.titles() == ["renamed by keyboard"], timeout=2000)
    assert [t for t, _ in stored(history_file)] == ["renamed by keyboard"]
    # A right click opens the menu without moving the selection off the chat shown.
    window.new_chat_action.trigger()
    send_and_wait(qtbot, window, "third")
    other = ui.panel.item_for(ui.panel.ids()[1])
    rect = ui.panel.list.visualItemRect(other)
    qtbot.mousePress(ui.panel.list.viewport(), Qt.MouseButton.RightButton, pos=rect.center())
    assert ui.panel.list.currentItem() is ui.panel.item_for(window.chat.conversation.id)
