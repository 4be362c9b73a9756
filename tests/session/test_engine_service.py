"""EngineService: the one owner of the thread that touches a loaded model (one thread, one
queue: jobs, and the passes of a served batch's loop between them) and `stream`, which
`chatapp generate` waits on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chatapp.engine.batch_loop import Task
from chatapp.engine.engine import Engine
from chatapp.engine.loops import WAIT
from chatapp.engine.slots import SlotLoop
from chatapp.session.engine_service import DROPPED, EngineService, call, stream
from chatapp.session.jobs import Job, JobAborted, JobControl
from tests.session.test_jobs import WAIT_S, Heard


def test_the_service_runs_jobs_in_order_one_at_a_time() -> None:
    heard = Heard()
    order: list[str] = []
    running = threading.Lock()
    release = threading.Event()

    def job(name: str) -> Job:
        def run(_control: JobControl) -> str:
            assert running.acquire(blocking=False), "two jobs at once"
            try:
                if name == "first":
                    assert release.wait(WAIT_S)
                order.append(name)
                return name
            finally:
                running.release()

        return Job(name, run)

    thread = EngineService("test-jobs", heard)
    try:
        thread.submit(job("first"))
        second = job("second")
        thread.submit(second)
        assert second in thread.waiting()  # queued behind the first
        release.set()
    finally:
        thread.close(WAIT_S)
    assert order == ["first", "second"]
    assert [e[1] for e in heard.events if e[0] == "finished"] == ["first", "second"]


def test_a_job_submitted_while_closing_runs_stopped() -> None:
    release = threading.Event()
    seen: list[bool] = []

    def late(control: JobControl) -> None:
        seen.append(control.stopped)

    heard = Heard()
    thread = EngineService("test-jobs", heard)
    thread.submit(Job("first", lambda _control: release.wait(WAIT_S)))
    thread.close(timeout=0)  # returns at once: the first job still runs
    thread.submit(Job("late", late))
    release.set()
    thread.close(WAIT_S)
    assert seen == [True]  # it ran, told to stop (the server answers "shutting down")
    assert [e[1] for e in heard.events if e[0] == "finished"] == [True, None]


def test_request_stop_reaches_the_running_job() -> None:
    started = threading.Event()

    def run(control: JobControl) -> str:
        started.set()
        for _ in range(int(WAIT_S * 100)):
            if control.stopped:
                raise JobAborted("stopped")
            threading.Event().wait(0.01)
        return "ran to the end"

    heard = Heard()
    thread = EngineService("test-jobs", heard)
    try:
        request_id = thread.submit(Job("long", run))
        assert started.wait(WAIT_S)
        thread.request_stop(request_id)
        assert heard.done.wait(WAIT_S)
    finally:
        thread.close(WAIT_S)
    assert heard.events[-1] == ("aborted", "stopped")


def test_closing_the_batch_runs_what_was_queued_and_refuses_what_comes_after(
    varied_model_dir: Path,
) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=64)
    answered: list[int] = []
    refused: list[int] = []
    slots_used: set[int] = set()
    threads: set[str] = set()

    def answer(request: int, slot: SlotLoop) -> Task:
        threads.add(threading.current_thread().name)
        yield WAIT  # resumed by the next pass
        answered.append(request)
        slots_used.add(slot.index)

    service = EngineService("test-slots")
    serving = service.serve_batch(engine.slots(2), answer, refused.append)
    for r in range(5):
        serving.submit(r)
    assert service.close(WAIT_S)  # the batch's requests end before the service does
    assert not serving.alive
    serving.submit(99)
    assert sorted(answered) == [0, 1, 2, 3, 4] and refused == [99]
    assert slots_used == {0, 1} and threads == {"test-slots"}  # no thread of their own
    assert engine.slots(2).busy == 0  # every slot given back


def test_a_job_runs_between_two_passes_of_a_served_batch(varied_model_dir: Path) -> None:
    """The chat's answer (a job) while the window serves: it runs on the one thread between
    two passes of the batch's loop, and the batch goes on after it."""
    engine = Engine(varied_model_dir, threads=1, max_context=64)
    job_ran = threading.Event()
    order: list[str] = []

    def answer(request: int, slot: SlotLoop) -> Task:
        deadline = time.monotonic() + WAIT_S
        while not job_ran.is_set():  # never set where jobs waited for the batch to end
            assert time.monotonic() < deadline
            yield WAIT
        order.append("request")

    def job(control: JobControl) -> None:
        order.append("job")
        job_ran.set()

    service = EngineService("test-both")
    try:
        serving = service.serve_batch(engine.slots(2), answer, lambda _r: None)
        serving.submit(1)
        heard = Heard()
        service.submit(Job("chat answer", job), heard)
        assert heard.done.wait(WAIT_S)
    finally:
        assert service.close(WAIT_S)
    assert order == ["job", "request"]


