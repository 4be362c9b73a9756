"""JobRunner: jobs on its engine service's one thread (the runner owns none), their items
batched in time, stop flags, errors as one line on the GUI thread and a traceback in the log."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QThread

from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.logs import LOG_FILE, setup_logging
from chatapp.session.chat_jobs import TokenBatch, TokenItem, window_job
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.engine_service import EngineService
from chatapp.session.jobs import Job, JobAborted, JobControl
from chatapp.session.model_jobs import EngineHost, LoadRequest, load_job

TIMEOUT_MS = 60_000


@pytest.fixture
def runner(qtbot) -> Iterator[JobRunner]:
    runner = JobRunner("TestWorkerThread")
    yield runner
    assert runner.shutdown()


class Recorder:
    """Everything a handle says, in order."""

    def __init__(self, handle: JobHandle) -> None:
        self.events: list[tuple[str, object]] = []
        self.threads: set[QThread] = set()
        handle.sig_started.connect(lambda: self._add("started", None))
        handle.sig_yielded.connect(lambda batch: self._add("yielded", batch))
        handle.sig_finished.connect(lambda value: self._add("finished", value))
        handle.sig_errored.connect(lambda error: self._add("errored", error))
        handle.sig_aborted.connect(lambda message: self._add("aborted", message))

    def _add(self, kind: str, value: object) -> None:
        self.threads.add(QThread.currentThread())
        self.events.append((kind, value))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def items(self) -> list[object]:
        return [i for kind, b in self.events if kind == "yielded" for i in b.items]  # type: ignore[attr-defined]


def wait_done(qtbot, handle: JobHandle) -> None:
    qtbot.waitUntil(lambda: handle.done, timeout=TIMEOUT_MS)


def counting_job(n: int, pause_s: float = 0.0) -> Job:
    def run(control: JobControl) -> Iterator[int]:
        worker = threading.get_ident()
        for i in range(n):
            if pause_s:
                time.sleep(pause_s)
            yield i
        return worker  # type: ignore[return-value]

    return Job("counting", run)


def test_items_arrive_in_order_in_few_batches_on_the_gui_thread(qtbot, runner) -> None:
    handle = runner.submit(counting_job(20_000))
    seen = Recorder(handle)
    wait_done(qtbot, handle)
    kinds = seen.kinds()
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert set(kinds[1:-1]) == {"yielded"}
    assert seen.items() == list(range(20_000))
    assert len(kinds) - 2 < 50  # batched: not 20 000 signals
    assert seen.events[-1][1] != threading.get_ident()  # the job ran on the worker thread
    assert seen.threads == {QThread.currentThread()}  # the signals arrive on this thread


def test_the_first_item_goes_out_at_once_then_one_batch_per_interval(qtbot, runner) -> None:
    runner.flush_interval_s = 60.0  # nothing is sent on time during this test
    handle = runner.submit(counting_job(5))
    seen = Recorder(handle)
    wait_done(qtbot, handle)
    batches = [b.items for kind, b in seen.events if kind == "yielded"]  # type: ignore[attr-defined]
    assert batches == [(0,), (1, 2, 3, 4)]  # the first at once, the rest at the end


def test_a_job_can_ask_for_its_own_interval(qtbot, runner) -> None:
    """The comparison's charts take fewer, larger batches than the chat's stream."""
    runner.flush_interval_s = 0.0  # every item on its own, by default
    slow = counting_job(5)
    slow = Job(slow.name, slow.run, flush_interval_s=60.0)
    for job, want in ((counting_job(5), [(i,) for i in range(5)]), (slow, [(0,), (1, 2, 3, 4)])):
        handle = runner.submit(job)
        seen = Recorder(handle)
        wait_done(qtbot, handle)
        assert [b.items for kind, b in seen.events if kind == "yielded"] == want  # type: ignore[attr-defined]


def test_a_job_can_flush_and_send_a_snapshot(qtbot, runner) -> None:
    runner.flush_interval_s = 60.0

    def run(control: JobControl) -> Iterator[str]:
        state = {"n": 0}
        control.snapshot = lambda: dict(state)
        for word in ("a", "b", "c"):
            state["n"] += 1
            yield word
            control.flush()
        control.put("d")  # from a callback: the same as yielding it

    handle = runner.submit(Job("words", run))
    seen = Recorder(handle)
    wait_done(qtbot, handle)
    batches = [b for kind, b in seen.events if kind == "yielded"]
    assert [b.items for b in batches] == [("a",), ("b",), ("c",), ("d",)]  # type: ignore[attr-defined]
    assert [b.snapshot for b in batches] == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 3}]  # type: ignore[attr-defined]
    assert seen.events[-1] == ("finished", None)


def blocker_job(release: threading.Event) -> Job:
    def run(_control: JobControl) -> None:
        release.wait(30)

    return Job("blocker", run)


def until_stopped_job() -> Job:
    def run(control: JobControl) -> Iterator[int]:
        i = 0
        while not control.stopped:
            yield i
            i += 1
            time.sleep(0.001)
        raise JobAborted("Stopped after\n   the current step.")

    return Job("until stopped", run)


def test_jobs_run_one_at_a_time_and_stop_between_steps(qtbot, runner) -> None:
    release = threading.Event()
    first = runner.submit(blocker_job(release))
    second = runner.submit(until_stopped_job())
    seen = Recorder(second)
    second.stop()  # while it waits behind the first: it must not be lost
    assert not second.done
    release.set()
    wait_done(qtbot, second)
    assert first.done and first.request_id < second.request_id
    assert seen.kinds() == ["started", "aborted"]  # it saw the flag before its first step
    assert seen.events[-1][1] == "Stopped after the current step."  # one line

    third = runner.submit(until_stopped_job())  # a later job is not stopped
    seen = Recorder(third)
    qtbot.waitUntil(lambda: len(seen.items()) > 3, timeout=TIMEOUT_MS)
    third.stop()
    wait_done(qtbot, third)
    assert seen.kinds()[-1] == "aborted"


def test_an_exception_is_one_line_for_the_user_and_a_traceback_in_the_log(
    qtbot, runner, tmp_path: Path
) -> None:
    log_file = setup_logging(tmp_path / "logs")
    try:

        def run(control: JobControl) -> Iterator[int]:
            control.partial = "made so far"
            yield 1
            raise RuntimeError("simulated fault\nsecond line of details")

        handle = runner.submit(Job("faulty", run))
        seen = Recorder(handle)
        wait_done(qtbot, handle)
    finally:
        for handler in list(logging.getLogger("chatapp").handlers):
            handler.close()
            logging.getLogger("chatapp").removeHandler(handler)
    assert seen.kinds() == ["started", "yielded", "errored"]  # the item made before the fault
    error = seen.events[-1][1]
    assert isinstance(error, JobError)
    assert error.message == "It failed: RuntimeError: simulated fault"
    assert error.partial == "made so far" and error.request_id == handle.request_id
    assert log_file == tmp_path / "logs" / LOG_FILE
    text = log_file.read_text(encoding="utf-8")
    assert "ERROR" in text and "faulty" in text and "TestWorkerThread" in text
    assert "Traceback (most recent call last)" in text and "second line of details" in text


def test_expected_errors_are_warnings_and_a_broken_explanation_still_reports(
    qtbot, runner, caplog: pytest.LogCaptureFixture
) -> None:
    def run(_control: JobControl) -> None:
        raise ValueError("the user's input")

    def explain(exc: BaseException) -> str:
        raise KeyError("a bug in the explanation")

    caplog.set_level(logging.INFO, logger="chatapp")
    expected = runner.submit(Job("checked", run, lambda exc: f"Bad input: {exc}.", (ValueError,)))
    broken = runner.submit(Job("odd", run, explain))
    errors: list[JobError] = []
    expected.sig_errored.connect(errors.append)
    broken.sig_errored.connect(errors.append)
    wait_done(qtbot, broken)
    assert [e.message for e in errors] == [
        "Bad input: the user's input.",
        "Odd failed: ValueError: the user's input",
    ]
    levels = {r.getMessage().split(":")[0]: r.levelname for r in caplog.records}
    assert levels["checked 1"] == "WARNING" and levels["odd 2"] == "ERROR"
    tracebacks = {r.getMessage().split(":")[0]: r.exc_info is not None for r in caplog.records}
    assert not tracebacks["checked 1"] and tracebacks["odd 2"]  # an expected refusal: one line


def test_shutdown_stops_the_running_job_and_ends_the_thread(qtbot) -> None:
    runner = JobRunner("ShutdownThread")
    handle = runner.submit(until_stopped_job())
    qtbot.waitUntil(lambda: handle.done or runner.running, timeout=TIMEOUT_MS)
    assert runner.shutdown(30_000)
    assert not runner.running
    assert runner.shutdown()  # twice is fine


GREEDY_LONG = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=300)


def test_a_fast_token_stream_from_the_tiny_model_arrives_in_few_batches(
    qtbot, runner, tiny_model_dir: Path
) -> None:
    host = EngineHost()
    load = runner.submit(load_job(host, LoadRequest(tiny_model_dir)))
    answer = runner.submit(
        window_job(
            host, (Message("user", "hello"),), GenerationOptions(GREEDY_LONG, Mode.IOBINDING)
        )
    )
    batches: list[YieldedBatch] = []
    answer.sig_yielded.connect(batches.append)
    with qtbot.waitSignal(answer.sig_finished, timeout=TIMEOUT_MS) as blocker:
        pass
    assert load.done and host.engine is not None
    result = blocker.args[0]
    assert result.stats.finish_reason == "length" and result.stats.generated_tokens == 300
    tokens = [
        TokenBatch.join(b.request_id, items)
        for b in batches
        if (items := [i for i in b.items if isinstance(i, TokenItem)])
    ]
    # Every token arrives exactly once, in order, and the text adds up to the answer...
    assert [t for b in tokens for t in b.token_ids] == result.stats.token_ids
    assert "".join(b.text for b in tokens) == result.text
    # ...but in few signals (the tiny model makes thousands of tokens per second), and the
    # first token is not held back.
    assert len(tokens[0].token_ids) == 1
    assert len(batches) < 60


def test_watch_calls_the_watcher_on_the_gui_thread_as_the_core_expects(
    qtbot, runner: JobRunner
) -> None:
    from chatapp.session.running import JobWatcher

    events: list[tuple[str, object]] = []
    threads: set[QThread] = set()

    def note(kind: str) -> object:
        def add(value: object) -> None:
            threads.add(QThread.currentThread())
            events.append((kind, value))

        return add

    watcher = JobWatcher(note("yielded"), note("finished"), note("errored"), note("aborted"))  # type: ignore[arg-type]
    handle = runner.watch(counting_job(3), watcher)
    wait_done(qtbot, handle)
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "finished" and set(kinds[:-1]) == {"yielded"}
    assert [i for kind, b in events if kind == "yielded" for i in b.items] == [0, 1, 2]  # type: ignore[attr-defined]
    assert threads == {QThread.currentThread()}


def test_two_runners_on_one_service_take_turns_on_its_one_thread(qtbot) -> None:
    """The runner is a client: whatever submits to the service queues behind the others."""
    service = EngineService("SharedEngineThread")
    first, second = JobRunner(service=service), JobRunner(service=service)
    order: list[str] = []
    threads: set[str] = set()

    def job(tag: str) -> Job:
        def run(_control: JobControl) -> str:
            order.append(tag)
            threads.add(threading.current_thread().name)
            return tag

        return Job(tag, run)

    handles = [first.submit(job("a1")), second.submit(job("b1")), first.submit(job("a2"))]
    finished: list[object] = []
    for handle in handles:
        handle.sig_finished.connect(finished.append)
    wait_done(qtbot, handles[-1])
    assert order == ["a1", "b1", "a2"] and threads == {"SharedEngineThread"}
    assert finished == ["a1", "b1", "a2"]  # each handle heard its own job, on this thread
    assert second.shutdown() and not first.running  # the service, and its thread, ended
