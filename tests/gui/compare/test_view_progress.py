"""The sweep and the comparison show a progress bar that moves forward, then goes away."""

from __future__ import annotations

from pathlib import Path

from chatapp.session.compare_jobs import SWEEP_TOKENS, ProgressLine, SweepPoint
from tests.gui.compare.test_view import RUN_TIMEOUT_MS, open_compare
from tests.gui.conftest import WindowFactory


def test_sweep_states_its_estimate_first_and_moves_with_every_step(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.sweep_edit.setText("32, 64, 96")
    assert view.run_sweep()
    assert view.progress.isVisible() and view.progress.bar.value() == 0
    items: list[object] = []
    bar_values: list[int] = []

    def seen(batch) -> None:
        items.extend(batch.items)
        bar_values.append(view.progress.bar.value())

    view.job.sig_yielded.connect(seen)
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS):
        pass
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    lines = [i for i in items if isinstance(i, ProgressLine)]
    points = [n for n, i in enumerate(items) if isinstance(i, SweepPoint)]
    estimate = next(n for n, i in enumerate(items) if "estimated about" in getattr(i, "text", ""))
    assert len(points) == 3 and estimate < points[0]  # the estimate comes before any point
    fractions = [i.fraction for i in lines if i.fraction is not None]
    # A fraction per step (3 contexts x 3 loops x 16 tokens at 32, 2 loops above 256 tokens:
    # all three contexts here run no cache), never backwards, never done before the end.
    steps = sum(1 for i in lines if not i.text)
    assert steps == 3 * 3 * SWEEP_TOKENS
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] < 1.0
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
