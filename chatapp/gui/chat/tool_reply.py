"""The "Reply as tool" box: under an answer that called a tool, the user types the tool's
result and sends it; the chat keeps it as a `tool` message and the model goes on
(session/chat.py `reply_as_tool`). Hidden while the chat waits for no tool."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from chatapp.engine.text.chat import ToolCall
from chatapp.gui.common.bounded_text import SendingTextEdit
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import muted

SHOWN_ID_CHARS = 40
# Under "Must call one" every answer is a call, the one after a result too (as OpenAI's
# "required"): without this a user replies and gets another call, never the answer in words.
MUST_CALL_NOTE = (
    "Must call one: the next answer is a call again. Model decides (Sampling > Tools) lets "
    "the model answer in words."
)


class ToolReplyBox(QFrame):
    sig_reply = Signal(str)  # the tool's result, as typed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolReplyBox")
        self.call: ToolCall | None = None
        self.label = QLabel("", self)
        self.label.setObjectName("toolReplyLabel")
        # Wraps: the call's id set the chat's minimum width (481 px), and at 800x500 with
        # both panes the window grew past the screen.
        self.label.setWordWrap(True)
        muted(self.label)
        self.must_call = False
        self.note = QLabel(MUST_CALL_NOTE, self)
        self.note.setObjectName("toolReplyMustCallNote")
        self.note.setWordWrap(True)
        muted(self.note)
        self.note.hide()
        self.edit = SendingTextEdit("a tool's result", self)
        self.edit.setObjectName("toolReplyEdit")
        self.edit.setPlaceholderText("The tool's result (Enter sends, Shift+Enter: new line)")
        self.edit.setTabChangesFocus(True)
        self.edit.setFixedHeight(self.edit.fontMetrics().lineSpacing() * 2 + 14)
        self.edit.sig_submit.connect(self._on_send)
        self.send_button = QPushButton("Send result", self)
        self.send_button.setObjectName("toolReplySendButton")
        self.send_button.setToolTip("Send this as the tool's result; the model goes on")
        self.send_button.clicked.connect(self._on_send)
        row = QHBoxLayout()
        row.addWidget(self.edit, 1)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addWidget(self.label)
        layout.addWidget(self.note)
        layout.addLayout(row)
        self.hide()

    def show_call(self, call: ToolCall | None) -> None:
        """Offer a reply to `call` (None: hide the box). Another call empties the box."""
        if call != self.call:
            self.edit.clear()
        self.call = call
        if call is None:
            self.hide()
            return
        shown_id = call.id if len(call.id) <= SHOWN_ID_CHARS else call.id[:SHOWN_ID_CHARS] + "…"
        self.label.setText(f"Reply as tool: the result of {call.name} (call {shown_id})")
        self.note.setVisible(self.must_call)
        self.show()

    def set_must_call(self, must: bool) -> None:
        """Whether the Tools choice is "Must call one" (the note says what follows)."""
        self.must_call = must
        self.note.setVisible(must and self.call is not None)

    def set_enabled(self, enabled: bool) -> None:
        """While an answer runs (or no model is loaded) the reply waits."""
        self.send_button.setEnabled(enabled)

    @Slot()
    def _on_send(self) -> None:
        if self.call is not None and self.send_button.isEnabled():
            emit(self.sig_reply, self.edit.toPlainText())
