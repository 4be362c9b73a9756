"""Chat view on its own: keys, Markdown rendering, streaming repaint throttle, copying."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QGuiApplication, QTextFormat, QTextOption

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat import view as chat_view_module
from chatapp.gui.chat.view import ChatView
from chatapp.gui.common.bounded_text import MAX_LINE_CHARS, MAX_TEXT_CHARS
from chatapp.gui.common.qtcompat import emit
from chatapp.session.conversation import ChatMessage

FIGURES = AnswerFigures("iobinding", "cpu", 42.0, 0.2, 1.5, 3.0, 10, 0, 20, 512, "eos")


@pytest.fixture
def view(qtbot) -> ChatView:
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(700, 500)
    widget.show()
    widget.set_actions(can_send=True, can_stop=True, can_regenerate=True, can_new_chat=True)
    return widget


def test_enter_sends_and_shift_enter_adds_a_line(qtbot, view: ChatView) -> None:
    edit = view.prompt_edit
    qtbot.keyClicks(edit, "first line")
    with qtbot.assertNotEmitted(view.sig_send):
        qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second line")
    assert view.prompt_text() == "first line\nsecond line"
    with qtbot.waitSignal(view.sig_send, timeout=1000) as blocker:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert blocker.args == ["first line\nsecond line"]
    with qtbot.waitSignal(view.sig_send, timeout=1000):
        qtbot.keyClick(edit, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)


def test_enter_does_nothing_while_sending_is_disabled(qtbot, view: ChatView) -> None:
    view.set_actions(can_send=False, can_stop=True, can_regenerate=False, can_new_chat=False)
    qtbot.keyClicks(view.prompt_edit, "hello")
    with qtbot.assertNotEmitted(view.sig_send):
        qtbot.keyClick(view.prompt_edit, Qt.Key.Key_Return)
    assert view.prompt_text() == "hello"  # kept for when sending is possible again


def test_escape_stops(qtbot, view: ChatView) -> None:
    with qtbot.waitSignal(view.sig_stop, timeout=1000):
        qtbot.keyClick(view.prompt_edit, Qt.Key.Key_Escape)


def test_markdown_with_code_block_is_rendered(view: ChatView) -> None:
    answer = "Use **this**:\n\n```python\nprint('hi')\n```\n\nRaw <b>html</b> stays text."
    view.show_messages(
        [ChatMessage("user", "show code"), ChatMessage("assistant", answer, FIGURES)]
    )
    doc = view.transcript.document()
    text = doc.toPlainText()
    assert "print('hi')" in text
    assert "```" not in text and "**" not in text  # Markdown was interpreted, not shown
    assert "<b>html</b>" in text  # HTML in a message is not markup
    blocks = []
    block = doc.begin()
    while block.isValid():
        blocks.append(block)
        block = block.next()
    code = next(b for b in blocks if b.text() == "print('hi')")
    assert code.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence) or (
        code.blockFormat().nonBreakableLines()
    )
    background = code.blockFormat().background().color()
    assert background == view.transcript.colors.code_background  # from the palette
    # The figures of the answer sit under it.
    assert text.rstrip().endswith(
        "IO-Binding · CPU · 42.0 tok/s · TTFT 200 ms · perplexity 1.50 · 20 tokens"
    )
    view.show_messages([ChatMessage("user", "line *one*\nline two")])
    assert view.transcript.toPlainText().endswith("line *one*\nline two")  # typed as is


def test_streaming_repaints_are_throttled(qtbot, view: ChatView, monkeypatch) -> None:
    repaints: list[str] = []  # the text each repaint drew
    original = chat_view_module.TranscriptView.draw_answer

    def counting(self) -> None:
        repaints.append(self.answer_text)
        original(self)

    monkeypatch.setattr(chat_view_module.TranscriptView, "draw_answer", counting)
    view.show_messages([ChatMessage("user", "count")])
    view.begin_answer()
    for i in range(500):
        view.append_answer(f"{i} ")
    assert repaints == []  # nothing painted synchronously
    qtbot.waitUntil(lambda: len(repaints) == 1, timeout=1000)
    assert repaints[0].endswith("499 ")
    assert "499" in view.transcript.document().toPlainText()


def test_copy_a_message(qtbot, view: ChatView) -> None:
    view.show_messages([ChatMessage("user", "question *one*"), ChatMessage("assistant", "answer")])
    with qtbot.waitSignal(view.sig_copied, timeout=1000) as blocker:
        emit(view.transcript.anchorClicked, QUrl(view.transcript.links.href("copy", 0)))
    assert blocker.args == [0]
    assert QGuiApplication.clipboard().text() == "question *one*"
    # The context menu finds the message under the mouse.
    doc_text = view.transcript.document().toPlainText()
    position = doc_text.index("answer")
    assert view.transcript.message_at(position) == 1


def test_a_huge_paste_is_refused_at_once_and_the_draft_is_kept(qtbot, view: ChatView) -> None:
    edit = view.prompt_edit
    qtbot.keyClicks(edit, "my question: ")
    QGuiApplication.clipboard().setText("lorem ipsum " * 500_000)  # 6 MB on one line
    with qtbot.waitSignal(view.sig_status, timeout=1000) as status:
        qtbot.keyClick(edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert view.prompt_text() == "my question: "
    assert status.args[0] == (
        "Not pasted: 6 000 000 characters is more than a model can read "
        "(a message holds at most 1 048 576)."
    )
    assert MAX_TEXT_CHARS == 1_048_576
    # The draft is still a draft: typing goes on and Enter sends it.
    qtbot.keyClicks(edit, "why?")
    with qtbot.waitSignal(view.sig_send, timeout=1000) as sent:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert sent.args == ["my question: why?"]


def test_editing_a_message_of_one_huge_word_and_cancelling(qtbot, view: ChatView) -> None:
    word = "w" * MAX_LINE_CHARS  # the longest line the box takes
    view.show_messages([ChatMessage("user", word), ChatMessage("assistant", "ok")])
    qtbot.keyClicks(view.prompt_edit, "a draft")
    view.begin_edit(0)
    assert view.prompt_text() == word
    assert view.prompt_edit.wordWrapMode() == QTextOption.WrapMode.WrapAnywhere
    view.cancel_edit()
    assert view.prompt_text() == "a draft"
    assert view.prompt_edit.wordWrapMode() == QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere


def test_a_paste_of_a_million_lines_is_refused_and_the_draft_is_kept(qtbot, view) -> None:
    edit = view.prompt_edit
    qtbot.keyClicks(edit, "before ")
    QGuiApplication.clipboard().setText("x\n" * 500_000)  # 1 MB: within the character limit
    with qtbot.waitSignal(view.sig_status, timeout=1000) as status:
        qtbot.keyClick(edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert status.args[0] == (
        "Not pasted: 500 001 lines is more than a message holds (at most 100 000)."
    )
    assert view.prompt_text() == "before "
    qtbot.keyClicks(edit, "after")
    assert view.prompt_text() == "before after"


def test_a_message_too_long_for_the_box_is_not_edited_there(qtbot, view) -> None:
    """An imported chat's message of 200 000 lines would freeze the box: one line says why,
    the draft and the chat stay as they were, and a short message is still editable."""
    lines = "\n" * 199_999 + "end"
    view.show_messages(
        [ChatMessage("user", lines), ChatMessage("assistant", "ok"), ChatMessage("user", "hi")]
    )
    qtbot.keyClicks(view.prompt_edit, "a draft")
    with qtbot.waitSignal(view.sig_status, timeout=1000) as status:
        view.begin_edit(0)
    assert status.args[0] == (
        "Not editable here: the message has 200 000 lines, more than 100 000; copy it instead."
    )
    assert view.editing is None and view.edit_bar.isHidden()
    assert view.prompt_text() == "a draft"
    view.begin_edit(2)
    assert view.editing == 2 and view.prompt_text() == "hi"


def test_a_prompt_sent_is_kept_laid_out_and_given_back_whole(qtbot, view) -> None:
    """Send empties the box at once; a failed start gives the same document back (laying out
    100 000 lines again cost 0.25-0.5 s), with the white space the chat trimmed."""
    edit = view.prompt_edit
    sent = "  " + "x" * 3000 + "\n" + "a line\n" * 5000
    view.set_prompt_text(sent)
    assert edit.wordWrapMode() == QTextOption.WrapMode.WrapAnywhere  # a long run
    document = edit.document()
    view.clear_sent_prompt()
    assert view.prompt_text() == "" and edit.document() is not document
    assert edit.wordWrapMode() == QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere
    view.give_back_prompt(sent.strip())
    assert edit.document() is document and view.prompt_text() == sent
    assert edit.wordWrapMode() == QTextOption.WrapMode.WrapAnywhere
    assert edit.textCursor().position() == len(sent)
    qtbot.keyClicks(edit, "!")
    assert view.prompt_text() == sent + "!"


def test_a_prompt_given_back_never_replaces_what_was_typed_since(qtbot, view) -> None:
    view.set_prompt_text("first question")
    view.clear_sent_prompt()
    qtbot.keyClicks(view.prompt_edit, "next")
    view.give_back_prompt("first question")
    assert view.prompt_text() == "next"
    # Another text than the one kept (an edit's): laid out as given.
    view.set_prompt_text("")
    view.clear_sent_prompt()
    view.give_back_prompt("something else")
    assert view.prompt_text() == "something else"
    view.forget_sent_prompt()
    view.set_prompt_text("")
    view.give_back_prompt("again")
    assert view.prompt_text() == "again"
