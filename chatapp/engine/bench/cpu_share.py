"""How many cores other work took while a benchmark ran (`bench`'s busy warning).

The load average is a decaying mean: right after a run it still counts that run's own threads
for a minute or more, so a second run started at once read its predecessor as "other work". This
measures instead: the machine's busy CPU time (/proc/stat, steal included) less this process's
and its waited-for children's (the llama.cpp peer), over the same wall time. Where /proc/stat
cannot be read, callers keep the load average.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal guest guest_nice;
# guest time is already inside user, so the busy fields are these (by position after "cpu").
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuSample:
    wall: float  # time.monotonic()
    machine_busy: float | None  # CPU seconds all cores spent busy since boot; None: unreadable
    own: float  # CPU seconds of this process and its waited-for children


def machine_busy_seconds(stat: Path = PROC_STAT) -> float | None:
    try:
        first = stat.read_text().split("\n", 1)[0].split()
        ticks = [int(first[1 + i]) for i in _BUSY_FIELDS]
    except (OSError, ValueError, IndexError):
        return None
    return sum(ticks) / os.sysconf("SC_CLK_TCK")


def sample(stat: Path = PROC_STAT) -> CpuSample:
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return CpuSample(time.monotonic(), machine_busy_seconds(stat), own)


def others_cores(start: CpuSample, end: CpuSample) -> float | None:
    """Cores' worth of CPU other processes used between two samples (None: not measurable)."""
    wall = end.wall - start.wall
    if start.machine_busy is None or end.machine_busy is None or wall <= 0:
        return None
    others = (end.machine_busy - start.machine_busy) - (end.own - start.own)
    return round(max(others, 0.0) / wall, 2)


def others_now(seconds: float = 0.5) -> float | None:
    """Other work's cores over a short idle look (this process sleeps meanwhile)."""
    start = sample()
    time.sleep(seconds)
    return others_cores(start, sample())
