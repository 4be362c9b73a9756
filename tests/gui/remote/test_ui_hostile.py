"""The window against a hostile server (tests/remote/fake_server.py): absurd numbers in the
model list, an answer that ignores max_tokens, a gigabyte on its way. The window stays
responsive (event-loop gaps), Stop ends the answer at once, every failure is one line."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator

import pytest

from chatapp.gui.chat.controller import State
from chatapp.gui.main_window import MainWindow
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling
from tests.gui.event_loop_gaps import GapRecorder, run_queue_wait_s
from tests.gui.remote.conftest import connect
from tests.remote.fake_server import (
    Action,
    FakeServer,
    delta,
    endless_bytes,
    endless_tokens,
    hostile,
    models_listing,
    sse,
)

# The GUI thread's own share of a gap (its run-queue waits on a busy machine excluded; what
# is left includes waiting for the GIL, whose holder may itself sit in the run queue: the
# bound grows with the load beyond one task per core, and is 100 ms on a machine with room).
MAX_GAP_MS = 100


def start_recording(gaps: GapRecorder) -> None:
    """From now (its first tick would otherwise come only when the event loop next runs)."""
    gaps.start()
    gaps.ticks.append((time.perf_counter(), run_queue_wait_s()))


def busy_factor() -> float:
    """1 on a machine with a free core; the load per core beyond that."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.close()


def start(fakes: list[FakeServer], answer: Iterable[Action], **fields: object) -> FakeServer:
    server = FakeServer(hostile(lambda _r: answer, listing=models_listing(**fields)))
    fakes.append(server)
    return server


@pytest.mark.parametrize("context", [2**31, 1e30])
def test_absurd_numbers_connect_and_answer(
    qtbot, window: MainWindow, fakes: list[FakeServer], context: float
) -> None:
    fake = start(fakes, endless_tokens(), max_model_len=context)
    summary = connect(qtbot, window, fake.url)
    assert summary.max_context == 0 and window.banner.text() == ""
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "hello")
    answer = window.chat.conversation.messages[-1]
    assert answer.content == "tok" * 6  # max_tokens enforced on this side


def test_a_gigabyte_answer_leaves_the_window_responsive(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    # 16 KB of prose per token, for ever: the answer is cut at 64 characters per token asked
    # (8192 here), and one line says so. (Text without spaces costs Qt's layout far more: the
    # transcript's business, not the connection's.)
    fake = start(fakes, endless_bytes(sse(delta("lorem ipsum " * 1365))))
    connect(qtbot, window, fake.url)
    set_sampling(window, greedy(8192))
    gaps = GapRecorder()
    try:
        with qtbot.waitSignal(
            window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
        ):
            window.chat.chat_view.set_prompt_text("hello")
            window.chat.chat_view.send_button.click()  # (what sending costs is not measured here)
            start_recording(gaps)
        qtbot.waitUntil(
            lambda: window.chat.controller.backend_session.state is State.READY, timeout=10_000
        )
        qtbot.wait(200)  # the failed answer drawn and saved
    finally:
        gaps.stop()
    print(
        gaps.describe(),
        [round(g) for g in gaps.app_gaps_ms()],
        [round(g) for g in gaps.wall_gaps_ms()],
    )
    assert "characters for an answer of at most" in window.banner.text()
    assert len(gaps.ticks) > 10, gaps.describe()
    assert max(gaps.app_gaps_ms()) < MAX_GAP_MS * busy_factor(), gaps.describe()


@pytest.mark.parametrize("kind", ["tokens", "keep-alive"])
def test_stop_ends_a_gigabyte_stream_within_half_a_second(
    qtbot, window: MainWindow, fakes: list[FakeServer], kind: str
) -> None:
    # Tokens at about 2 000/s (8192 would take 4 s), or keep-alive comments as fast as can be.
    answer = (
        endless_tokens(per_batch=8, pause=0.004)
        if kind == "tokens"
        else endless_bytes(b": keep-alive\n")
    )
    fake = start(fakes, answer)
    connect(qtbot, window, fake.url)
    set_sampling(window, greedy(8192))
    gaps = GapRecorder()
    try:
        window.chat.chat_view.set_prompt_text("hello")
        window.chat.chat_view.send_button.click()
        start_recording(gaps)
        qtbot.waitUntil(lambda: fake.sent_bytes > 100_000, timeout=ANSWER_TIMEOUT_MS)
        clicked, waited = time.perf_counter(), run_queue_wait_s()
        window.chat.chat_view.stop_button.click()
        qtbot.waitUntil(
            lambda: window.chat.controller.backend_session.state is State.READY, timeout=10_000
        )
        stopped_s = time.perf_counter() - clicked - (run_queue_wait_s() - waited)
    finally:
        gaps.stop()
    # Stop is asked at the next chunk, or every 50 ms while none comes. Three threads take
    # part (the GUI's, the job's, the reader's): on a machine busier than its cores, the
    # others' waits for a core are allowed for too.
    assert stopped_s < 0.5 * busy_factor(), stopped_s
    assert max(gaps.app_gaps_ms()) < MAX_GAP_MS * busy_factor(), gaps.describe()
    qtbot.waitUntil(lambda: fake.cut_by_client > 0, timeout=10_000)  # the connection closed
