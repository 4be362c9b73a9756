"""The history glue: keeps the SQLite store (chatapp.store) in step with the chat controller's
Conversation. No widgets here; `history_ui` puts a list and menus on it.

When things are written (every write is committed before the call returns):
- a conversation is created lazily, with its first user message, in one transaction; an empty
  "New chat" is never stored, so the list does not fill up with empty chats;
- the user message when it is sent (the answer request starts);
- the answer when it is finished (or stopped, or failed after writing something), with its
  figures. A kill mid-answer therefore loses that unfinished answer and nothing else;
- regenerate: the old answer stays stored until the new one exists, then both change in one
  transaction (`replace_after`), so a kill mid-regenerate keeps the old answer;
- edit: the new text and the removal of every later message are committed when the edited
  message is sent (the user asked for that); the new answer is added when finished.

All of this is one `sync()`: make the stored messages equal the messages in memory, where each
ChatMessage carries the id of its stored row. Stored messages are only ever deleted when this
window knew them (loaded or wrote them): if another chatapp instance added messages to the
same conversation meanwhile, ours continue in a copy instead of deleting theirs, and if it
deleted the conversation, ours are saved again as a new one. Nothing is lost either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.controller import ChatController, State
from chatapp.gui.common.qtcompat import emit
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.store import (
    ConversationDraft,
    ConversationInfo,
    ConversationNotFoundError,
    HistoryStore,
    MessageDraft,
    SchemaTooNewError,
    SearchHit,
    StoredConversation,
    StoreError,
    open_default_store,
)

T = TypeVar("T")


@dataclass(frozen=True)
class OpenedHistory:
    store: HistoryStore | None
    notice: str | None  # for the window: a recovered file, or why history is off
    level: str = "warning"  # stays up until dismissed (a loaded model clears errors)


def open_history(opener: Callable[[], HistoryStore] = open_default_store) -> OpenedHistory:
    """Open the default history; never raises (the app runs without history if it must)."""
    try:
        store = opener()
    except SchemaTooNewError as exc:
        return OpenedHistory(None, f"{exc} Chats are not saved in this session.")
    except StoreError as exc:
        return OpenedHistory(None, f"{exc} Chats are not saved in this session.")
    notice = store.recovery.message() if store.recovery is not None else None
    if store.read_only:  # shown read-only rather than hidden (issue 12)
        notice = store.read_only_message()
    return OpenedHistory(store, notice, "warning")


# ---- conversations between the store and the GUI --------------------------------------------
def figures_for_store(figures: AnswerFigures | None, model: str | None) -> AnswerFigures | None:
    """The answer's figures with the model's name, as the history keeps them."""
    if figures is None:
        return None
    return replace(figures, model=figures.model or model)


def conversation_from_store(stored: StoredConversation) -> Conversation:
    return Conversation(
        [ChatMessage(m.role, m.content, m.figures, m.id) for m in stored.messages],
        stored.id,
    )


class HistoryController(QObject):
    sig_list_changed = Signal()  # conversations were added, changed or removed: re-read
    sig_current_changed = Signal(object)  # int | None: the stored id of the conversation shown
    sig_message = Signal(str, str)  # text, level ("error" | "warning" | "info")

    def __init__(
        self,
        chat: ChatController,
        store: HistoryStore | None,
        system_prompt: Callable[[], str] = lambda: "",
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.chat = chat
        self.store = store
        self.system_prompt = system_prompt
        self._known: set[int] = set()  # stored message ids this window has seen
        self._opening = False
        chat.sig_answer_started.connect(self._on_answer_started)
        chat.sig_conversation_changed.connect(self._on_conversation_changed)

    @property
    def enabled(self) -> bool:
        return self.store is not None

    @property
    def current_id(self) -> int | None:
        return self.chat.conversation.id

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    # ---- reading ------------------------------------------------------------------------------
    def conversations(self) -> list[ConversationInfo]:
        if self.store is None:
            return []
        return self._guarded(self.store.list_conversations) or []

    def search(self, query: str) -> list[SearchHit]:
        if self.store is None:
            return []
        store = self.store
        return self._guarded(lambda: store.search(query)) or []

    def export_text(self, conversation_id: int, kind: str) -> str | None:
        """The conversation as "markdown" or "json" text; None (and a message) on failure."""
        store = self.store
        if store is None:
            return None
        export = store.export_markdown if kind == "markdown" else store.export_json
        return self._guarded(lambda: export(conversation_id))

    # ---- actions --------------------------------------------------------------------------------
    def open(self, conversation_id: int) -> bool:
        """Show a stored conversation; continuing it sends its messages as the history."""
        if self.store is None or self.chat.state is State.GENERATING:
            return False
        if conversation_id == self.current_id:
            return True
        store = self.store
        stored = self._guarded(lambda: store.load_conversation(conversation_id))
        if stored is None:
            emit(self.sig_list_changed)  # it may have gone (another instance deleted it)
            return False
        return self._show(stored)

    def _show(self, stored: StoredConversation) -> bool:
        self._opening = True
        try:
            shown = self.chat.set_conversation(conversation_from_store(stored))
        finally:
            self._opening = False
        if shown:
            self._known = {m.id for m in stored.messages}
            emit(self.sig_current_changed, stored.id)
        return shown

    def new_chat(self) -> bool:
        if not self.chat.new_chat():
            return False
        self._known = set()
        emit(self.sig_current_changed, None)
        return True

    def rename(self, conversation_id: int, title: str) -> bool:
        title = " ".join(title.split())
        if self.store is None or not title:
            return False
        store = self.store
        done = self._succeeded(lambda: store.rename_conversation(conversation_id, title))
        emit(self.sig_list_changed)
        return done

    def delete(self, conversation_id: int) -> bool:
        """Delete it (no questions: the caller confirms); the chat empties if it was shown."""
        if self.store is None:
            return False
        if conversation_id == self.current_id:
            if self.chat.state is State.GENERATING:
                return False
            self.new_chat()
        store = self.store
        done = self._guarded(lambda: store.delete_conversation(conversation_id))
        emit(self.sig_list_changed)
        return bool(done)

    def import_file(self, path: str) -> int | None:
        """Add a JSON export as a new conversation and open it; returns its id."""
        if self.store is None:
            return None
        store = self.store
        stored = self._guarded(lambda: store.import_file(path))
        if stored is None:
            return None
        emit(self.sig_list_changed)
        if self.chat.state is not State.GENERATING:
            self._show(stored)
        return stored.id

    def poll_external_changes(self) -> bool:
        """Re-read after another instance wrote; True when it did. Cheap: call it often."""
        store = self.store
        if store is None:
            return False
        try:
            if not store.has_external_changes():
                return False
        except StoreError:
            return False
        emit(self.sig_list_changed)
        conv = self.chat.conversation
        if conv.id is None or self.chat.state is State.GENERATING:
            return True
        try:
            stored = store.load_conversation(conv.id)
        except ConversationNotFoundError:
            conv.id = None
            for message in conv.messages:
                message.id = None
            self._known = set()
            emit(self.sig_current_changed, None)
            emit(
                self.sig_message,
                "This conversation was deleted in another chatapp window. It stays here, and "
                "is saved again as a new conversation if you continue it.",
                "info",
            )
            return True
        except StoreError as exc:
            emit(self.sig_message, str(exc), "error")
            return True
        ours = [(m.id, m.role, m.content) for m in conv.messages]
        theirs = [(m.id, m.role, m.content) for m in stored.messages]
        if ours != theirs and all(m.id is not None for m in conv.messages):
            self._show(stored)  # the other window continued this conversation: show it
        return True

    # ---- keeping the store in step ------------------------------------------------------------
    @Slot(object)
    def _on_answer_started(self, _options: object) -> None:
        self.sync(starting=True)

    @Slot(object)
    def _on_conversation_changed(self, _conversation: Conversation) -> None:
        if not self._opening and self.chat.state is not State.GENERATING:
            self.sync()

    def sync(self, starting: bool = False) -> None:
        """Make the stored conversation equal the one in memory (see the module docstring).

        `starting`: an answer is about to be written. If memory ends with an unchanged stored
        question and the store has more after it (regenerate), the store keeps it for now.
        """
        store = self.store
        conv = self.chat.conversation
        if store is None:
            return
        try:
            if conv.id is None:
                if conv.messages:
                    self._save_as_new(store, conv)
                return
            try:
                stored = store.load_conversation(conv.id)
            except ConversationNotFoundError:
                if conv.messages:
                    self._save_as_new(
                        store,
                        conv,
                        "This conversation was deleted in another chatapp window; it was "
                        "saved again as a new conversation.",
                    )
                else:
                    conv.id = None
                    emit(self.sig_current_changed, None)
                return
            self._sync_messages(store, conv, stored, starting)
        except StoreError as exc:
            emit(self.sig_message, f"{exc} (not saved)", "error")

    def _sync_messages(
        self,
        store: HistoryStore,
        conv: Conversation,
        stored_conversation: StoredConversation,
        starting: bool,
    ) -> None:
        stored = stored_conversation.messages
        mem = conv.messages
        same = 0
        while (
            same < min(len(mem), len(stored))
            and mem[same].id == stored[same].id
            and mem[same].content == stored[same].content
        ):
            same += 1
        if same == len(mem) == len(stored):
            return  # in step
        if starting and same == len(mem) and mem and mem[-1].role == "user":
            return  # regenerate: the old answer stays until the new one exists
        edited = same < min(len(mem), len(stored)) and mem[same].id == stored[same].id
        doomed = stored[same + 1 :] if edited else stored[same:]
        if any(m.id not in self._known for m in doomed):
            # Another instance wrote to this conversation meanwhile: keep theirs, and ours.
            self._save_as_new(
                store,
                conv,
                "This conversation was changed in another chatapp window at the same time; "
                "yours continues in a copy.",
                title=f"{stored_conversation.title} (copy)",
            )
            return
        if edited:
            added = store.replace_after(
                stored[same].id, self._drafts(mem[same + 1 :]), new_content=mem[same].content
            )
            self._assign(mem[same + 1 :], added)
        elif same > 0:
            added = store.replace_after(stored[same - 1].id, self._drafts(mem[same:]))
            self._assign(mem[same:], added)
        elif not mem:
            # Its only messages were taken back (the first question failed): it is gone again.
            store.delete_conversation(stored_conversation.id)
            conv.id = None
            self._known = set()
            emit(self.sig_current_changed, None)
        elif not stored:
            added = [
                store.append_message(stored_conversation.id, d.role, d.content, d.figures)
                for d in self._drafts(mem)
            ]
            self._assign(mem, added)
        else:
            self._save_as_new(store, conv)
            return
        emit(self.sig_list_changed)

    def _save_as_new(
        self, store: HistoryStore, conv: Conversation, note: str = "", title: str | None = None
    ) -> None:
        now = datetime.now(UTC)
        stored = store.add_conversation(
            ConversationDraft(
                title=title or conv.title,
                created=now,
                updated=now,
                model=self._model_name(),
                system_prompt=self.system_prompt(),
                messages=tuple(self._drafts(conv.messages)),
            )
        )
        conv.id = stored.id
        self._known = set()
        self._assign(conv.messages, stored.messages)
        emit(self.sig_list_changed)
        emit(self.sig_current_changed, stored.id)
        if note:
            emit(self.sig_message, note, "info")

    def _drafts(self, messages: Sequence[ChatMessage]) -> list[MessageDraft]:
        model = self._model_name()
        return [
            MessageDraft(m.role, m.content, figures_for_store(m.figures, model))  # type: ignore[arg-type]
            for m in messages
        ]

    def _assign(self, messages: Sequence[ChatMessage], stored: Sequence) -> None:
        for message, row in zip(messages, stored, strict=True):
            message.id = row.id
            self._known.add(row.id)

    def _model_name(self) -> str | None:
        return self.chat.backend.name if self.chat.backend is not None else None

    def _succeeded(self, call: Callable[[], object]) -> bool:
        """Run `call`; False (and a message) when the store failed."""
        try:
            call()
        except StoreError as exc:
            emit(self.sig_message, str(exc), "error")
            return False
        return True

    def _guarded(self, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except StoreError as exc:
            emit(self.sig_message, str(exc), "error")
            return None
