"""The sweep and the comparison show a progress bar that moves forward, then goes away."""

from __future__ import annotations

from pathlib import Path

from chatapp.session.compare_jobs import ProgressLine
from tests.gui.compare.test_view import RUN_TIMEOUT_MS, open_compare
from tests.gui.conftest import WindowFactory


def test_sweep_progress_moves_forward_and_hides(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(8)
    view.repeats_spin.setValue(2)
    view.sweep_edit.setText("32, 64, 96")
    assert view.run_sweep()
    assert view.progress.isVisible() and view.progress.bar.value() == 0
    fractions: list[float] = []
    bar_values: list[int] = []

    def seen(batch) -> None:
        fractions.extend(
            i.fraction
            for i in batch.items
            if isinstance(i, ProgressLine) and i.fraction is not None
        )
        bar_values.append(view.progress.bar.value())

    view.job.sig_yielded.connect(seen)
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS):
        pass
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    assert len(fractions) == 6  # three contexts, two runs each
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] < 1.0
    # Weighted by context: the 96-token runs take the largest share.
    assert fractions[-1] > 0.6
    assert bar_values == sorted(bar_values)
    assert not view.progress.isVisible()


def test_comparison_progress_follows_the_streamed_steps(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(16)
    view.repeats_spin.setValue(2)
    assert view.run_comparison()
    values: list[int] = []
    view.job.sig_yielded.connect(lambda _b: values.append(view.progress.bar.value()))
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS):
        pass
    # The first of two runs streams: the bar reaches half way with its steps, then run 2.
    assert values == sorted(values) and 450 <= max(values) <= 1000
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    assert not view.progress.isVisible()
