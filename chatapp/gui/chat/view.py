"""The chat view: the transcript (transcript.py), the prompt box and the send / stop /
regenerate row; it answers the transcript's actions (copy, code, versions, links)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence

from PySide6.QtCore import Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import (
    QDesktopServices,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QShortcut,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.chat.message_viewer import MessageViewer
from chatapp.gui.chat.regenerate_note import RegenerateNote
from chatapp.gui.chat.safe_document import plain_tip
from chatapp.gui.chat.tool_reply import ToolReplyBox
from chatapp.gui.chat.transcript import TranscriptView
from chatapp.gui.common.bounded_text import SendingTextEdit
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, muted, on_theme
from chatapp.session.context import ContextReport
from chatapp.session.conversation import ChatMessage, pending_call

REPAINT_INTERVAL_MS = 30
MAX_REPAINT_INTERVAL_MS = 400
# A repaint of the streamed answer may take this share of the GUI thread at most: the
# interval grows with what the last repaint cost (long answers re-render their Markdown).
REPAINT_SHARE = 0.25
LINK_SHOWN_CHARS = 300


class PromptEdit(SendingTextEdit):
    """Enter sends, Shift+Enter starts a new line, Esc stops the answer; a paste too long for
    any model is refused (bounded_text.py)."""

    sig_escape = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            emit(self.sig_escape)
            event.accept()
            return
        super().keyPressEvent(event)


class ChatView(QWidget):
    sig_send = Signal(str)
    sig_stop = Signal()
    sig_regenerate = Signal()
    sig_continue = Signal()  # go on with the answer the token limit cut
    sig_new_chat = Signal()
    sig_copied = Signal(int)  # message index
    sig_code_copied = Signal(int, int)  # message index, code block number
    sig_edit_submitted = Signal(int, str)  # index of the user message, its new text
    sig_version_requested = Signal(int, int)  # answer index, version to show
    sig_status = Signal(str)  # a short note for the status bar

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._messages: list[ChatMessage] = []
        self._streaming = False
        self.editing: int | None = None  # the user message being edited in the prompt box
        self._draft_before_edit = ""
        self._dirty = False
        # Batches may arrive faster than we want to repaint: coalesce into one repaint per tick.
        self._repaint_timer = QTimer(self)
        self._repaint_timer.setSingleShot(True)
        self._repaint_timer.setInterval(REPAINT_INTERVAL_MS)
        self._repaint_timer.timeout.connect(self._on_repaint)

        self.last_repaint_s = 0.0  # what the last repaint of the streamed answer cost
        self.viewer: MessageViewer | None = None
        # Web links open in the system browser after a question; tests replace both.
        self.confirm_link: Callable[[QUrl], bool] = self._confirm_link
        self.open_url: Callable[[QUrl], bool] = QDesktopServices.openUrl

        self.transcript = TranscriptView(self)
        t = self.transcript
        t.sig_copy_requested.connect(self.copy_message)
        t.sig_edit_requested.connect(self.begin_edit)
        t.sig_code_copy_requested.connect(self.copy_code)
        t.sig_show_all_requested.connect(self.show_all)
        t.sig_version_requested.connect(self.sig_version_requested)
        t.sig_link_clicked.connect(self._on_link_clicked)
        t.sig_link_refused.connect(self._on_link_refused)
        t.highlighted.connect(self._on_link_hovered)

        self.prompt_edit = PromptEdit("a message", self)
        self.prompt_edit.setObjectName("promptEdit")
        self.prompt_edit.setPlaceholderText(
            "Message the model (Enter sends, Shift+Enter: new line)"
        )
        self.prompt_edit.setTabChangesFocus(True)
        line = self.prompt_edit.fontMetrics().lineSpacing()
        self.prompt_edit.setFixedHeight(line * 4 + 14)
        self.prompt_edit.sig_submit.connect(self._on_submit)
        self.prompt_edit.sig_escape.connect(self._on_escape)
        self.prompt_edit.sig_refused.connect(self.sig_status)

        self.send_button = QPushButton("Send", self)
        self.send_button.setObjectName("sendButton")
        self.send_button.setToolTip("Send the message (Enter)")
        self.send_button.clicked.connect(self._on_submit)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop the answer after the current token (Esc)")
        self.stop_button.clicked.connect(self.sig_stop)
        self.regenerate_button = QPushButton("Regenerate", self)
        self.regenerate_button.setObjectName("regenerateButton")
        self.regenerate_button.setToolTip("Answer the last message again")
        self.regenerate_button.clicked.connect(self.sig_regenerate)
        # After an answer the token limit cut: the same answer goes on (hidden otherwise).
        self.continue_button = QPushButton("Continue", self)
        self.continue_button.setObjectName("continueButton")
        self.continue_button.setToolTip(
            "The answer stopped at the token limit (Max new tokens): write more of it"
        )
        self.continue_button.clicked.connect(self.sig_continue)
        self.continue_button.hide()
        self.new_chat_button = QPushButton("New chat", self)
        self.new_chat_button.setObjectName("newChatButton")
        self.new_chat_button.setToolTip("Start an empty conversation")
        self.new_chat_button.clicked.connect(self.sig_new_chat)
        self.hint_label = QLabel("", self)
        self.hint_label.setObjectName("chatHint")
        muted(self.hint_label)
        self.hint_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.hint_label.setWordWrap(True)  # a narrow chat: two lines rather than cut

        # Esc also stops when the focus is elsewhere in the window (e.g. on the transcript).
        self._stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        self._stop_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self._stop_shortcut.activated.connect(self._on_escape)

        # Shown while a message is being edited in the prompt box.
        self.edit_bar = QFrame(self)
        self.edit_bar.setObjectName("editBar")
        on_theme(self.edit_bar, self._style_edit_bar)
        self.edit_label = QLabel("", self.edit_bar)
        self.edit_label.setObjectName("editLabel")
        self.edit_label.setWordWrap(True)
        self.edit_cancel_button = QPushButton("Cancel", self.edit_bar)
        self.edit_cancel_button.setObjectName("editCancelButton")
        self.edit_cancel_button.setToolTip("Keep the message as it was (Esc)")
        self.edit_cancel_button.clicked.connect(self.cancel_edit)
        edit_row = QHBoxLayout(self.edit_bar)
        edit_row.setContentsMargins(8, 4, 4, 4)
        edit_row.addWidget(self.edit_label, 1)
        edit_row.addWidget(self.edit_cancel_button)
        self.edit_bar.hide()
        # Shown when Regenerate would write the same answer (greedy, or a fixed seed).
        self.regenerate_note = RegenerateNote(self)
        self.tool_reply = ToolReplyBox(self)  # under an answer that called a tool
        self.new_chat_button.clicked.connect(self.regenerate_note.hide)

        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        entry = QHBoxLayout()
        entry.addWidget(self.prompt_edit, 1)
        entry.addLayout(buttons)
        actions = QHBoxLayout()
        actions.addWidget(self.new_chat_button)
        actions.addWidget(self.regenerate_button)
        actions.addWidget(self.continue_button)
        actions.addSpacing(8)
        actions.addWidget(self.hint_label, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.tool_reply)
        layout.addWidget(self.regenerate_note)
        layout.addLayout(actions)
        layout.addWidget(self.edit_bar)
        layout.addLayout(entry)
        self.set_actions(can_send=False, can_stop=False, can_regenerate=False, can_new_chat=True)

    # ---- state ----------------------------------------------------------------------------
    def _style_edit_bar(self, c: ThemeColors) -> None:
        """The edit bar in the info banner's colours, derived from the palette."""
        info = c.banners["info"]
        self.edit_bar.setStyleSheet(
            f"#editBar {{ background: {info.background.name()}; border: 1px solid "
            f"{info.border.name()}; border-radius: 4px; }} "
            f"#editLabel {{ color: {info.text.name()}; }}"
        )

    def set_actions(
        self, *, can_send: bool, can_stop: bool, can_regenerate: bool, can_new_chat: bool
    ) -> None:
        self.send_button.setEnabled(can_send)
        self.tool_reply.set_enabled(can_send)
        self.stop_button.setEnabled(can_stop)
        self.regenerate_button.setEnabled(can_regenerate)
        self.regenerate_note.set_enabled(can_regenerate)
        self.new_chat_button.setEnabled(can_new_chat)

    def set_hint(self, text: str) -> None:
        self.hint_label.setText(text)

    def prompt_text(self) -> str:
        return self.prompt_edit.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt_edit.setPlainText(text)
        self.prompt_edit.moveCursor(QTextCursor.MoveOperation.End)

    def clear_sent_prompt(self) -> None:
        """Empty the prompt box after Send, keeping the text for `give_back_prompt`."""
        self.prompt_edit.set_aside()

    def give_back_prompt(self, text: str) -> None:
        """A failed start gives the prompt back: into the box if it is still empty."""
        if not self.prompt_text().strip() and not self.prompt_edit.take_back(text):
            self.set_prompt_text(text)

    def forget_sent_prompt(self) -> None:
        self.prompt_edit.drop_set_aside()

    # ---- transcript -----------------------------------------------------------------------
    def show_messages(self, messages: Sequence[ChatMessage]) -> None:
        self._repaint_timer.stop()
        self._dirty = False
        self._messages = list(messages)
        self._streaming = False
        self.transcript.show_messages(self._messages)
        self.tool_reply.show_call(pending_call(self._messages))
        if self.editing is not None and not self.is_user_message(self.editing):
            self.cancel_edit()

    def begin_answer(self) -> None:
        self._streaming = True
        self._repaint_timer.setInterval(REPAINT_INTERVAL_MS)
        self.transcript.begin_answer(len(self._messages))

    def set_unsaved(self, indices: Collection[int], reason: str = "") -> None:
        """Mark the messages the chat history lacks (a save failed, or there is none)."""
        marks = frozenset(indices)
        if marks == self.transcript.unsaved and reason == self.transcript.unsaved_reason:
            return
        self.transcript.unsaved, self.transcript.unsaved_reason = marks, reason
        self._redraw_keeping_stream()

    def set_context(self, report: ContextReport | None, render: bool = True) -> None:
        """Show per-turn tokens and the context cut of `report` (None: not known)."""
        old = self.transcript.context
        self.transcript.context = report
        if not render or _context_key(old) == _context_key(report):
            return
        self._redraw_keeping_stream()

    def _redraw_keeping_stream(self) -> None:
        streaming, text = self._streaming, self.transcript.answer_text
        self.show_messages(self._messages)
        if streaming:  # rebuild the answer being written too
            self.begin_answer()
            self.transcript.update_answer(text)

    def is_user_message(self, index: int) -> bool:
        return 0 <= index < len(self._messages) and self._messages[index].role == "user"

    # ---- editing a sent message -----------------------------------------------------------
    @Slot(int)
    def begin_edit(self, index: int) -> None:
        """Put user message `index` in the prompt box; Send then answers it again."""
        if not self.is_user_message(index):
            return
        # A message from elsewhere (an imported chat) may hold more than a paste may: laying
        # a million lines out would freeze the window for seconds.
        too_long = self.prompt_edit.too_long(self._messages[index].content)
        if too_long:
            note = f"Not editable here: the message has {too_long}; copy it instead."
            emit(self.sig_status, note)
            return
        if self.editing is None:
            self._draft_before_edit = self.prompt_text()
        self.editing = index
        later = len(self._messages) - index - 1
        self.edit_label.setText(
            f"Editing your message {sum(m.role == 'user' for m in self._messages[:index]) + 1}. "
            "Send answers it again"
            + (
                f" and replaces the {later} message{'s' if later != 1 else ''} after it."
                if later
                else "."
            )
        )
        self.edit_bar.show()
        self.set_prompt_text(self._messages[index].content)
        self.prompt_edit.setFocus()

    @Slot()
    def cancel_edit(self) -> None:
        if self.editing is None:
            return
        self.editing = None
        self.edit_bar.hide()
        self.set_prompt_text(self._draft_before_edit)
        self._draft_before_edit = ""

    def finish_edit(self) -> None:
        """The edit was sent: leave edit mode with an empty prompt box."""
        self.editing = None
        self.edit_bar.hide()
        self._draft_before_edit = ""
        self.set_prompt_text("")

    @Slot()
    def _on_escape(self) -> None:
        if self.editing is not None and not self.stop_button.isEnabled():
            self.cancel_edit()
        else:
            emit(self.sig_stop)

    def append_answer(self, text: str) -> None:
        if not text:
            return
        self.transcript.append_answer(text)  # the one copy the screen draws from
        self._dirty = True
        if not self._repaint_timer.isActive():
            self._repaint_timer.start()

    @property
    def answer_text(self) -> str:
        """The answer streamed so far (including what is not painted yet)."""
        return self.transcript.answer_text

    @Slot()
    def _on_repaint(self) -> None:
        if self._dirty:
            self._dirty = False
            started = time.perf_counter()
            self.transcript.draw_answer()
            self.last_repaint_s = time.perf_counter() - started
            # Long answers cost more to draw: repaint less often, never hogging the thread.
            interval = self.last_repaint_s * 1000 / REPAINT_SHARE
            self._repaint_timer.setInterval(
                int(min(MAX_REPAINT_INTERVAL_MS, max(REPAINT_INTERVAL_MS, interval)))
            )

    def flush(self) -> None:
        """Paint what is pending now (e.g. before reading the transcript in a test)."""
        self._repaint_timer.stop()
        self.transcript.finish_drawing()
        self._on_repaint()

    @Slot(int)
    def copy_message(self, index: int) -> None:
        if 0 <= index < len(self._messages):
            QGuiApplication.clipboard().setText(self._messages[index].shown)
            emit(self.sig_copied, index)

    @Slot(int, int)
    def copy_code(self, index: int, number: int) -> None:
        code = self.transcript.code_of(index, number)
        if code is not None:
            QGuiApplication.clipboard().setText(code)
            emit(self.sig_code_copied, index, number)

    @Slot(int)
    def show_all(self, index: int) -> MessageViewer | None:
        """The whole of a long message in a window of its own."""
        if not 0 <= index < len(self._messages):
            return None
        message = self._messages[index]
        who = "your message" if message.role == "user" else "the answer"
        if self.viewer is not None:
            self.viewer.close()
            self.viewer.deleteLater()
        self.viewer = MessageViewer(f"Message {index + 1}: {who}", message.shown, self)
        self.viewer.show()
        return self.viewer

    # ---- links in messages ----------------------------------------------------------------
    @Slot(QUrl)
    def _on_link_clicked(self, url: QUrl) -> None:
        if self.confirm_link(url) and not self.open_url(url):
            emit(self.sig_status, "The web browser could not be started for this link.")

    @Slot(QUrl)
    def _on_link_refused(self, url: QUrl) -> None:
        emit(
            self.sig_status,
            f"Not opened: only web links (http, https) in messages open ({_shown(url)}).",
        )

    @Slot(QUrl)
    def _on_link_hovered(self, url: QUrl) -> None:
        # Where a link really goes, whatever its text says.
        if url.isEmpty() or self.transcript.links.parse(url) is not None:
            emit(self.sig_status, "")
        else:
            emit(self.sig_status, _shown(url))

    def _confirm_link(self, url: QUrl) -> bool:
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Open link",
            "Open this link in your web browser?",
            parent=self,
        )
        box.setObjectName("openLinkBox")
        box.setInformativeText(plain_tip(_shown(url)))  # exactly where it goes
        box.setStandardButtons(QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        result = box.exec()
        box.deleteLater()
        return result == QMessageBox.StandardButton.Open

    @Slot()
    def _on_submit(self) -> None:
        text = self.prompt_text()
        if text.strip() and self.send_button.isEnabled():
            self.regenerate_note.hide()  # a new question: the note was about the last one
            if self.editing is not None:
                emit(self.sig_edit_submitted, self.editing, text)
            else:
                emit(self.sig_send, text)


def _shown(url: QUrl) -> str:
    text = url.toDisplayString()
    return text if len(text) <= LINK_SHOWN_CHARS else text[: LINK_SHOWN_CHARS - 1] + "…"


def _context_key(report: ContextReport | None) -> object:
    """What of a report the transcript draws: re-render only when this changes."""
    if report is None:
        return None
    return (report.cut_index, report.limit, report.message_count, report.turns)