def test_stream_yields_on_the_callers_thread_what_runs_on_the_service() -> None:
    threads: set[str] = set()

    def work(_stopped: Callable[[], bool]) -> Iterator[int]:
        for i in range(3):
            threads.add(threading.current_thread().name)
            yield i

    service = EngineService("test-stream")
    try:
        assert list(stream("count", work, service)) == [0, 1, 2]
    finally:
        service.close(WAIT_S)
    assert threads == {"test-stream"}


def test_stream_raises_the_jobs_own_exception_here() -> None:
    def work(_stopped: Callable[[], bool]) -> Iterator[int]:
        yield 1
        raise KeyError("the job's own")

    seen: list[int] = []
    with pytest.raises(KeyError, match="the job's own"):
        for item in stream("failing", work):
            seen.append(item)
    assert seen == [1]


def test_leaving_a_stream_early_stops_its_job() -> None:
    stopped_seen = threading.Event()

    def work(stopped: Callable[[], bool]) -> Iterator[int]:
        for i in range(int(WAIT_S * 100)):
            if stopped():
                stopped_seen.set()
                return
            yield i
            threading.Event().wait(0.01)

    service = EngineService("test-leave")
    try:
        for item in stream("long", work, service):
            if item == 2:
                break
        assert stopped_seen.wait(WAIT_S)
    finally:
        assert service.close(WAIT_S)


def test_call_returns_what_ran_on_the_service_and_hands_its_items_here() -> None:
    where: dict[str, str] = {}
    heard: list[tuple[str, str]] = []

    def work(say: Callable[[object], None], _stopped: Callable[[], bool]) -> int:
        where["work"] = threading.current_thread().name
        say("one")
        say("two")
        return 42

    def hear(item: object) -> None:
        heard.append((str(item), threading.current_thread().name))

    service = EngineService("test-call")
    try:
        assert call("measure", work, hear, service) == 42
    finally:
        service.close(WAIT_S)
    here = threading.current_thread().name
    assert where == {"work": "test-call"} and heard == [("one", here), ("two", here)]


def test_call_raises_the_jobs_own_exception_here() -> None:
    def work(say: Callable[[object], None], _stopped: Callable[[], bool]) -> int:
        say("before")
        raise KeyError("the job's own")

    heard: list[object] = []
    with pytest.raises(KeyError, match="the job's own"):
        call("failing", work, heard.append)  # on a service of its own
    assert heard == ["before"]


class Deaf(Heard):
    """A listener whose receiver is gone (a closed window's relay)."""

    def finished(self, request_id: int, result: object) -> None:
        raise RuntimeError("its receiver was deleted")


def test_a_failing_listener_does_not_end_the_service_thread() -> None:
    service = EngineService("test-deaf")
    try:
        service.submit(Job("first", lambda _control: 1), Deaf())
        heard = Heard()
        service.submit(Job("second", lambda _control: 2), heard)
        assert heard.done.wait(WAIT_S)
    finally:
        assert service.close(WAIT_S)
    assert heard.events[-1] == ("finished", 2)


def test_closing_with_drop_waiting_ends_the_queued_jobs_as_stopped_without_running_them() -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    heard = Heard()

    def running(_control: JobControl) -> None:
        ran.append("running")
        started.set()
        assert release.wait(WAIT_S)

    service = EngineService("test-drop")
    service.submit(Job("running", running))
    service.submit(Job("queued", lambda _control: ran.append("queued")), heard)
    assert started.wait(WAIT_S)
    service.stop_all()
    service.close(0, drop_waiting=True)  # returns at once: the first job still runs
    release.set()
    assert service.close(WAIT_S)
    assert ran == ["running"]  # the queued one never ran ...
    assert heard.events == [("aborted", DROPPED)]  # ... and ended, as stopped
