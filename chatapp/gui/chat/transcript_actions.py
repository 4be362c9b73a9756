"""What the transcript's readers and clicks need: the message or code block at a position,
its links (copy, edit, versions, code, web links), and the context menu. The drawing is
transcript.py's; it fills `_starts`, `_roles` and `_code` as it draws."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QUrl, Signal, Slot
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import QMenu, QTextBrowser

from chatapp.gui.chat import code_blocks
from chatapp.gui.chat.safe_document import ActionLinks, is_web_link
from chatapp.gui.common.qtcompat import emit


class TranscriptActions(QTextBrowser):
    sig_copy_requested = Signal(int)  # message index
    sig_edit_requested = Signal(int)  # index of a user message
    sig_version_requested = Signal(int, int)  # answer index, version to show
    sig_show_all_requested = Signal(int)  # message index
    sig_code_copy_requested = Signal(int, int)  # message index, code block number
    sig_link_clicked = Signal(QUrl)  # a web link in a message (the view asks, then opens it)
    sig_link_refused = Signal(QUrl)  # any other link in a message: never followed

    # Filled by the drawing (transcript.py).
    links: ActionLinks
    _starts: list[tuple[int, int]]  # (document position, message index)
    _roles: dict[int, str]
    _code: dict[int, list[code_blocks.CodeGroup]]  # message index -> code blocks

    # ---- actions ------------------------------------------------------------------------
    def is_user_message(self, index: int) -> bool:
        return any(i == index for _, i in self._starts) and self._roles.get(index) == "user"

    def message_at(self, position: int) -> int | None:
        found = None
        for start, index in self._starts:
            if start <= position:
                found = index
        return found

    def code_of(self, index: int, number: int) -> str | None:
        code = self._code.get(index, [])
        return code[number].code if 0 <= number < len(code) else None

    def code_at(self, position: int) -> tuple[int, int] | None:
        """(message index, code block number) of the code block drawn at `position`."""
        index = self.message_at(position)
        if index is None:
            return None
        for number, group in enumerate(self._code.get(index, [])):
            first, last = group.blocks[0], group.blocks[-1]
            valid = first.isValid() and last.isValid()
            if valid and first.position() <= position < last.position() + last.length():
                return index, number
        return None

    @Slot(QUrl)
    def _on_anchor_clicked(self, url: QUrl) -> None:
        action = self.links.parse(url)
        if action is None:
            emit(self.sig_link_clicked if is_web_link(url) else self.sig_link_refused, url)
            return
        verb, numbers = action
        if verb in ("copy", "edit", "show") and len(numbers) == 1:
            signal = {
                "copy": self.sig_copy_requested,
                "edit": self.sig_edit_requested,
                "show": self.sig_show_all_requested,
            }[verb]
            emit(signal, numbers[0])
        elif verb == "version" and len(numbers) == 2:
            emit(self.sig_version_requested, numbers[0], numbers[1])
        elif verb == "code" and len(numbers) == 2:
            emit(self.sig_code_copy_requested, numbers[0], numbers[1])

    def context_menu(self, position: int, parent_pos: QPoint) -> QMenu:
        """The standard menu, plus actions for the message (and code block) at `position`."""
        menu = self.createStandardContextMenu(parent_pos)
        index = self.message_at(position)
        code = self.code_at(position)
        if index is not None and index >= 0:
            menu.addSeparator()
            if code is not None:
                copy_code = menu.addAction("Copy code block")
                copy_code.triggered.connect(lambda: emit(self.sig_code_copy_requested, *code))
            action = menu.addAction("Copy this message")
            action.triggered.connect(lambda: emit(self.sig_copy_requested, index))
            if self.is_user_message(index):
                edit = menu.addAction("Edit and resend…")
                edit.triggered.connect(lambda: emit(self.sig_edit_requested, index))
        return menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        position = self.cursorForPosition(event.pos()).position()
        menu = self.context_menu(position, event.pos())
        menu.exec(event.globalPos())
        menu.deleteLater()
