"""The session's events reach the window on the GUI thread, whichever thread emits them
(gui/common/gui_thread.py), in the order they were emitted."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from chatapp.gui.chat.controller import ChatController
from chatapp.gui.chat.view import ChatView
from chatapp.session.backend_session import State
from chatapp.session.chat_jobs import TokenBatch


@pytest.fixture
def controller(qtbot) -> Iterator[ChatController]:
    chat = ChatController()
    yield chat
    assert chat.shutdown()


def test_a_token_event_emitted_on_a_worker_thread_arrives_on_the_gui_thread(
    qtbot, controller: ChatController
) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.begin_answer()
    seen: list[tuple[str, threading.Thread]] = []
    events = controller.chat.events
    events.answer_delta.connect(lambda batch: seen.append((batch.text, threading.current_thread())))
    events.answer_delta.connect(lambda batch: view.append_answer(batch.text))

    def worker() -> None:
        for text in ("Hel", "lo", "!"):
            events.answer_delta.emit(TokenBatch(1, 0, text, (), ()))

    thread = threading.Thread(target=worker, name="emitter")
    thread.start()
    thread.join()
    assert seen == []  # queued for the GUI thread, never run on the emitter's
    qtbot.waitUntil(lambda: len(seen) == 3, timeout=5000)
    assert [text for text, _ in seen] == ["Hel", "lo", "!"]
    assert {t for _, t in seen} == {threading.main_thread()}
    view.flush()
    assert view.answer_text == "Hello!"
    assert "Hello!" in view.transcript.toPlainText()


def test_an_event_emitted_on_the_gui_thread_is_delivered_at_once(
    controller: ChatController,
) -> None:
    states: list[State] = []
    controller.backend_session.events.state_changed.connect(states.append)
    controller.backend_session.set_state(State.LOADING)
    assert states == [State.LOADING]  # no queue: listeners see it before emit returns
