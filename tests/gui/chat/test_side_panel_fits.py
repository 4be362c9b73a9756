"""The side panel fits the window a 1366x768 screen opens (1200x706) after an answer of the
default model, with drafting's note under the loops: issue 47 saw it scroll by a pixel there.
The latency chart keeps its axes' numbers in its smaller height."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.gui.main_window import MainWindow
from tests.gui.conftest import greedy, send_and_wait, set_sampling

# Fast precision (the default), where drafting runs and its note shows; no token is checked.
pytestmark = pytest.mark.default_model


def test_the_side_panel_fits_at_1366x768_after_an_answer(
    qtbot, make_window, default_model_dir: Path, history_file: Path, settings_file: Path
) -> None:
    window: MainWindow = make_window(["--model", str(default_model_dir)])
    window.resize(1200, 706)
    window.show()
    set_sampling(window, greedy(40))
    send_and_wait(qtbot, window, "Tell me about the moon.")
    qtbot.wait(300)
    panel = window.chat.side_panel
    assert panel.speculative_option.note.isVisible()  # drafting's note takes its lines
    assert panel.figures_box.latency_chart.point_count > 0
    bar = window.side_scroll.verticalScrollBar()
    assert window.side_scroll.isVisible()
    assert bar.maximum() == 0, (panel.height(), window.side_scroll.viewport().height())
