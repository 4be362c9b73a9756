"""The history sync without Qt or threads: a Chat on an InlineRunner, a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.figures import AnswerFigures
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.session.chat import Chat, GenerationOptions, chat_on
from chatapp.session.conversation import Conversation
from chatapp.session.history_sync import HistorySync
from chatapp.session.running import InlineRunner
from chatapp.store import HistoryStore, ReadOnlyStoreError

GREEDY = GenerationOptions(
    SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=6), Mode.IOBINDING
)


class Told:
    """What a HistorySync tells, kept."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []
        self.current: list[int | None] = []
        self.lists = 0

    def attach(self, sync: HistorySync) -> HistorySync:
        sync.events.list_changed.connect(self.list_changed)
        sync.events.current_changed.connect(self.current.append)
        sync.events.message.connect(lambda text, level: self.messages.append((text, level)))
        return sync

    def list_changed(self) -> None:
        self.lists += 1


@pytest.fixture
def runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def chat(runner: InlineRunner) -> Iterator[Chat]:
    session = chat_on(runner)
    yield session
    session.backend_session.host.engine = None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    history = HistoryStore(tmp_path / "history.sqlite3")
    yield history
    history.close()


def test_an_answer_is_saved_question_first_then_with_its_figures(
    chat: Chat, runner: InlineRunner, store: HistoryStore, tiny_model_dir: Path
) -> None:
    told = Told()
    sync = told.attach(HistorySync(chat, store, lambda: "Be brief."))
    chat.backend_session.open_model(tiny_model_dir, threads=1)
    runner.drain()
    assert chat.send("hello", GREEDY)
    # The question is stored when the answer is asked for, before any token.
    (info,) = store.list_conversations()
    assert [m.content for m in store.load_conversation(info.id).messages] == ["hello"]
    assert told.current == [info.id]
    runner.drain()
    stored = store.load_conversation(info.id)
    assert [m.role for m in stored.messages] == ["user", "assistant"]
    assert stored.messages[1].content == chat.conversation.messages[1].content
    assert stored.messages[1].figures is not None and chat.backend_session.model is not None
    assert stored.messages[1].figures.model == chat.backend_session.model.name == stored.info.model
    assert stored.info.system_prompt == "Be brief." and sync.unsaved_indices() == []

    # Another window's view of it: opened from the store, shown, continued in place.
    other = chat_on(InlineRunner())
    other_sync = HistorySync(other, store)
    assert other_sync.open(info.id)
    assert [m.id for m in other.conversation.messages] == [m.id for m in stored.messages]


def test_messages_of_an_empty_stored_conversation_are_appended_to_it(
    chat: Chat, store: HistoryStore
) -> None:
    sync = HistorySync(chat, store)
    info = store.create_conversation("Empty so far")
    conversation = Conversation(id=info.id)
    conversation.add_user("Hello?")
    figures = AnswerFigures("naive", "cpu", 10.0, 0.1, 2.0, 3.0, 5, 0, 2, 512, "eos")
    conversation.add_answer("Hi.", figures)
    chat.conversation = conversation
    sync.sync()
    stored = store.load_conversation(info.id)
    assert [m.content for m in stored.messages] == ["Hello?", "Hi."]
    assert [m.id for m in conversation.messages] == [m.id for m in stored.messages]
    conversation.messages.clear()  # both taken back (a first question that failed)
    sync.sync()
    assert store.list_conversations() == [] and conversation.id is None


def test_a_failed_save_keeps_the_messages_marked_and_a_retry_saves_them(
    chat: Chat, store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    told = Told()
    sync = told.attach(HistorySync(chat, store))
    chat.conversation.add_user("Keep me")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise ReadOnlyStoreError("The chat history is read-only.")

    with monkeypatch.context() as patch:
        patch.setattr(store, "add_conversation", refuse)
        sync.sync()
        assert sync.failure is not None and sync.unsaved_indices() == [0]
        assert told.messages and told.messages[-1][1] == "warning"
        assert not sync.retry()  # still refused
    assert sync.retry() and sync.unsaved_indices() == []
    assert told.messages[-1] == ("The chat history works again: every message is saved.", "info")
    (info,) = store.list_conversations()
    assert [m.content for m in store.load_conversation(info.id).messages] == ["Keep me"]


def test_without_a_store_every_message_is_unsaved(chat: Chat) -> None:
    sync = HistorySync(chat, None)
    chat.conversation.add_user("a")
    assert not sync.enabled and sync.unsaved_indices() == [0] and sync.conversations() == []
