"""Time the comparison view's default context sweep without a window: the same job the
Context sweep button runs, on the prepared default model, with the estimate it states first.

    .venv/bin/python scripts/sweep_duration.py

Prints each progress line with the seconds since the start, the load average before and after
(the machine may be shared), and the sweep's sentences.
"""

from __future__ import annotations

import os
import time

from chatapp.convert.default_model import default_model_dir
from chatapp.engine.bench.sentences import explanation
from chatapp.engine.engine import Engine
from chatapp.engine.modes import MODES, Mode
from chatapp.session.compare_jobs import ProgressLine, SweepPoint, SweepRequest, sweep_job
from chatapp.session.jobs import JobControl
from chatapp.session.model_jobs import EngineHost


def main() -> None:
    host = EngineHost()
    host.engine = Engine(default_model_dir(), "cpu", Mode.IOBINDING)
    request = SweepRequest("Explain in a few sentences why the sky is blue.", modes=MODES)
    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} cores", flush=True)
    start = time.monotonic()
    control = JobControl(1, lambda: False, lambda _item: None, lambda: None)
    steps = sweep_job(host, request).run(control)
    points = []
    for item in steps:
        if isinstance(item, ProgressLine) and item.text:
            print(f"{time.monotonic() - start:6.1f} s  {item.text}", flush=True)
        elif isinstance(item, SweepPoint):
            points.append(item.point)
    print(f"sweep took {time.monotonic() - start:.1f} s; load average after: {os.getloadavg()}")
    print(explanation(None, points))


if __name__ == "__main__":
    main()
