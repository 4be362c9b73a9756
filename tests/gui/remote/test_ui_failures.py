"""Each way a remote answer can fail ends it with one line in the banner, keeps what streamed
(marked failed, as local failures are) and the conversation, and the next answer can retry:
a server killed mid-answer (SIGKILL, in a process of its own), a refused connection, a
malformed stream and silence (a scripted fake server), a conversation too long. Stop works.
Only 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from chatapp.gui.chat.controller import State
from chatapp.gui.main_window import MainWindow
from chatapp.remote.client import Timeouts
from chatapp.session import formatting as fmt
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling
from tests.gui.remote.conftest import connect, remote_ui
from tests.remote.conftest import ServerProcess
from tests.remote.fake_server import (
    END,
    Action,
    FakeServer,
    Request,
    chunk,
    delta,
    event,
    stream_head,
    with_models,
)
from tests.serving import serving, slow_down

GOOD_ANSWER = [
    stream_head(),
    event(delta("Hello", logprob=-0.5)),
    event(delta(" again", "stop", logprob=-0.25)),
    event("[DONE]"),
    END,
]


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.close()


def scripted(fakes: list[FakeServer], first: list[Action]) -> FakeServer:
    """A fake whose first chat request gets `first`, every later one a good answer."""
    calls: list[Request] = []

    def answer(request: Request) -> list[Action]:
        calls.append(request)
        return first if len(calls) == 1 else GOOD_ANSWER

    server = FakeServer(with_models(answer))
    fakes.append(server)
    return server


def failed_answer(qtbot, window: MainWindow, text: str = "hello") -> str:
    """Send `text`, wait for the failure; returns the banner's line."""
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
    ) as sig:
        window.chat.chat_view.set_prompt_text(text)
        window.chat.chat_view.send_button.click()
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY,
        timeout=ANSWER_TIMEOUT_MS,
    )
    message = window.banner.text()
    assert message == sig.args[0] and window.banner.level == "error"
    assert "\n" not in message and "Traceback" not in message
    return message


def assert_retry_works(qtbot, window: MainWindow) -> None:
    send_and_wait(qtbot, window, "once more")
    last = window.chat.conversation.messages[-1]
    assert last.role == "assistant" and last.content == "Hello again"
    assert last.figures is not None and last.figures.finish_reason == "eos"
    assert window.banner.isHidden()  # a new answer clears the old failure


