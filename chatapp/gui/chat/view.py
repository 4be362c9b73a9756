"""The chat view: a Markdown transcript, the prompt box and the send / stop / regenerate row."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from PySide6.QtCore import Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QFont,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QShortcut,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.common.qtcompat import emit
from chatapp.session.context import ContextReport
from chatapp.session.conversation import ChatMessage
from chatapp.session.formatting import figures_line

# Raw HTML in a message is shown as text: a model's "<b>" is not markup for us.
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | (
    QTextDocument.MarkdownFeature.MarkdownNoHTML
)

REPAINT_INTERVAL_MS = 30
STREAM_CURSOR = " ▍"
ROLE_NAMES = {"user": "You", "assistant": "Assistant"}
ROLE_COLORS = {"user": "#1f5fa8", "assistant": "#2e7d32"}
CODE_BACKGROUND = QColor("#f1f3f5")
FIGURES_COLOR = QColor("#6b7280")
NOT_SENT_COLOR = QColor("#9ca3af")  # messages the context no longer holds
CUT_TEXT = "— earlier messages are not sent to the model (context full) —"


class PromptEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line, Esc stops the answer."""

    sig_submit = Signal()
    sig_escape = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                # A plain "\n" (QPlainTextEdit would insert a Unicode line separator).
                self.insertPlainText("\n")
            else:
                emit(self.sig_submit)
            event.accept()
            return
        if event.key() == Qt.Key.Key_Escape:
            emit(self.sig_escape)
            event.accept()
            return
        super().keyPressEvent(event)


