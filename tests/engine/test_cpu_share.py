"""cpu_share: other processes' CPU use from /proc/stat less this process's own."""

from __future__ import annotations

import os
from pathlib import Path

from chatapp.engine.bench import cpu_share
from chatapp.engine.bench.cpu_share import CpuSample, machine_busy_seconds, others_cores


def test_busy_time_counts_everything_but_idle_and_iowait(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 20 30 5000 70 4 6 10 50 0\ncpu0 1 2 3\n")
    assert machine_busy_seconds(stat) == (100 + 20 + 30 + 4 + 6 + 10) / os.sysconf("SC_CLK_TCK")


def test_an_unreadable_stat_is_none(tmp_path: Path) -> None:
    assert machine_busy_seconds(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("nothing here\n")
    assert machine_busy_seconds(tmp_path / "odd") is None
    assert others_cores(CpuSample(0.0, None, 0.0), CpuSample(1.0, 5.0, 0.5)) is None


def test_own_cpu_time_is_not_other_work() -> None:
    start = CpuSample(wall=10.0, machine_busy=100.0, own=3.0)
    # 2 s of wall time, 3.5 core-seconds busy, 3 of them this process's (and its peers')
    end = CpuSample(wall=12.0, machine_busy=103.5, own=6.0)
    assert others_cores(start, end) == 0.25
    # never negative (the two counters are read at slightly different moments)
    assert others_cores(start, CpuSample(12.0, 101.0, 6.0)) == 0.0


def test_a_live_sample_reads_this_machine() -> None:
    s = cpu_share.sample()
    assert s.own > 0.0
    if Path("/proc/stat").exists():
        assert s.machine_busy is not None and s.machine_busy > 0.0
