"""No message is lost without a word: what the window does while the history lacks some.

A save can fail (another process keeps the history locked, the disk is full, the history is
read-only or turned off). Then:
- the transcript marks each message the history lacks ("not saved", with the reason);
- a timer retries every `RETRY_MS` (HistoryController.retry: a short lock timeout, and a
  read-only history that became writable is opened again); when it works, the user is told;
- New chat, opening another conversation, importing one (which opens it) and closing the
  window ask first: export the chat as shown (Markdown or JSON: store/transcript.py,
  store/export.py), go on without it, or cancel.

The question is an attribute (`ask`) so tests can answer it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtWidgets import QMessageBox

from chatapp.gui.chat.feature import chat_of
from chatapp.gui.common.export_folder import export_folder, remember_export_folder
from chatapp.safe_delete import write_replacing
from chatapp.session.history_records import snapshot
from chatapp.store import export, transcript

if TYPE_CHECKING:
    from chatapp.gui.history.controller import HistoryController
    from chatapp.gui.main_window import MainWindow

RETRY_MS = 3000
EXPORT_FILTERS = "Markdown (*.md);;chatapp JSON export (*.json)"
# The user's answer to "this chat is not saved": "export", "discard" or "cancel".
Answer = str


class UnsavedGuard(QObject):
    def __init__(
        self,
        window: MainWindow,
        controller: HistoryController,
        ask_save_path: Callable[[str, str, str], str | None],
    ) -> None:
        super().__init__(controller)
        self.window = window
        self.controller = controller
        self.ask_save_path = ask_save_path  # caption, suggested path, filters
        self.ask: Callable[[str, str, str], Answer] = self._ask  # title, text, discard label
        self.retry_timer = QTimer(self)
        self.retry_timer.setInterval(RETRY_MS)
        self.retry_timer.timeout.connect(self.retry)
        self.controller.events.unsaved_changed.connect(self.update)
        self.chat = chat_of(window)
        self.chat.controller.chat.events.conversation_changed.connect(lambda _c: self.update())
        window.leave_checks.append(self.may_leave)

    def reason(self) -> str:
        c = self.controller
        if c.sync_core.store is None:
            return "the chat history is off in this session"
        if c.sync_core.failure is not None:
            return _first_sentence(c.sync_core.failure)
        return ""

    @Slot()
    def update(self) -> None:
        """Marks in the transcript, and the retry timer, as the controller says."""
        indices = self.controller.sync_core.unsaved_indices()
        self.chat.chat_view.set_unsaved(indices, self.reason())
        retrying = (
            self.controller.sync_core.failure is not None
            and self.controller.sync_core.store is not None
        )
        if retrying and not self.retry_timer.isActive():
            self.retry_timer.start()
        elif not retrying:
            self.retry_timer.stop()

    @Slot()
    def retry(self) -> None:
        self.controller.sync_core.retry()
        self.update()

    def unsaved_count(self) -> int:
        return len(self.controller.sync_core.unsaved_indices())

    def may_leave(self, why: str) -> bool:
        """Before the chat shown goes away (`why`: "new chat", "open", "import", "close"):
        True to go on. With messages the history lacks, asks the user first."""
        count = self.unsaved_count()
        if count == 0:
            return True
        closing = why == "close"
        title = "Close chatapp" if closing else "This chat is not saved"
        text = (
            f"{count} message{'s' if count != 1 else ''} of this chat "
            f"{'are' if count != 1 else 'is'} not in the chat history ({self.reason()}). "
            + (
                "Closing loses them unless you export the chat first."
                if closing
                else "They are lost unless you export the chat first."
            )
        )
        answer = self.ask(title, text, "Close without saving" if closing else "Discard")
        if answer == "export":
            return self.export() is not None
        return answer == "discard"

    def export(self) -> Path | None:
        """Write the chat as shown (Markdown or JSON, by the file name) where the user says."""
        chat = self.chat.controller
        conversation = chat.chat.conversation
        name = _safe_name(conversation.title) + ".md"
        folder = export_folder(self.window.settings)
        path = self.ask_save_path("Export the unsaved chat", str(folder / name), EXPORT_FILTERS)
        if not path:
            return None
        target = Path(path)
        if target.suffix.lower() not in (".md", ".json"):
            target = target.with_suffix(".md")
        stored = snapshot(
            conversation,
            model=chat.backend_session.model.name
            if chat.backend_session.model is not None
            else None,
            system_prompt=self.chat.system_prompt(),
            now=datetime.now(UTC),
        )
        text = (
            export.to_json(stored)
            if target.suffix.lower() == ".json"
            else transcript.to_markdown(stored)
        )
        try:
            write_replacing(target, text)
        except OSError as exc:
            self.window.show_message(
                f"Could not write {target}: {exc.strerror or exc}", "error", cause="export"
            )
            return None
        remember_export_folder(self.window.settings, target)
        self.window.dismiss_message(cause="export")  # an export that failed before is done
        self.window.notify(f"Exported the chat to {target}", 8000)
        return target

    def _ask(self, title: str, text: str, discard: str) -> Answer:
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=self.window)
        box.setObjectName("unsavedBox")
        box.setTextFormat(Qt.TextFormat.PlainText)  # it quotes a chat's title
        export_button = box.addButton("Export…", QMessageBox.ButtonRole.AcceptRole)
        discard_button = box.addButton(discard, QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(export_button)
        box.exec()
        clicked = box.clickedButton()
        box.deleteLater()
        if clicked is export_button:
            return "export"
        if clicked is discard_button:
            return "discard"
        return "cancel"


def _first_sentence(text: str) -> str:
    first = text.split(". ")[0].rstrip(".")
    return first if len(first) <= 160 else first[:159] + "…"


def _safe_name(title: str) -> str:
    name = "".join(c if c.isalnum() or c in "-_ " else "" for c in title).strip()
    return name.replace(" ", "-")[:60] or "conversation"
