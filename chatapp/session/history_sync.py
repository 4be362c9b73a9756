"""The history sync without Qt: keeps the SQLite store (chatapp.store) in step with the chat
`Chat`'s Conversation (chat.py), connected to its events. What happens is told as
`HistoryEvents` (events.py); the window's HistoryController (gui/history/controller.py) makes
them arrive on its thread, and
gui/history/ui.py puts a list and menus on it.

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

When a save fails (a lock held by another process, a full disk, a read-only history) the
messages stay in memory: `failure` says why, `unsaved_indices()` which messages the store
lacks (marked), and `retry()` (a window's timer, a short lock timeout) syncs until it works,
then the user is told. Showing another chat or closing asks first (gui/history/unsaved.py).
A write never waits for another process's lock on this thread: a worker does (`submit_wait`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from chatapp.session.backend_session import State
from chatapp.session.chat import Chat
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.events import Event, EventGroup
from chatapp.session.history_failures import SaveFailures
from chatapp.session.history_records import (
    Signature,
    conversation_from_store,
    draft_of,
    imported_title,
    memory_signature,
    stored_signature,
)
from chatapp.session.running import Submit
from chatapp.store import (
    ConversationDraft,
    ConversationInfo,
    ConversationNotFoundError,
    HistoryStore,
    MessageDraft,
    SearchHit,
    StoredConversation,
    StoredMessage,
    StoreError,
)
from chatapp.store.read_only import unwritable_reason

log = logging.getLogger(__name__)
T = TypeVar("T")


class HistoryEvents(EventGroup):
    def __init__(self) -> None:
        # Conversations were added, changed or removed: re-read.
        self.list_changed: Event[[]] = Event("list_changed")
        # The stored id of the conversation shown (None: not stored).
        self.current_changed: Event[[int | None]] = Event("current_changed")
        self.message: Event[[str, str]] = Event("message")  # text, "error"|"warning"|"info"
        # `failure` or `unsaved_indices()` may have changed.
        self.unsaved_changed: Event[[]] = Event("unsaved_changed")


class HistorySync:
    def __init__(
        self,
        chat: Chat,
        store: HistoryStore | None,
        system_prompt: Callable[[], str] = lambda: "",
        submit_wait: Submit | None = None,
    ) -> None:
        self.chat = chat
        self.store = store
        self.system_prompt = system_prompt
        self.events = HistoryEvents()
        self._known: set[int] = set()  # stored message ids this window has seen
        self._saved: dict[int, Signature] = {}  # what the store holds for each message we know
        self._opening = False
        self._saves = SaveFailures(self.events, submit_wait, self._saved_again)
        self._quick_writes(store)
        chat.events.answer_started.connect(self.on_answer_started)
        chat.events.conversation_changed.connect(self.on_conversation_changed)

    @property
    def failure(self) -> str | None:
        """Why the last save failed; None while all is saved."""
        return self._saves.failure

    def _quick_writes(self, store: HistoryStore | None) -> None:
        """With a worker to wait for locks, this thread's writes do not (history_failures)."""
        if store is not None and self._saves.submit_wait is not None and not store.read_only:
            try:
                store.set_busy_timeout(self._saves.busy_timeout_s)
            except StoreError:
                log.warning("could not shorten the history's lock timeout", exc_info=True)

    def _saved_again(self) -> None:
        if self.chat.state is not State.GENERATING:  # the answer's end saves everything
            self.sync()

    @property
    def enabled(self) -> bool:
        return self.store is not None

    @property
    def read_only(self) -> bool:
        return self.store is not None and self.store.read_only

    def unsaved_indices(self) -> list[int]:
        """Conversation indices of the messages the history does not hold as shown: none
        while saving works (each change is saved at once); after a failure, the new ones and
        the changed ones. With no history at all, every message."""
        messages = self.chat.conversation.messages
        if self.store is None:
            return list(range(len(messages)))
        if self.failure is None:
            return []
        return [
            i
            for i, m in enumerate(messages)
            if m.id is None or self._saved.get(m.id) != memory_signature(m)
        ]

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
            self.events.list_changed.emit()  # it may have gone (another instance deleted it)
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
            self._saved = {m.id: stored_signature(m) for m in stored.messages}
            self.events.current_changed.emit(stored.id)
            self.events.unsaved_changed.emit()
        return shown

    def new_chat(self) -> bool:
        if not self.chat.new_chat():
            return False
        self._known = set()
        self.events.current_changed.emit(None)
        return True

    def retry(self) -> bool:
        """Try the failed save again (a timer calls this); True once everything is saved."""
        if self.failure is None:
            return True
        if self.chat.state is State.GENERATING:
            return False  # the answer's end saves everything
        self._reopen_if_writable()
        self.sync()
        return self.failure is None

    def _reopen_if_writable(self) -> None:
        """A history opened read-only whose file can be written now: open it for writing."""
        store = self.store
        if store is None or not store.read_only or unwritable_reason(store.path) is not None:
            return
        try:
            reopened = HistoryStore(store.path)
        except StoreError:
            return
        if reopened.read_only:
            reopened.close()
            return
        store.close()
        self.store = reopened
        self._quick_writes(reopened)
        self.events.list_changed.emit()

    def rename(self, conversation_id: int, title: str) -> bool:
        title = " ".join(title.split())
        if self.store is None or not title:
            return False
        store = self.store
        done = self._succeeded(lambda: store.rename_conversation(conversation_id, title))
        self.events.list_changed.emit()
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
        self.events.list_changed.emit()
        return bool(done)

    def import_file(self, path: str, show: bool = True) -> int | None:
        """Add a JSON export as a new conversation (and open it); returns its id. A failure
        is one message naming the file, whatever went wrong."""
        if self.store is None:
            return None
        store = self.store
        name = Path(path).name
        try:
            stored = store.import_file(path)
        except StoreError as exc:
            self.events.message.emit(f"Could not import {name}: {exc}", "error")
            return None
        except (ValueError, MemoryError, RecursionError) as exc:  # not expected; still said
            log.warning("import of %s failed", path, exc_info=True)
            self.events.message.emit(f"Could not import {name}: {type(exc).__name__}.", "error")
            return None
        title = imported_title(stored.title)  # told apart from the chat it came from
        if title != stored.title and self._succeeded(
            lambda: store.rename_conversation(stored.id, title)
        ):
            stored = replace(stored, info=replace(stored.info, title=title))
        self.events.list_changed.emit()
        if show and self.chat.state is not State.GENERATING:
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
        self.events.list_changed.emit()
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
            self.events.current_changed.emit(None)
            self.events.message.emit(
                "This conversation was deleted in another chatapp window. It stays here, and "
                "is saved again as a new conversation if you continue it.",
                "info",
            )
            return True
        except StoreError as exc:
            self.events.message.emit(str(exc), "error")
            return True
        ours = [(m.id, m.role, memory_signature(m)) for m in conv.messages]
        theirs = [(m.id, m.role, stored_signature(m)) for m in stored.messages]
        if ours != theirs and not self.unsaved_indices():
            self._show(stored)  # the other window continued this conversation: show it
        return True

    # ---- keeping the store in step (the chat's answer_started and conversation_changed) -------
    def on_answer_started(self, _options: GenerationOptions | None = None) -> None:
        self.sync(starting=True)

    def on_conversation_changed(self, _conversation: Conversation | None = None) -> None:
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
            self.events.unsaved_changed.emit()
            return
        try:
            self._sync(store, conv, starting)
        except StoreError as exc:
            self._failed(store, exc)
        else:
            self._succeeded_saving(store)

    def _failed(self, store: HistoryStore, exc: StoreError) -> None:
        self._saves.failed(store, exc)

    def _succeeded_saving(self, store: HistoryStore) -> None:
        self._saves.succeeded(store)

    def _sync(self, store: HistoryStore, conv: Conversation, starting: bool) -> None:
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
                self.events.current_changed.emit(None)
            return
        stored = self._sync_versions(store, conv, stored)
        self._sync_messages(store, conv, stored, starting)

    def _sync_versions(
        self, store: HistoryStore, conv: Conversation, stored: StoredConversation
    ) -> StoredConversation:
        """Answers that show another of their versions than the store does: select it there
        (the message keeps its id, nothing else changes)."""
        changed = False
        for mem, row in zip(conv.messages, stored.messages, strict=False):
            if mem.id != row.id:
                break
            ours, theirs = memory_signature(mem), stored_signature(row)
            if ours != theirs and ours[2] == theirs[2]:
                store.select_alternative(row.id, mem.version)
                self._saved[row.id] = ours
                changed = True
        return store.load_conversation(stored.id) if changed else stored

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
            self._saved[stored[same].id] = memory_signature(mem[same])
            self._assign(mem[same + 1 :], added)
        elif same > 0:
            added = store.replace_after(stored[same - 1].id, self._drafts(mem[same:]))
            self._assign(mem[same:], added)
        elif not mem:
            # Its only messages were taken back (the first question failed): it is gone again.
            store.delete_conversation(stored_conversation.id)
            conv.id = None
            self._known = set()
            self.events.current_changed.emit(None)
        elif not stored:
            self._assign(mem, store.append_drafts(stored_conversation.id, self._drafts(mem)))
        else:
            self._save_as_new(store, conv)
            return
        self.events.list_changed.emit()

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
        self.events.list_changed.emit()
        self.events.current_changed.emit(stored.id)
        if note:
            self.events.message.emit(note, "info")

    def _drafts(self, messages: Sequence[ChatMessage]) -> list[MessageDraft]:
        model = self._model_name()
        return [draft_of(m, model) for m in messages]

    def _assign(self, messages: Sequence[ChatMessage], stored: Sequence[StoredMessage]) -> None:
        for message, row in zip(messages, stored, strict=True):
            message.id = row.id
            self._known.add(row.id)
            self._saved[row.id] = stored_signature(row)

    def _model_name(self) -> str | None:
        return self.chat.backend.name if self.chat.backend is not None else None

    def _succeeded(self, call: Callable[[], object]) -> bool:
        """Run `call`; False (and a message) when the store failed."""
        try:
            call()
        except StoreError as exc:
            self.events.message.emit(str(exc), "error")
            return False
        return True

    def _guarded(self, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except StoreError as exc:
            self.events.message.emit(str(exc), "error")
            return None
