"""The history's Qt owner: `HistorySync` (session/history_sync.py, no Qt) keeps the SQLite
store in step with the chat's Conversation (it connects to the chat's events itself); this
object makes its `events` arrive on the GUI thread. No widgets here; `history/ui.py` puts a
list and menus on it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from chatapp.gui.chat.controller import ChatController
from chatapp.gui.common.gui_thread import gui_thread_delivery
from chatapp.session.chat_settings import GenerationOptions, remember, settings_of
from chatapp.session.history_records import OpenedHistory, open_history
from chatapp.session.history_sync import HistoryEvents, HistorySync
from chatapp.store import ConversationInfo, HistoryStore, SearchHit

__all__ = ["HistoryController", "OpenedHistory", "open_history"]


class HistoryController(QObject):
    def __init__(
        self,
        chat: ChatController,
        store: HistoryStore | None,
        system_prompt: Callable[[], str] = lambda: "",
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.chat = chat
        # The tools runner waits for a history another process keeps locked: this thread
        # never does (session/history_failures.py).
        self.sync_core = HistorySync(
            chat.chat, store, system_prompt, chat.backend_session.submit_tool
        )
        self.sync_core.events.deliver_via(gui_thread_delivery(self))
        chat.chat.events.answer_started.connect(self._remember_settings)  # after the sync's

    def _remember_settings(self, options: GenerationOptions) -> None:
        """The chat remembers how it is answered: restored when it is opened again."""
        backend = self.chat.backend_session.backend
        conversation = self.chat.chat.conversation
        conversation.settings = settings_of(options, backend.name if backend else None)
        remember(self.sync_core.store, conversation.id, conversation.settings)

    @property
    def events(self) -> HistoryEvents:
        """list_changed, current_changed, message, unsaved_changed (session/history_sync.py)."""
        return self.sync_core.events

    # ---- the core's state and requests (session/history_sync.py says what each does) -------
    @property
    def store(self) -> HistoryStore | None:
        return self.sync_core.store

    @property
    def failure(self) -> str | None:
        return self.sync_core.failure

    @property
    def enabled(self) -> bool:
        return self.sync_core.enabled

    @property
    def read_only(self) -> bool:
        return self.sync_core.read_only

    @property
    def current_id(self) -> int | None:
        return self.sync_core.current_id

    def unsaved_indices(self) -> list[int]:
        return self.sync_core.unsaved_indices()

    def close(self) -> None:
        self.sync_core.close()

    def conversations(self) -> list[ConversationInfo]:
        return self.sync_core.conversations()

    def search(self, query: str) -> list[SearchHit]:
        return self.sync_core.search(query)

    def export_text(self, conversation_id: int, kind: str) -> str | None:
        return self.sync_core.export_text(conversation_id, kind)

    def open(self, conversation_id: int) -> bool:
        return self.sync_core.open(conversation_id)

    def new_chat(self) -> bool:
        return self.sync_core.new_chat()

    def retry(self) -> bool:
        return self.sync_core.retry()

    def rename(self, conversation_id: int, title: str) -> bool:
        return self.sync_core.rename(conversation_id, title)

    def delete(self, conversation_id: int) -> bool:
        return self.sync_core.delete(conversation_id)

    def import_file(self, path: str, show: bool = True) -> int | None:
        return self.sync_core.import_file(path, show)

    def poll_external_changes(self) -> bool:
        return self.sync_core.poll_external_changes()

    def sync(self, starting: bool = False) -> None:
        self.sync_core.sync(starting)
