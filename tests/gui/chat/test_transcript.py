"""The transcript under hostile sizes: huge, wide, deep messages stay small in the document,
say that they are cut, and stay whole for Copy and Show all."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication

from chatapp.gui.chat import render_policy, transcript
from chatapp.gui.chat.view import ChatView
from chatapp.gui.common.qtcompat import emit
from chatapp.session.conversation import ChatMessage

HUGE = {
    "2 MB of Markdown": "## part\n\nSome *text* here, and `code`.\n\n" * 50_000,
    "a 100 000-character line": "y" * 100_000,
    "a 5000-column table": "|" + "c|" * 5000 + "\n|" + "-|" * 5000 + "\n|" + "1|" * 5000,
    "5000 nested quotes": "> " * 5000 + "bottom",
    "200 000 short lines": "a\n" * 200_000,
    "a 1 MB line of markup": "**[x](http://a/)** " * 60_000,
}


@pytest.mark.parametrize("name", list(HUGE))
def test_huge_messages_are_bounded_in_the_view_and_kept_whole(qtbot, view: ChatView, name) -> None:
    text = HUGE[name]
    view.show_messages([ChatMessage("user", text), ChatMessage("assistant", text)])
    view.flush()
    view.transcript.grab()
    document = view.transcript.document()
    # Both messages together stay far below what stalls a layout (render_policy.py).
    assert document.characterCount() < 2 * 16_000 + 2_000
    assert document.blockCount() < 2 * 1_000
    shown = view.transcript.toPlainText()
    if len(text) > render_policy.PLAIN_HEAD_CHARS + render_policy.PLAIN_TAIL_CHARS or (
        text.count("\n") > 700
    ):
        assert "characters not shown here" in shown and "Show all" in shown
    assert "Shown as plain text:" in shown  # the answer says why it is not Markdown
    # Copy copies everything; Show all opens everything.
    view.copy_message(1)
    assert QGuiApplication.clipboard().text() == text
    emit(view.transcript.anchorClicked, QUrl(view.transcript.links.href("show", 1)))
    assert view.viewer is not None and view.viewer.isVisible()
    assert view.viewer.text == text
    view.viewer.copy()
    assert QGuiApplication.clipboard().text() == text


def test_a_huge_streamed_answer_is_bounded_while_it_streams(view: ChatView) -> None:
    view.show_messages([ChatMessage("user", "go")])
    view.begin_answer()
    view.append_answer("| a " * 20_000)
    view.flush()
    assert view.transcript.document().characterCount() < 16_000
    assert "characters not shown here" in view.transcript.toPlainText()


def test_a_long_chat_is_drawn_a_slice_at_a_time(qtbot, view: ChatView, monkeypatch) -> None:
    monkeypatch.setattr(transcript, "SLICE_S", 0.0)  # every slice is "late": deterministic
    messages = [
        ChatMessage("user" if i % 2 == 0 else "assistant", f"message {i} " + "word " * 300)
        for i in range(400)
    ]
    view.show_messages(messages)
    assert view.transcript.drawing  # not all at once: the event loop gets its turn
    assert view.transcript.toPlainText().count("message ") == transcript.SLICE_MIN_MESSAGES
    # A short chat is drawn at once, however slow the machine.
    short = ChatView()
    qtbot.addWidget(short)
    short.show_messages(messages[: transcript.SLICE_MIN_MESSAGES])
    assert not short.transcript.drawing
    qtbot.waitUntil(lambda: not view.transcript.drawing, timeout=30_000)
    assert view.transcript.toPlainText().count("message ") == 400