def test_a_malformed_stream_keeps_what_arrived_and_the_next_answer_retries(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    fake = scripted(
        fakes, [stream_head(), event(delta("Par", logprob=-1.0)), chunk(b"data: {oops\n\n"), END]
    )
    connect(qtbot, window, fake.url)
    message = failed_answer(qtbot, window)
    assert "sent a malformed stream" in message and "The 1 tokens received are kept." in message
    answer = window.chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.content == "Par"
    assert answer.figures is not None and answer.figures.finish_reason == "error"
    assert "failed" in fmt.figures_line(answer.figures)
    assert [m.role for m in window.chat.conversation.messages] == ["user", "assistant"]
    assert_retry_works(qtbot, window)


def test_a_stream_cut_mid_answer_keeps_the_history_and_the_window_goes_on(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    fake = scripted(fakes, [stream_head(), event(delta("Half", logprob=-1.0)), None])
    connect(qtbot, window, fake.url)
    set_sampling(window, greedy(8))
    message = failed_answer(qtbot, window, "first")
    assert "closed the connection while answering" in message
    assert [(m.role, m.content) for m in window.chat.conversation.messages] == [
        ("user", "first"),
        ("assistant", "Half"),
    ]
    assert "Half" in window.chat.chat_view.transcript.toPlainText()
    assert (
        window.chat.controller.backend_session.remote is not None
    )  # still connected: the next answer retries
    assert_retry_works(qtbot, window)
    assert [m.content for m in window.chat.conversation.messages][:2] == ["first", "Half"]


def test_silence_times_out_and_gives_the_question_back(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    fake = scripted(fakes, [stream_head(), 20.0])  # headers, then nothing (closing ends it)
    remote_ui(window).timeouts = Timeouts(read_s=0.5)
    connect(qtbot, window, fake.url)
    message = failed_answer(qtbot, window, "are you there?")
    assert "sent nothing for 0.5 s while answering" in message
    # Nothing was answered: the question goes back to the prompt box, nothing is lost.
    assert window.chat.conversation.messages == []
    assert window.chat.chat_view.prompt_text() == "are you there?"
    window.chat.chat_view.set_prompt_text("")
    assert_retry_works(qtbot, window)


def test_stop_works_while_a_server_is_silent(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    fake = scripted(fakes, [30.0])  # accepts the request, never answers (the read waits 120 s)
    connect(qtbot, window, fake.url)
    window.chat.chat_view.set_prompt_text("anyone?")
    window.chat.chat_view.send_button.click()
    asked = lambda: any(r.path.endswith("/chat/completions") for r in fake.requests)  # noqa: E731
    qtbot.waitUntil(asked, timeout=ANSWER_TIMEOUT_MS)
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=10_000
    ) as failed:
        window.chat.chat_view.stop_button.click()
    assert failed.args[0].startswith("Stopped before http://127.0.0.1:")
    assert window.chat.conversation.messages == []  # nothing to keep: the question is back
    assert window.chat.chat_view.prompt_text() == "anyone?"
    assert window.chat.controller.backend_session.state is State.READY
    window.chat.chat_view.set_prompt_text("")
    assert_retry_works(qtbot, window)


def test_closing_the_window_does_not_wait_for_a_silent_server(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    fake = scripted(fakes, [stream_head(), event(delta("Hel")), 30.0])
    connect(qtbot, window, fake.url)
    window.chat.chat_view.set_prompt_text("hello")
    window.chat.chat_view.send_button.click()
    qtbot.waitUntil(
        lambda: window.chat.controller.chat.streaming_text == "Hel", timeout=ANSWER_TIMEOUT_MS
    )
    # The worker thread ends within the runner's wait (60 s), long before the read's 120 s.
    assert window.chat.controller.runner.shutdown(timeout_ms=10_000)
    window.close()


def test_a_refused_connection_mid_chat_keeps_the_conversation(
    qtbot, window: MainWindow, varied_model_dir: Path
) -> None:
    with serving(Engine(varied_model_dir, threads=1)) as served:
        connect(qtbot, window, served.url)
        set_sampling(window, greedy(4))
        send_and_wait(qtbot, window, "first")
    before = [(m.role, m.content) for m in window.chat.conversation.messages]
    message = failed_answer(qtbot, window, "second")  # the server is gone
    assert message.startswith("Could not connect to http://127.0.0.1:")
    assert "is the server running" in message
    assert [(m.role, m.content) for m in window.chat.conversation.messages] == before
    assert window.chat.chat_view.prompt_text() == "second"
    assert (
        window.chat.controller.backend_session.remote is not None
    )  # still connected: it may come back


def tokens_arrived(window: MainWindow) -> bool:
    return window.chat.side_panel.figures_box.latency_chart.point_count >= 2


def test_a_server_killed_mid_answer(qtbot, window: MainWindow, varied_model_dir: Path) -> None:
    server = ServerProcess([sys.executable, "-m", "tests.remote.slow_serve", str(varied_model_dir)])
    try:
        connect(qtbot, window, server.url)
        set_sampling(window, greedy(400))  # 10 ms a token: four seconds, killed long before
        with qtbot.waitSignal(
            window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
        ):
            window.chat.chat_view.set_prompt_text("hello")
            window.chat.chat_view.send_button.click()
            qtbot.waitUntil(lambda: tokens_arrived(window), timeout=ANSWER_TIMEOUT_MS)
            server.process.kill()  # SIGKILL: no goodbye
    finally:
        server.stop()
    message = window.banner.text()
    assert "closed the connection while answering" in message and "are kept" in message
    answer = window.chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.content
    assert answer.figures is not None and answer.figures.finish_reason == "error"
    assert 0 < (answer.figures.generated_tokens or 0) < 400
    assert answer.content in window.chat.chat_view.transcript.toPlainText()


def test_stop_ends_a_remote_answer_at_the_next_chunk(
    qtbot, window: MainWindow, varied_model_dir: Path
) -> None:
    engine = Engine(varied_model_dir, threads=1)
    restore = slow_down(engine, 0.005)  # 400 tokens take two seconds at least
    try:
        with serving(engine) as served:
            connect(qtbot, window, served.url)
            set_sampling(window, greedy(400))
            window.chat.chat_view.set_prompt_text("hello")
            window.chat.chat_view.send_button.click()
            qtbot.waitUntil(lambda: tokens_arrived(window), timeout=ANSWER_TIMEOUT_MS)
            with qtbot.waitSignal(
                window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
            ):
                window.chat.chat_view.stop_button.click()
            (record,) = served.wait_for_records(1)
    finally:
        restore()
    answer = window.chat.conversation.messages[-1]
    assert answer.figures is not None and answer.figures.finish_reason == "stop"
    assert 0 < (answer.figures.generated_tokens or 0) < 400
    assert record.cancelled and record.generated_tokens < 400  # the server stopped too


def test_a_conversation_too_long_for_the_server(
    qtbot, window: MainWindow, varied_model_dir: Path
) -> None:
    with serving(Engine(varied_model_dir, threads=1)) as served:
        connect(qtbot, window, served.url)
        message = failed_answer(qtbot, window, "word " * 3000)  # 512-token context
    assert "start a new chat" in message and "Nothing was lost" in message
    assert window.chat.chat_view.prompt_text().startswith("word word")
