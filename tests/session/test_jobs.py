"""run_job: the job vocabulary that the engine service (session/engine_service.py) runs."""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from chatapp.error_text import first_line
from chatapp.session.jobs import (
    Job,
    JobAborted,
    JobControl,
    JobError,
    failed,
    run_job,
)

WAIT_S = 10.0  # bounded waits: a broken runner fails the test instead of hanging it


@dataclass
class Heard:
    """A JobListener that records what it was told, in order."""

    events: list[tuple[str, Any]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def started(self, request_id: int) -> None:
        self.events.append(("started", request_id))

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None:
        self.events.append(("yielded", items))

    def finished(self, request_id: int, result: Any) -> None:
        self.events.append(("finished", result))
        self.done.set()

    def errored(self, error: JobError) -> None:
        self.events.append(("errored", error))
        self.done.set()

    def aborted(self, request_id: int, message: str) -> None:
        self.events.append(("aborted", message))
        self.done.set()

    def items(self) -> list[Any]:
        return [item for kind, batch in self.events if kind == "yielded" for item in batch]


def counting(n: int) -> Job:
    def run(_control: JobControl) -> Generator[int, None, str]:
        yield from range(n)
        return "done"

    return Job("counting", run)


def test_a_generator_job_yields_its_items_then_its_result() -> None:
    heard = Heard()
    run_job(counting(5), 7, lambda: False, heard, flush_interval_s=0.0)
    assert heard.events[0] == ("started", 7)
    assert heard.items() == [0, 1, 2, 3, 4]
    assert heard.events[-1] == ("finished", "done")


def test_items_are_batched_until_the_interval_passes() -> None:
    heard = Heard()
    run_job(counting(50), 1, lambda: False, heard, flush_interval_s=3600.0)
    batches = [batch for kind, batch in heard.events if kind == "yielded"]
    # The first item goes out at once (nothing was sent yet), the rest at the end.
    assert batches == [(0,), tuple(range(1, 50))]


def test_a_stopped_job_ends_as_aborted_with_one_line() -> None:
    def run(control: JobControl) -> Generator[int, None, None]:
        yield 1
        if control.stopped:
            raise JobAborted("Stopped\n  by the user.")

    heard = Heard()
    run_job(Job("stoppable", run), 1, lambda: True, heard)
    assert heard.items() == [1]  # what it made before stopping still goes out
    assert heard.events[-1] == ("aborted", "Stopped by the user.")


def test_a_failure_is_one_line_for_the_user_with_the_partial_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def run(control: JobControl) -> None:
        control.partial = "half an answer"
        raise ValueError("bad input\nsecond line")

    heard = Heard()
    job = Job("broken", run, lambda exc: failed("Answering", exc), expected=(ValueError,))
    run_job(job, 3, lambda: False, heard)
    kind, error = heard.events[-1]
    assert kind == "errored"
    assert error == JobError(3, "Answering failed: ValueError: bad input", "half an answer",
                             ValueError, "bad input\nsecond line")  # fmt: skip
    # Expected: a warning without a traceback.
    assert [r.exc_info for r in caplog.records if r.levelname == "WARNING"] == [None]


def test_an_explanation_that_fails_still_gives_one_line() -> None:
    def explain(exc: BaseException) -> str:
        raise RuntimeError("the explanation broke")

    def run(_control: JobControl) -> None:
        raise KeyError("k")

    heard = Heard()
    run_job(Job("lookup", run, explain), 1, lambda: False, heard)
    error = heard.events[-1][1]
    assert error.message == "Lookup failed: KeyError: 'k'"


def figures_failing(after_items: int, then: str) -> Job:
    """A job whose figures (its snapshot) fail once it has yielded `after_items` items; then it
    fails ("fail"), stops ("stop") or yields one more item ("yield")."""

    def run(control: JobControl) -> Generator[int, None, str]:
        made: list[int] = []

        def snapshot() -> int:
            if len(made) >= after_items:
                raise OverflowError("math range error")
            return len(made)

        control.snapshot = snapshot
        for i in range(after_items):
            made.append(i)
            yield i
        if then == "fail":
            raise RuntimeError("the step failed")
        if then == "stop":
            raise JobAborted("Stopped.")
        yield after_items
        return "done"

    return Job("figures", run)


@pytest.mark.parametrize("after_items", [2, 5])  # the first item goes out at once
@pytest.mark.parametrize("then", ["fail", "stop", "yield"])
def test_failing_figures_never_keep_a_job_from_ending(after_items: int, then: str) -> None:
    """Figures that raise while the runner flushes, in the job or as it ends after another
    fault, still end the job with exactly one event (the window waits for it)."""
    heard = Heard()
    run_job(figures_failing(after_items, then), 1, lambda: False, heard, flush_interval_s=3600)
    ends = [kind for kind, _ in heard.events if kind in ("finished", "errored", "aborted")]
    assert len(ends) == 1 and heard.events[-1][0] == ends[0]
    expected = {"fail": "errored", "stop": "aborted", "yield": "errored"}[then]
    assert ends == [expected]
    if then == "yield":  # the figures' own failure is the job's
        assert "OverflowError" in heard.events[-1][1].message
    elif then == "fail":  # the job's own fault is what the user reads, not the figures'
        assert "the step failed" in heard.events[-1][1].message


def test_first_line_keeps_one_line_within_the_limit() -> None:
    assert first_line(ValueError("a\nb"), 300) == "a"
    assert first_line(ValueError("x" * 400), 200) == "x" * 200
    assert first_line(ValueError()) == "ValueError"
    assert first_line(ValueError(), empty="no details") == "no details"
    assert first_line("") == "unknown error"