class TranscriptView(QTextBrowser):
    """The conversation as one rich-text document, built with cursors so that streaming
    only rewrites the answer being written, never the whole transcript."""

    sig_copy_requested = Signal(int)  # message index
    sig_edit_requested = Signal(int)  # index of a user message

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcriptView")
        self.context: ContextReport | None = None  # per-turn tokens and the cut, if known
        self.setOpenLinks(False)  # our links are actions ("copy:3"), not places
        # Placeholders do not wrap: one short line that fits a narrow chat pane.
        self.setPlaceholderText("Ask the model something; the answer streams in here.")
        self.anchorClicked.connect(self._on_anchor_clicked)
        self._starts: list[tuple[int, int]] = []  # (document position, message index)
        self._roles: dict[int, str] = {}
        self._stream_start: int | None = None
        # Per drawn message: its draw key and the document position where its drawing begins.
        self._drawn: list[tuple[tuple[object, ...], int]] = []
        self._tail = 0  # where the drawn messages end (a streaming answer follows)

    # ---- building the document ----------------------------------------------------------
    def show_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Draw `messages`, keeping the drawn ones that are unchanged: drawing a long chat's
        Markdown takes a fifth of a second, and sending, regenerating or a new token count
        only changes its end."""
        keys = [self._draw_key(i, m) for i, m in enumerate(messages)]
        same = 0
        while same < min(len(keys), len(self._drawn)) and keys[same] == self._drawn[same][0]:
            same += 1
        if same == 0:
            self.document().clear()
        else:  # drop what follows the unchanged messages (including a streamed answer)
            cursor = QTextCursor(self.document())
            cursor.setPosition(self._drawn[same][1] if same < len(self._drawn) else self._tail)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
        self._drawn = self._drawn[:same]
        self._starts = [(pos, i) for pos, i in self._starts if i < same]
        self._roles = {i: m.role for i, m in enumerate(messages)}
        self._stream_start = None
        cut = self.context.cut_index if self.context is not None else None
        for index in range(same, len(messages)):
            begin = self._end_cursor().position()
            if index == cut:
                self._append_cut()
            self._append_message(index, messages[index], not_sent=cut is not None and index < cut)
            self._drawn.append((keys[index], begin))
        self._tail = self._end_cursor().position()
        self._scroll(True)

    def _draw_key(self, index: int, message: ChatMessage) -> tuple[object, ...]:
        """Everything that decides how message `index` is drawn."""
        context = self.context
        if context is None:
            return (message.role, message.content, message.figures)
        turn = context.turn_starting_at(index)
        cut = context.cut_index
        return (
            message.role,
            message.content,
            message.figures,
            context.describe() if index == cut else None,
            cut is not None and index < cut,
            (turn, context.limit) if turn is not None and index < context.message_count else None,
        )

    def _append_cut(self) -> None:
        """The line where the context policy cut: nothing above it reaches the model."""
        fmt = QTextBlockFormat()
        fmt.setTopMargin(14)
        fmt.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        cursor = self._end_cursor()
        if self.document().isEmpty():
            cursor.setBlockFormat(fmt)
        else:
            cursor.insertBlock(fmt, QTextCharFormat())
        char = self._figures_format()
        char.setForeground(QColor("#b45309"))
        if self.context is not None:
            char.setToolTip(self.context.describe())
        cursor.insertText(CUT_TEXT, char)

    def begin_answer(self, index: int) -> None:
        """Header for the answer that is about to stream (it becomes message `index`)."""
        self._append_header(index, "assistant", copy_link=False)
        cursor = self._end_cursor()
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        self._stream_start = cursor.position()
        cursor.insertText(STREAM_CURSOR.strip())
        self._scroll(True)

    def update_answer(self, text: str) -> None:
        if self._stream_start is None:
            return
        stick = self._at_bottom()
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._stream_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setCharFormat(QTextCharFormat())
        cursor.insertMarkdown(text + STREAM_CURSOR, MARKDOWN)
        self._style_code_blocks(self._stream_start)
        self._scroll(stick)

    def _append_message(self, index: int, message: ChatMessage, not_sent: bool = False) -> None:
        self._append_header(index, message.role)
        cursor = self._end_cursor()
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        start = cursor.position()
        self._starts.append((start, index))
        if message.role == "user":
            # What the user typed, as typed: line breaks kept, no Markdown surprises.
            cursor.insertText(message.content)
        else:
            cursor.insertMarkdown(message.content or "*(empty answer)*", MARKDOWN)
            self._style_code_blocks(start)
        if not_sent:
            grey = QTextCharFormat()
            grey.setForeground(NOT_SENT_COLOR)
            cursor = QTextCursor(self.document())
            cursor.setPosition(start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(grey)
        if message.figures is not None:
            fmt = QTextBlockFormat()
            fmt.setTopMargin(2)
            cursor = self._end_cursor()
            cursor.insertBlock(fmt, self._figures_format())
            cursor.insertText(figures_line(message.figures))

    def _append_header(self, index: int, role: str, copy_link: bool = True) -> None:
        cursor = self._end_cursor()
        fmt = QTextBlockFormat()
        fmt.setTopMargin(14 if not self.document().isEmpty() else 0)
        fmt.setBottomMargin(2)
        if self.document().isEmpty():
            cursor.setBlockFormat(fmt)
        else:
            cursor.insertBlock(fmt, QTextCharFormat())
        self._starts.append((cursor.position(), index))
        name = QTextCharFormat()
        name.setFontWeight(QFont.Weight.Bold)
        name.setForeground(QColor(ROLE_COLORS.get(role, "#000000")))
        cursor.insertText(ROLE_NAMES.get(role, role.title()), name)
        context = self.context
        turn = context.turn_starting_at(index) if context is not None else None
        if context is not None and turn is not None and index < context.message_count:
            tokens = self._figures_format()
            tokens.setToolTip(
                f"This turn (question and answer) takes {turn.tokens} tokens of the model's "
                f"{context.limit}-token context" + ("." if turn.sent else "; it is no longer sent.")
            )
            cursor.insertText("   ", QTextCharFormat())
            cursor.insertText(f"turn: {turn.tokens} tokens", tokens)
        if copy_link and role == "user":
            self._append_link(cursor, f"edit:{index}", "Edit", "Edit this message and resend it")
        if copy_link:
            self._append_link(cursor, f"copy:{index}", "Copy", "Copy this message as Markdown")

    def _append_link(self, cursor: QTextCursor, href: str, text: str, tip: str) -> None:
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(href)
        link.setForeground(QColor("#6b7280"))
        link.setFontUnderline(False)
        link.setToolTip(tip)
        cursor.insertText("   ", QTextCharFormat())
        cursor.insertText(text, link)

    def _figures_format(self) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setForeground(FIGURES_COLOR)
        size = self.font().pointSizeF()
        fmt.setFontPointSize(max(7.0, size - 1.0) if size > 0 else 8.0)
        return fmt

    def _style_code_blocks(self, start: int) -> None:
        """Give fenced code a background so it reads as code."""
        block = self.document().findBlock(start)
        while block.isValid():
            fmt = block.blockFormat()
            if fmt.nonBreakableLines() or fmt.hasProperty(QTextFormat.Property.BlockCodeFence):
                fmt.setBackground(CODE_BACKGROUND)
                cursor = QTextCursor(block)
                cursor.setBlockFormat(fmt)
            block = block.next()

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _scroll(self, to_bottom: bool) -> None:
        if to_bottom:
            bar = self.verticalScrollBar()
            bar.setValue(bar.maximum())

    # ---- copying ------------------------------------------------------------------------
    def is_user_message(self, index: int) -> bool:
        return any(i == index for _, i in self._starts) and self._roles.get(index) == "user"

    def message_at(self, position: int) -> int | None:
        found = None
        for start, index in self._starts:
            if start <= position:
                found = index
        return found

    @Slot(QUrl)
    def _on_anchor_clicked(self, url: QUrl) -> None:
        signal = {"copy": self.sig_copy_requested, "edit": self.sig_edit_requested}.get(
            url.scheme()
        )
        if signal is not None:
            with contextlib.suppress(ValueError):
                emit(signal, int(url.path()))

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.createStandardContextMenu(event.pos())
        index = self.message_at(self.cursorForPosition(event.pos()).position())
        if index is not None and index >= 0:
            menu.addSeparator()
            action = menu.addAction("Copy this message")
            action.triggered.connect(lambda: emit(self.sig_copy_requested, index))
            if self.is_user_message(index):
                edit = menu.addAction("Edit and resend…")
                edit.triggered.connect(lambda: emit(self.sig_edit_requested, index))
        menu.exec(event.globalPos())
        menu.deleteLater()


class ChatView(QWidget):
    sig_send = Signal(str)
    sig_stop = Signal()
    sig_regenerate = Signal()
    sig_new_chat = Signal()
    sig_copied = Signal(int)  # message index
    sig_edit_submitted = Signal(int, str)  # index of the user message, its new text

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._messages: list[ChatMessage] = []
        self._streaming = False
        self.editing: int | None = None  # the user message being edited in the prompt box
        self._draft_before_edit = ""
        self._answer_text = ""
        self._dirty = False
        # Batches may arrive faster than we want to repaint: coalesce into one repaint per tick.
        self._repaint_timer = QTimer(self)
        self._repaint_timer.setSingleShot(True)
        self._repaint_timer.setInterval(REPAINT_INTERVAL_MS)
        self._repaint_timer.timeout.connect(self._on_repaint)

        self.transcript = TranscriptView(self)
        self.transcript.sig_copy_requested.connect(self.copy_message)
        self.transcript.sig_edit_requested.connect(self.begin_edit)

        self.prompt_edit = PromptEdit(self)
        self.prompt_edit.setObjectName("promptEdit")
        self.prompt_edit.setPlaceholderText(
            "Message the model (Enter sends, Shift+Enter: new line)"
        )
        self.prompt_edit.setTabChangesFocus(True)
        line = self.prompt_edit.fontMetrics().lineSpacing()
        self.prompt_edit.setFixedHeight(line * 4 + 14)
        self.prompt_edit.sig_submit.connect(self._on_submit)
        self.prompt_edit.sig_escape.connect(self._on_escape)

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
        self.new_chat_button = QPushButton("New chat", self)
        self.new_chat_button.setObjectName("newChatButton")
        self.new_chat_button.setToolTip("Start an empty conversation")
        self.new_chat_button.clicked.connect(self.sig_new_chat)
        self.hint_label = QLabel("", self)
        self.hint_label.setObjectName("chatHint")
        self.hint_label.setStyleSheet("color: #6b7280;")
        self.hint_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

        # Esc also stops when the focus is elsewhere in the window (e.g. on the transcript).
        self._stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        self._stop_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self._stop_shortcut.activated.connect(self._on_escape)

        # Shown while a message is being edited in the prompt box.
        self.edit_bar = QFrame(self)
        self.edit_bar.setObjectName("editBar")
        self.edit_bar.setStyleSheet(
            "#editBar { background: #eaf2fd; border: 1px solid #b6cff5; border-radius: 4px; }"
        )
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
        actions.addSpacing(8)
        actions.addWidget(self.hint_label, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(actions)
        layout.addWidget(self.edit_bar)
        layout.addLayout(entry)
        self.set_actions(can_send=False, can_stop=False, can_regenerate=False, can_new_chat=True)

    # ---- state ----------------------------------------------------------------------------
    def set_actions(
        self, *, can_send: bool, can_stop: bool, can_regenerate: bool, can_new_chat: bool
    ) -> None:
        self.send_button.setEnabled(can_send)
        self.stop_button.setEnabled(can_stop)
        self.regenerate_button.setEnabled(can_regenerate)
        self.new_chat_button.setEnabled(can_new_chat)

    def set_hint(self, text: str) -> None:
        self.hint_label.setText(text)

    def prompt_text(self) -> str:
        return self.prompt_edit.toPlainText()

    def set_prompt_text(self, text: str) -> None:
        self.prompt_edit.setPlainText(text)
        self.prompt_edit.moveCursor(QTextCursor.MoveOperation.End)

    # ---- transcript -----------------------------------------------------------------------
    def show_messages(self, messages: Sequence[ChatMessage]) -> None:
        self._repaint_timer.stop()
        self._dirty = False
        self._messages = list(messages)
        self._streaming = False
        self.transcript.show_messages(self._messages)
        if self.editing is not None and not self.is_user_message(self.editing):
            self.cancel_edit()

    def begin_answer(self) -> None:
        self._answer_text = ""
        self._streaming = True
        self.transcript.begin_answer(len(self._messages))

    def set_context(self, report: ContextReport | None, render: bool = True) -> None:
        """Show per-turn tokens and the context cut of `report` (None: not known)."""
        old = self.transcript.context
        self.transcript.context = report
        if not render or _context_key(old) == _context_key(report):
            return
        streaming, text = self._streaming, self._answer_text
        self.show_messages(self._messages)
        if streaming:  # rebuild the answer being written too
            self.begin_answer()
            self._answer_text = text
            self.transcript.update_answer(text)

    def is_user_message(self, index: int) -> bool:
        return 0 <= index < len(self._messages) and self._messages[index].role == "user"

    # ---- editing a sent message -----------------------------------------------------------
    @Slot(int)
    def begin_edit(self, index: int) -> None:
        """Put user message `index` in the prompt box; Send then answers it again."""
        if not self.is_user_message(index):
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
        self._answer_text += text
        self._dirty = True
        if not self._repaint_timer.isActive():
            self._repaint_timer.start()

    @property
    def answer_text(self) -> str:
        """The answer streamed so far (including what is not painted yet)."""
        return self._answer_text

    @Slot()
    def _on_repaint(self) -> None:
        if self._dirty:
            self._dirty = False
            self.transcript.update_answer(self._answer_text)

    def flush(self) -> None:
        """Paint what is pending now (e.g. before reading the transcript in a test)."""
        self._repaint_timer.stop()
        self._on_repaint()

    @Slot(int)
    def copy_message(self, index: int) -> None:
        if 0 <= index < len(self._messages):
            QGuiApplication.clipboard().setText(self._messages[index].content)
            emit(self.sig_copied, index)

    @Slot()
    def _on_submit(self) -> None:
        text = self.prompt_text()
        if text.strip() and self.send_button.isEnabled():
            if self.editing is not None:
                emit(self.sig_edit_submitted, self.editing, text)
            else:
                emit(self.sig_send, text)


def _context_key(report: ContextReport | None) -> object:
    """What of a report the transcript draws: re-render only when this changes."""
    if report is None:
        return None
    return (report.cut_index, report.limit, report.message_count, report.turns)
