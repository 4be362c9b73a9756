"""The conversation as one rich-text document, built with cursors so that streaming only
rewrites the answer being written, never the whole transcript.

Drawing is bounded three ways, so that no message stalls the window (the limits and their
measurements are in render_policy.py): each message is drawn as Markdown only when it is small
and simple, otherwise as (elided) plain text; a long chat is drawn a slice of messages at a
time between events (`SLICE_S`); nothing a message names is ever loaded (safe_document.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import (
    QColor,
    QFont,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QWidget

from chatapp.gui.chat import code_blocks, render_policy
from chatapp.gui.chat.colors import TranscriptColors, colors_for
from chatapp.gui.chat.safe_document import (
    ActionLinks,
    SafeDocument,
    markdown_fragment,
    plain_tip,
)
from chatapp.gui.chat.transcript_actions import TranscriptActions
from chatapp.session.context import ContextReport
from chatapp.session.conversation import ChatMessage
from chatapp.session.formatting import figures_line

# Raw HTML in a message is shown as text: a model's "<b>" is not markup for us.
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | (
    QTextDocument.MarkdownFeature.MarkdownNoHTML
)
STREAM_CURSOR = " ▍"
ROLE_NAMES = {"user": "You", "assistant": "Assistant", "tool": "Tool result"}
CUT_TEXT = "— earlier messages are not sent to the model (context full) —"
EMPTY_ANSWER = "*(empty answer)*"
# An answer whose first token ended it: said so, since nothing else on screen explains it.
EMPTY_AT_ONCE = "*(empty answer: the model ended it before writing anything)*"
SLICE_S = 0.03  # drawing a long chat yields to the event loop after this long
# A short chat is drawn at once whatever the clock says (each message is bounded anyway), so
# that what the window shows after a change does not depend on the machine's load.
SLICE_MIN_MESSAGES = 24


@dataclass
class _Stream:
    """The answer being written: where it starts once its header is drawn, its text."""

    index: int
    start: int | None = None
    text: str = ""


class TranscriptView(TranscriptActions):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcriptView")
        document = SafeDocument(self)
        document.setUndoRedoEnabled(False)  # a stream of redraws must not pile up undo steps
        self.setDocument(document)
        self.links = ActionLinks()
        self.context: ContextReport | None = None  # per-message tokens and the cut, if known
        self.unsaved: frozenset[int] = frozenset()  # messages the history lacks
        self.unsaved_reason = ""
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        # Placeholders do not wrap: one short line that fits a narrow chat pane.
        self.setPlaceholderText("Ask the model something.")
        self.anchorClicked.connect(self._on_anchor_clicked)
        self.colors: TranscriptColors = colors_for(self.palette())
        self._messages: list[ChatMessage] = []
        self._keys: list[tuple[object, ...]] = []
        self._starts: list[tuple[int, int]] = []  # (document position, message index)
        self._roles: dict[int, str] = {}
        self._code: dict[int, list[code_blocks.CodeGroup]] = {}  # message index -> code blocks
        # Per drawn message: its draw key and the document position where its drawing begins.
        self._drawn: list[tuple[tuple[object, ...], int]] = []
        self._tail = 0  # where the drawn messages end (a streaming answer follows)
        self._stream: _Stream | None = None
        self._slice_timer = QTimer(self)
        self._slice_timer.setSingleShot(True)
        self._slice_timer.setInterval(0)
        self._slice_timer.timeout.connect(self._draw_more)

    # ---- building the document ----------------------------------------------------------
    @property
    def drawing(self) -> bool:
        """Messages are still being drawn (a slice at a time)."""
        return len(self._drawn) < len(self._messages)

    def show_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Draw `messages`, keeping the drawn ones that are unchanged (sending, regenerating
        or a new token count only changes the end); the rest follows slice by slice."""
        self._roles = {i: m.role for i, m in enumerate(messages)}
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
        self._tail = self._end_cursor().position()
        self._starts = [(pos, i) for pos, i in self._starts if i < same]
        self._code = {i: code for i, code in self._code.items() if i < same}
        self._messages, self._keys = list(messages), keys
        self._stream = None
        self._draw_more()

    def finish_drawing(self) -> None:
        """Draw every pending message now (tests, and before reading the whole document)."""
        while self.drawing:
            self._draw_more(budget_s=float("inf"))

    @Slot()
    def _draw_more(self, budget_s: float | None = None) -> None:
        self._slice_timer.stop()
        started = time.perf_counter()
        budget_s = SLICE_S if budget_s is None else budget_s
        cut = self.context.cut_index if self.context is not None else None
        while self.drawing:
            index = len(self._drawn)
            begin = self._end_cursor().position()
            if index == cut:
                self._append_cut()
            self._append_message(index, self._messages[index], cut is not None and index < cut)
            self._drawn.append((self._keys[index], begin))
            late = time.perf_counter() - started > budget_s
            if late and self.drawing and len(self._drawn) >= SLICE_MIN_MESSAGES:
                self._slice_timer.start()
                break
        self._tail = self._end_cursor().position()
        if not self.drawing and self._stream is not None and self._stream.start is None:
            self._draw_stream_header()
        self._scroll(True)

    def _draw_key(self, index: int, message: ChatMessage) -> tuple[object, ...]:
        """Everything that decides how message `index` is drawn."""
        key: tuple[object, ...] = (
            message.role,
            message.shown,
            message.figures,
            message.version,
            message.version_count,
            index in self.unsaved,
        )
        context = self.context
        if context is None:
            return key
        cut = context.cut_index
        return (
            *key,
            context.describe() if index == cut else None,
            cut is not None and index < cut,
            self._token_tip(index),
        )

    def _append_cut(self) -> None:
        """The line where the context policy cut: nothing above it reaches the model."""
        fmt = QTextBlockFormat()
        fmt.setTopMargin(14)
        fmt.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        cursor = self._new_block(fmt)
        char = self._small_format(self.colors.warning)
        if self.context is not None:
            char.setToolTip(self.context.describe())
        cursor.insertText(CUT_TEXT, char)

    def begin_answer(self, index: int) -> None:
        """Header for the answer that is about to stream (it becomes message `index`)."""
        self._stream = _Stream(index)
        if not self.drawing:
            self._draw_stream_header()
            self._scroll(True)

    def _draw_stream_header(self) -> None:
        stream = self._stream
        assert stream is not None
        self._append_header(stream.index, "assistant", actions=False)
        cursor = self._end_cursor()
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        stream.start = cursor.position()
        self._draw_stream_text(stream)

    @property
    def answer_text(self) -> str:
        """The answer streamed so far, drawn or not ("" when none streams)."""
        return self._stream.text if self._stream is not None else ""

    def append_answer(self, text: str) -> None:
        """More of the streaming answer, drawn by the next `draw_answer`."""
        if self._stream is not None:
            self._stream.text += text

    def update_answer(self, text: str) -> None:
        if self._stream is not None:
            self._stream.text = text
            self.draw_answer()

    def draw_answer(self) -> None:
        stream = self._stream
        if stream is not None and stream.start is not None:
            stick = self._at_bottom()
            self._draw_stream_text(stream)
            self._scroll(stick)

    def _draw_stream_text(self, stream: _Stream) -> None:
        assert stream.start is not None
        cursor = QTextCursor(self.document())
        cursor.setPosition(stream.start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setCharFormat(QTextCharFormat())
        if not stream.text:
            cursor.insertText(STREAM_CURSOR.strip())
            return
        plan = render_policy.plan(stream.text, markdown=True)
        self._insert_body(cursor, stream.index, plan, stream.text, streaming=True)

    def _append_message(self, index: int, message: ChatMessage, not_sent: bool = False) -> None:
        self._append_header(index, message.role)
        cursor = self._end_cursor()
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        start = cursor.position()
        self._starts.append((start, index))
        # What the user typed is shown as typed: line breaks kept, no Markdown surprises.
        text = message.shown or (empty_text(message) if message.role == "assistant" else "")
        plan = render_policy.plan(text, markdown=message.role == "assistant")
        self._insert_body(cursor, index, plan, text, streaming=False)
        if not_sent:
            grey = QTextCharFormat()
            grey.setForeground(self.colors.not_sent)
            cursor = QTextCursor(self.document())
            cursor.setPosition(start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(grey)
        if message.figures is not None:
            fmt = QTextBlockFormat()
            fmt.setTopMargin(2)
            line = self._small_format(self.colors.muted)
            line.setToolTip(self._figures_tip(index, message))
            # One token count per answer: the header's (what it takes of the context, like
            # every message's) where it is known, else the figure line's.
            counted = self._token_tip(index) is not None
            self._new_block(fmt).insertText(figures_line(message.figures, tokens=not counted), line)

    def _insert_body(
        self,
        cursor: QTextCursor,
        index: int,
        plan: render_policy.RenderPlan,
        text: str,
        streaming: bool,
    ) -> None:
        start = cursor.position()
        if plan.markdown:
            fragment, first_block = markdown_fragment(
                render_policy.keep_line_breaks(plan.head) + (STREAM_CURSOR if streaming else ""),
                MARKDOWN,
                self._small_format(self.colors.muted),
            )
            cursor.setBlockFormat(first_block)
            cursor.insertFragment(fragment)
            if streaming:
                self._shade_code(start)
            else:
                self._code[index] = code_blocks.decorate(
                    self.document(), start, text, self.colors, self.links, index
                )
            return
        cursor.insertText(plan.head)
        if plan.elided:
            marker = self._new_block(QTextBlockFormat())
            marker.insertText(
                render_policy.describe_hidden(plan.hidden) + "   ",
                self._small_format(self.colors.muted),
            )
            if not streaming:
                self._insert_link(
                    marker, self.links.href("show", index), "Show all", "Open the whole message"
                )
            self._new_block(QTextBlockFormat()).insertText(plan.tail)
        if streaming:
            self._end_cursor().insertText(STREAM_CURSOR)
        if plan.reason:
            note = self._small_format(self.colors.muted)
            note.setFontItalic(True)
            self._new_block(QTextBlockFormat()).insertText(
                f"Shown as plain text: {plan.reason}.", note
            )

    def _shade_code(self, start: int) -> None:
        """Give fenced code a background so it reads as code (a streamed answer: no more)."""
        block = self.document().findBlock(start)
        while block.isValid():
            if code_blocks.is_code(block):
                fmt = block.blockFormat()
                fmt.setBackground(self.colors.code_background)
                QTextCursor(block).setBlockFormat(fmt)
            block = block.next()

    def _append_header(self, index: int, role: str, actions: bool = True) -> None:
        fmt = QTextBlockFormat()
        fmt.setTopMargin(14 if not self.document().isEmpty() else 0)
        fmt.setBottomMargin(2)
        cursor = self._new_block(fmt)
        self._starts.append((cursor.position(), index))
        name = QTextCharFormat()
        name.setFontWeight(QFont.Weight.Bold)
        name.setForeground(self.colors.user if role == "user" else self.colors.assistant)
        message = self._messages[index] if actions and index < len(self._messages) else None
        tool = f": {message.tool_name}" if message is not None and message.tool_name else ""
        cursor.insertText(ROLE_NAMES.get(role, role.title()) + tool, name)
        if message is not None and message.version_count > 1:
            self._append_versions(cursor, index, message)
        tip = self._token_tip(index) if actions else None
        if tip is not None:
            tokens = self._small_format(self.colors.muted)
            tokens.setToolTip(tip[1])
            cursor.insertText("   ", QTextCharFormat())
            cursor.insertText(f"{tip[0]} tokens of context{self._counted_for()}", tokens)
        if actions and index in self.unsaved:
            badge = self._small_format(self.colors.warning)
            badge.setFontWeight(QFont.Weight.DemiBold)
            badge.setToolTip(
                plain_tip(
                    "This message is not in the chat history"
                    + (f" ({self.unsaved_reason})" if self.unsaved_reason else "")
                    + ". chatapp saves it when it can; closing the window offers to export it."
                )
            )
            cursor.insertText("   ", QTextCharFormat())
            cursor.insertText("not saved", badge)
        if actions and role == "user":
            self._insert_link(
                cursor, self.links.href("edit", index), "Edit", "Edit this message and resend it"
            )
        if actions:
            self._insert_link(
                cursor, self.links.href("copy", index), "Copy", "Copy this message as Markdown"
            )

    def _append_versions(self, cursor: QTextCursor, index: int, message: ChatMessage) -> None:
        """‹ 2/3 › between the versions of a regenerated answer."""
        version, count = message.version, message.version_count
        cursor.insertText("   ", QTextCharFormat())
        for text, target, tip in (
            ("‹", version - 1, "Show the previous answer"),
            (f" {version + 1}/{count} ", None, f"Answer {version + 1} of {count}"),
            ("›", version + 1, "Show the next answer"),
        ):
            fmt = self._small_format(self.colors.muted)
            fmt.setToolTip(tip)
            if target is not None and 0 <= target < count:
                fmt.setAnchor(True)
                fmt.setAnchorHref(self.links.href("version", index, target))
                fmt.setForeground(self.colors.link)
                fmt.setFontWeight(QFont.Weight.Bold)
            elif target is not None:
                fmt.setForeground(self.colors.not_sent)
            cursor.insertText(text, fmt)

    def _token_tip(self, index: int) -> tuple[int, str] | None:
        """The tokens message `index` adds to the prompt, and a sentence about them."""
        context = self.context
        if context is None or index >= context.message_count:
            return None
        tokens = context.message_tokens(index)
        turn = context.turn_holding(index)
        if tokens is None or turn is None:
            return None
        role = self._roles.get(index, "user")
        what = "This question" if role == "user" else "This answer"
        tip = (
            f"{what} takes {tokens} tokens of the model's {context.limit}-token context: its "
            "text and the chat template's markers around it. It does not change as the chat "
            "grows."
        )
        if turn.stop - turn.start > 1:
            tip += f" Question and answer together take {turn.tokens}."
        if self._counted_for():
            wrote = ", ".join(self._other_models())
            tip += (
                f" Counted for {context.model}, which answers next; {wrote} wrote answers in "
                "this chat (each answer's own figures stay under it)."
            )
        if not turn.sent:
            tip += " It is no longer sent (the context is full)."
        return tokens, tip

    def _other_models(self) -> list[str]:
        """The models that wrote this chat's answers, other than the one that counted."""
        counted = self.context.model if self.context is not None else ""
        models = {m.figures.model for m in self._messages if m.figures is not None}
        return sorted(m for m in models if m and counted and m != counted)

    def _counted_for(self) -> str:
        """ " for X" when the counts are another model's than some answers': never a count
        that reads as the one an answer was written with."""
        if self.context is None or not self._other_models():
            return ""
        return f" for {self.context.model}"

    def _figures_tip(self, index: int, message: ChatMessage) -> str:
        """What the figure line's token count is, and what the answer takes of the context
        (its text and the template's markers: a few tokens more)."""
        generated = message.figures.generated_tokens if message.figures is not None else None
        tip = f"The model wrote {generated or 0} tokens for this answer."
        context = self._token_tip(index)
        if context is not None:
            tip += (
                f" The {context[0]} beside its name is what it takes of the context: those and "
                "the chat template's markers around them."
            )
        return tip

    def _insert_link(self, cursor: QTextCursor, href: str, text: str, tip: str) -> None:
        link = self._small_format(self.colors.muted)
        link.setAnchor(True)
        link.setAnchorHref(href)
        link.setFontUnderline(False)
        link.setToolTip(tip)
        cursor.insertText("   ", QTextCharFormat())
        cursor.insertText(text, link)

    def _small_format(self, color: QColor) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setForeground(color)
        size = self.font().pointSizeF()
        fmt.setFontPointSize(max(7.0, size - 1.0) if size > 0 else 8.0)
        return fmt

    def _new_block(self, fmt: QTextBlockFormat) -> QTextCursor:
        """A cursor in a new block at the end (the first block when the document is empty)."""
        cursor = self._end_cursor()
        if self.document().isEmpty():
            cursor.setBlockFormat(fmt)
        else:
            cursor.insertBlock(fmt, QTextCharFormat())
        return cursor

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

    def redraw_all(self) -> None:
        """Draw everything again (new colours)."""
        stream = self._stream
        self._drawn = []
        self.show_messages(self._messages)
        if stream is not None:
            self.begin_answer(stream.index)
            self.update_answer(stream.text)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "_drawn"):
            self.colors = colors_for(self.palette())
            self.redraw_all()

    def loadResource(self, _type: int, _name: QUrl | str) -> object:
        """Nothing a message names is loaded (the document refuses too: safe_document.py)."""
        return None


def empty_text(message: ChatMessage) -> str:
    """What an answer without text shows: why, where its figures say the model ended it at its
    first token (an end-of-text token; text continuation sets it aside, chat does not)."""
    fig = message.figures
    if fig is not None and fig.finish_reason == "eos" and fig.generated_tokens == 0:
        return EMPTY_AT_ONCE
    return EMPTY_ANSWER
