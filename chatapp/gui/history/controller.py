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
from chatapp.store import HistoryStore

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
