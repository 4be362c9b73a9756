"""The history's Qt face: `HistorySync` (session/history_sync.py, no Qt) keeps the SQLite store
in step with the chat's Conversation; this adapter feeds it the chat controller's signals and
turns what it tells into signals of its own. No widgets here; `history/ui.py` puts a list and
menus on it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.gui.chat.controller import ChatController
from chatapp.gui.common.qtcompat import emit
from chatapp.session.chat_settings import GenerationOptions, remember, settings_of
from chatapp.session.conversation import Conversation
from chatapp.session.history_records import OpenedHistory, open_history
from chatapp.session.history_sync import HistoryObserver, HistorySync
from chatapp.store import ConversationInfo, HistoryStore, SearchHit

__all__ = ["HistoryController", "OpenedHistory", "open_history"]


class HistoryController(QObject):
    sig_list_changed = Signal()  # conversations were added, changed or removed: re-read
    sig_current_changed = Signal(object)  # int | None: the stored id of the conversation shown
    sig_message = Signal(str, str)  # text, level ("error" | "warning" | "info")
    sig_unsaved_changed = Signal()  # `failure` or `unsaved_indices()` may have changed

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
            chat.session, store, system_prompt, _Signals(self), chat.session.submit_tool
        )
        chat.sig_answer_started.connect(self._on_answer_started)
        chat.sig_conversation_changed.connect(self._on_conversation_changed)

    @Slot(object)
    def _on_answer_started(self, options: GenerationOptions) -> None:
        self.sync_core.on_answer_started()
        # The chat remembers how it is answered: restored when it is opened again.
        backend = self.chat.backend
        conversation = self.chat.conversation
        conversation.settings = settings_of(options, backend.name if backend else None)
        remember(self.sync_core.store, conversation.id, conversation.settings)

    @Slot(object)
    def _on_conversation_changed(self, _conversation: Conversation) -> None:
        self.sync_core.on_conversation_changed()

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


class _Signals(HistoryObserver):
    def __init__(self, controller: HistoryController) -> None:
        self.c = controller

    def list_changed(self) -> None:
        emit(self.c.sig_list_changed)

    def current_changed(self, conversation_id: int | None) -> None:
        emit(self.c.sig_current_changed, conversation_id)

    def message(self, text: str, level: str) -> None:
        emit(self.c.sig_message, text, level)

    def unsaved_changed(self) -> None:
        emit(self.c.sig_unsaved_changed)
