"""InlineRunner: the core's Submit without a worker, as the window's JobRunner.watch behaves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from chatapp.session.jobs import Job, JobAborted, JobControl, JobError
from chatapp.session.running import InlineRunner, JobWatcher, YieldedBatch


def watch(log: list[tuple[str, Any]]) -> JobWatcher:
    return JobWatcher(
        lambda batch: log.append(("yielded", batch)),
        lambda value: log.append(("finished", value)),
        lambda error: log.append(("errored", error)),
        lambda message: log.append(("aborted", message)),
    )


def counting(control: JobControl) -> Iterator[int]:
    for i in range(5):
        if control.stopped:
            raise JobAborted("Stopped  after\n a few.")
        yield i
    return 42


def test_jobs_wait_for_drain_and_run_in_order_with_one_ending_each() -> None:
    runner = InlineRunner()
    log: list[tuple[str, Any]] = []
    first = runner(Job("first", counting), watch(log))
    second = runner(Job("second", lambda _c: 1 / 0, lambda exc: "Dividing failed."), watch(log))
    assert log == [] and (first.request_id, second.request_id) == (1, 2)
    assert runner.drain() == 2 and runner.names == ["first", "second"]
    (kind, batch), finished, (errored, error) = log
    assert kind == "yielded" and isinstance(batch, YieldedBatch) and batch.items == (0, 1, 2, 3, 4)
    assert finished == ("finished", 42)
    assert errored == "errored" and isinstance(error, JobError)
    assert error.message == "Dividing failed." and error.kind is ZeroDivisionError


def test_a_stopped_job_is_aborted_after_what_it_made() -> None:
    runner = InlineRunner(stop_after=2)
    log: list[tuple[str, Any]] = []
    runner(Job("counting", counting), watch(log))
    runner.drain()
    assert [name for name, _ in log] == ["yielded", "aborted"]
    assert log[0][1].items == (0, 1) and log[1][1] == "Stopped after a few."


def test_a_watcher_may_leave_callbacks_out() -> None:
    runner = InlineRunner()
    seen: list[object] = []
    runner(Job("counting", counting), JobWatcher(on_finished=seen.append))
    runner(Job("queued from a callback", lambda _c: "later"), JobWatcher())
    runner.drain()
    assert seen == [42]
