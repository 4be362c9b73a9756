"""Run a session Job synchronously, without Qt or threads, recording what it sends out."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from chatapp.session.jobs import Job, JobAborted, JobControl


@dataclass
class Outcome:
    items: list[Any] = field(default_factory=list)
    flushed_at: list[int] = field(default_factory=list)  # len(items) at each flush()
    result: Any = None
    aborted: str | None = None
    error: Exception | None = None
    message: str | None = None  # job.explain(error)
    partial: Any = None


def drive(job: Job, stopped: bool = False, request_id: int = 1) -> Outcome:
    out = Outcome()
    control = JobControl(
        request_id, lambda: stopped, out.items.append, lambda: out.flushed_at.append(len(out.items))
    )
    try:
        result = job.run(control)
        if inspect.isgenerator(result):
            while True:
                try:
                    out.items.append(next(result))
                except StopIteration as stop:
                    result = stop.value
                    break
        out.result = result
    except JobAborted as exc:
        out.aborted = str(exc)
    except Exception as exc:
        out.error, out.message = exc, job.explain(exc)
    out.partial = control.partial
    return out
