"""The comparison's requests: which loops a sweep point runs."""

from __future__ import annotations

from chatapp.engine.modes import CACHED_MODES, MODES
from chatapp.session.compare_jobs import NOCACHE_SWEEP_MAX, SweepRequest


def test_a_sweep_runs_no_cache_only_on_the_shorter_contexts() -> None:
    request = SweepRequest("Hi", (128, 2048), max_new_tokens=32, modes=MODES)
    assert request.modes_at(128) == MODES
    assert request.modes_at(NOCACHE_SWEEP_MAX - 32) == MODES
    assert request.modes_at(NOCACHE_SWEEP_MAX) == CACHED_MODES
    cached = SweepRequest("Hi", (128,), modes=CACHED_MODES)
    assert cached.modes_at(128) == CACHED_MODES
