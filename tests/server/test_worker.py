"""One generation at a time: queueing, and cancellation when the client goes away.

The engine is slowed to a few milliseconds per step (`slow_down`) so that a generation lasts
long enough to be interrupted; every wait is bounded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.engine.engine import Engine
from tests.serving import Served, serving, slow_down

QUESTION = [{"role": "user", "content": "hello"}]
LONG = 400  # tokens asked for; cancelled answers must end long before


@pytest.fixture
def slow_served(tiny_model_dir: Path) -> Iterator[Served]:
    engine = Engine(tiny_model_dir, threads=1)
    restore = slow_down(engine, 0.01)  # LONG tokens take 4 s: plenty of time to cancel
    try:
        with serving(engine) as served:
            yield served
    finally:
        restore()


@pytest.fixture
def gated(tiny_model_dir: Path) -> Iterator[tuple[Served, threading.Event]]:
    """A server whose engine steps only while the gate is open (closed at first)."""
    engine = Engine(tiny_model_dir, threads=1)
    gate = threading.Event()
    restore = slow_down(engine, 0.002, gate)
    try:
        with serving(engine) as served:
            yield served, gate
    finally:
        gate.set()  # never leave the engine thread waiting
        restore()


def body(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"messages": QUESTION, "temperature": 0, "max_tokens": max_tokens, **extra}


def test_stream_closed_by_the_client_stops_the_engine(slow_served: Served) -> None:
    with httpx2.stream(
        "POST",
        f"{slow_served.api}/chat/completions",
        json=body(LONG, stream=True),
        timeout=60,
        trust_env=False,
    ) as response:
        events = httpx2.EventSource(response).__iter__()
        for _ in range(3):  # the role chunk and two tokens: the answer is under way
            next(events)
    # Leaving the block closed the connection mid-answer.
    (record,) = slow_served.wait_for_records(1)
    assert record.cancelled and record.engine_finish_reason == "stop"
    assert 2 <= record.generated_tokens < LONG


def test_non_streamed_request_abandoned_by_the_client_stops_the_engine(
    slow_served: Served,
) -> None:
    with pytest.raises(httpx2.ReadTimeout):
        httpx2.post(
            f"{slow_served.api}/chat/completions",
            json=body(LONG),
            timeout=httpx2.Timeout(30, read=0.5),
            trust_env=False,
        )
    (record,) = slow_served.wait_for_records(1)
    assert record.cancelled and record.engine_finish_reason == "stop"
    assert record.generated_tokens < LONG


def test_second_request_waits_for_the_first_and_both_are_right(
    gated: tuple[Served, threading.Event],
) -> None:
    served, gate = gated
    gate.set()
    expected = httpx2.post(
        f"{served.api}/chat/completions", json=body(30), timeout=60, trust_env=False
    ).json()["choices"][0]["message"]["content"]
    gate.clear()  # the next generation holds at its first step ...
    results: dict[str, str] = {}
    first = threading.Thread(target=_stream_text, args=(served, results, "first", 30))
    first.start()
    served.wait_until(lambda: served.worker.pending == 1)
    second = threading.Thread(target=_stream_text, args=(served, results, "second", 30))
    second.start()
    served.wait_until(lambda: len(served.worker.waiting_requests()) == 1)
    gate.set()  # ... until the second request is queued behind it
    first.join(60)
    second.join(60)
    _, a, b = served.wait_for_records(3)
    assert results == {"first": expected, "second": expected}
    assert b.queued_at < a.finished_at  # it arrived while the first was generating
    assert b.started_at >= a.finished_at  # and only started once the first had finished
    assert a.generated_tokens == b.generated_tokens == 30


def test_a_queued_request_whose_client_left_never_runs(
    gated: tuple[Served, threading.Event],
) -> None:
    served, gate = gated
    results: dict[str, str] = {}
    runner = threading.Thread(target=_stream_text, args=(served, results, "first", 20))
    runner.start()
    served.wait_until(lambda: served.worker.pending == 1)  # held at the gate
    with pytest.raises(httpx2.ReadTimeout):  # waits in the queue; its client gives up
        httpx2.post(
            f"{served.api}/chat/completions",
            json=body(20),
            timeout=httpx2.Timeout(30, read=0.3),
            trust_env=False,
        )
    served.wait_until(lambda: all(j.cancelled.is_set() for j in served.worker.waiting_requests()))
    gate.set()
    runner.join(60)
    first, queued = served.wait_for_records(2)
    assert first.generated_tokens == 20 and not first.cancelled
    assert queued.cancelled and queued.engine_finish_reason == "cancelled"
    assert queued.generated_tokens == 0


def test_max_queue_counts_the_waiting_requests_and_503_says_when_to_retry(
    tiny_model_dir: Path,
) -> None:
    """--max-queue 1: one request generates, one waits, the third is refused."""
    engine = Engine(tiny_model_dir, threads=1)
    gate = threading.Event()
    restore = slow_down(engine, 0.0, gate)
    try:
        with serving(engine, max_queue=1) as served:
            results: dict[str, str] = {}
            runners = [
                threading.Thread(target=_stream_text, args=(served, results, name, 5))
                for name in ("first", "second")
            ]
            runners[0].start()
            served.wait_until(lambda: served.worker.running is not None)
            runners[1].start()
            served.wait_until(lambda: served.worker.pending == 2)
            busy = httpx2.post(
                f"{served.api}/chat/completions", json=body(5), timeout=30, trust_env=False
            )
            gate.set()
            for runner in runners:
                runner.join(60)
    finally:
        gate.set()
        restore()
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "queue_full"
    assert "queue is full (1 waiting)" in busy.json()["error"]["message"]
    assert 1 <= int(busy.headers["retry-after"]) <= 60
    assert len(results["first"]) > 0 and len(results["second"]) > 0  # the waiting one ran


def _stream_text(served: Served, results: dict[str, str], name: str, tokens: int) -> None:
    text = ""
    with httpx2.stream(
        "POST",
        f"{served.api}/chat/completions",
        json=body(tokens, stream=True),
        timeout=60,
        trust_env=False,
    ) as response:
        for event in httpx2.EventSource(response):
            if event.data == "[DONE]":
                break
            text += json.loads(event.data)["choices"][0]["delta"].get("content") or ""
    results[name] = text


def test_a_worker_on_a_shared_service_answers_its_waiting_requests_at_once_when_closed(
    tiny_model_dir: Path,
) -> None:
    """The window's Serve this model: its requests queue on the window's engine service,
    behind the chat's answer; stopping must not leave them waiting for it."""
    from chatapp.server.events import Done, Failed, ServedRequest
    from chatapp.server.request_body import parse_chat
    from chatapp.server.worker import EngineWorker
    from chatapp.session.engine_service import EngineService
    from chatapp.session.jobs import Job

    engine = Engine(tiny_model_dir, threads=1)
    service = EngineService("test-shared")
    chat_answer, release = threading.Event(), threading.Event()

    def long_answer(_control: object) -> None:  # the chat's answer, ahead in the queue
        chat_answer.set()
        assert release.wait(60)

    events: list[object] = []
    worker = EngineWorker(engine, "iobinding", service=service, closed_message="Stopped here.")
    try:
        service.submit(Job("chat answer", long_answer))
        assert chat_answer.wait(60)
        req = parse_chat(body(4), "iobinding", engine.max_context)
        waiting = ServedRequest(req, events.append)
        worker.submit(waiting)
        assert worker.pending == 1
        worker.close(0.0)
        assert service.alive  # the window's service goes on
        (failed,) = events
        assert isinstance(failed, Failed) and failed.error.status == 503
        assert failed.error.message == "Stopped here." and worker.pending == 0
        late = ServedRequest(req, events.append)
        worker.submit(late)  # after closing: refused at once too
        assert len(events) == 2 and isinstance(events[1], Failed)
    finally:
        release.set()
        assert service.close(60)
    assert len(events) == 2 and not any(isinstance(e, Done) for e in events)  # never answered
