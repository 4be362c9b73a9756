"""View > Plain vs speculative (gui/compare/speculative_view.py): both answers run on the loaded
model, the chart gets both lines, and the lines under it are those of `bench --speculative`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PySide6.QtWidgets import QPushButton

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.native_kernels import library_path
from chatapp.gui.compare.speculative_feature import SpeculativeFeature

BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")


@pytest.fixture(scope="module")
def native_model_dir(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("speculative-view")
    return convert_gguf(tiny_gguf, root / "tiny", ConvertOptions(graph="native"))


@BUILT
def test_both_answers_are_drawn_and_described(qtbot, make_window, native_model_dir: Path) -> None:
    window = make_window(["--model", str(native_model_dir)])
    feature = window.feature(SpeculativeFeature)
    assert feature is not None
    view = feature.view
    view.prompt_edit.setPlainText("abc abc abc abc abc abc abc abc")
    view.tokens_spin.setValue(24)
    view.repeats_spin.setValue(2)
    run = window.findChild(QPushButton, "speculativeRunButton")
    assert run.isEnabled()
    with qtbot.waitSignal(view.sig_running, timeout=60_000, check_params_cb=lambda r: not r):
        run.click()
    done = view.compared
    assert done is not None, view.status.text()
    result = done.result
    assert result.same_tokens and len(result.plain_tps) == len(result.speculative_tps) == 2
    assert "same tokens: yes" in view.status.text()
    for series in view.series.values():
        assert series.count() == result.tokens - 1  # every token after the first
        last = series.at(series.count() - 1)
        assert last.y() <= view.y_axis.max() and last.x() <= view.x_axis.max()
    # Round ticks: each step between labels is 1, 2 or 5 (or 2.5) times a power of ten.
    for axis in (view.x_axis, view.y_axis):
        step = (axis.max() - axis.min()) / (axis.tickCount() - 1)
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5, 10)), (axis, step)
    text = view.results.text()
    assert f"{result.accepted}/{result.drafted}" in text
    assert "This prompt:" in text and f"{result.ratio:.2f}x" in text
    # The machine's load beside the ratio, as `bench --speculative` prints it.
    load = done.bench.load_average
    assert load is not None and "Load average (1, 5, 15 min):" in text
    assert ", ".join(map(str, load["before"])) in text


def test_a_stock_graph_says_why_it_cannot_run(make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    view = window.feature(SpeculativeFeature).view
    assert not view.run_button.isEnabled()
    assert "fast precision" in view.run_button.toolTip()
    assert "does not run on this model" in view.status.text()
    assert view.run() is False
