"""Gaps between the ticks of a 10 ms timer on the GUI thread, split in two.

A gap is the tick interval plus whatever kept the GUI thread from running its event loop: its own
work, waiting on a lock or the GIL (the app's doing), or waiting in the kernel's run queue for a
free core while other processes and threads use both (the machine's doing). Linux counts the
last one per thread in /proc/thread-self/schedstat, so a gap minus that wait is the part the app
is answerable for, whatever else runs on the machine."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer

SCHEDSTAT = Path("/proc/thread-self/schedstat")


def run_queue_wait_s() -> float:
    """Seconds the calling thread has spent runnable but not running (0 where not counted)."""
    try:
        return int(SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class GapRecorder:
    def __init__(self, interval_ms: int = 10) -> None:
        self.ticks: list[tuple[float, float]] = []  # (wall clock, run-queue wait so far)
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        self.ticks.append((time.perf_counter(), run_queue_wait_s()))

    def start(self) -> None:
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def wall_gaps_ms(self) -> list[float]:
        return [(b[0] - a[0]) * 1000 for a, b in itertools.pairwise(self.ticks)]

    def app_gaps_ms(self) -> list[float]:
        """Each gap without the time the thread sat in the run queue."""
        return [((b[0] - a[0]) - (b[1] - a[1])) * 1000 for a, b in itertools.pairwise(self.ticks)]

    def describe(self) -> str:
        wall, app = self.wall_gaps_ms(), self.app_gaps_ms()
        return (
            f"{len(self.ticks)} ticks, gaps median {statistics.median(wall):.1f} ms, "
            f"max {max(wall):.1f} ms wall / {max(app):.1f} ms without run-queue waits"
        )
