"""Opening a model in the window: the load runs on the worker thread, also when its first load
saves the packed copy in a child process (engine/packed_cache.py), and the window keeps ticking."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.engine.packed_cache import ENV_VAR, cache_root
from chatapp.gui.chat.controller import State
from tests.engine.test_memory import with_external_data
from tests.gui.event_loop_gaps import GapRecorder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_a_first_load_that_saves_the_packed_copy_leaves_the_window_responsive(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")  # the tiny model is far below the size a copy is made for
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    gaps = GapRecorder()
    gaps.start()
    try:
        with qtbot.waitSignal(
            window.chat.controller.backend_session.events.model_loaded, timeout=60_000
        ):
            window.open_model(folder)  # a child process saves the copy: seconds
    finally:
        gaps.stop()
    engine = window.host.engine
    assert engine is not None and engine.mapped_files[0].is_relative_to(cache_root())
    assert len(gaps.ticks) >= 20, gaps.describe()
    # The load waits for the child on the worker thread; the GUI thread only runs its timers.
    assert max(gaps.app_gaps_ms()) < 500, f"the GUI thread stalled: {gaps.describe()}"
