"""The comparison view: the loops drawn live, table filled, sweep, export, stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QWidget

from chatapp.gui.chat.controller import State
from chatapp.gui.common.export_folder import EXPORT_FOLDER_KEY, remember_export_folder
from chatapp.gui.compare.feature import CompareFeature
from chatapp.gui.compare.table import RATIO_HEADER, RATIO_MIN_WIDTH
from chatapp.gui.compare.view import CompareView, parse_contexts
from chatapp.session.compare_jobs import StepFigures
from chatapp.units import fmt_bytes
from tests.gui.conftest import WindowFactory

RUN_TIMEOUT_MS = 120_000


def open_compare(make_window: WindowFactory, model: Path) -> tuple[object, CompareView]:
    window = make_window(["--model", str(model)])
    assert window.chat.controller.backend_session.state is State.READY
    feature = window.feature(CompareFeature)
    assert feature is not None
    feature.show()
    view = window.findChild(QWidget, "compareView")
    assert isinstance(view, CompareView)
    assert window.tabs.currentWidget() is view
    return window, view


def test_comparison_fills_charts_and_table(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(16)
    view.repeats_spin.setValue(1)
    seen_steps: list[int] = []
    assert view.run_comparison()
    # While it runs the chat cannot send (one engine, one thread).
    assert not window.chat.chat_view.send_button.isEnabled()
    assert view.job is not None
    view.job.sig_yielded.connect(
        lambda batch: seen_steps.append(sum(isinstance(i, StepFigures) for i in batch.items))
    )
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS):
        pass
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    assert sum(seen_steps) == 3 * 15  # every decode step of every loop arrived, in batches
    for loop in ("nocache", "naive", "iobinding"):
        assert view.latency_chart.lines[loop].count() == 15
        assert view.split_charts[loop].edges[1].count() == 15
        assert view.speed_chart.value(loop) > 0
        assert view.ttft_chart.value(loop) > 0
    assert view.result is not None and view.result["same_tokens"] is True
    table = view.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers == ["No cache", "Naive", "IO-Binding", RATIO_HEADER]
    assert float(table.item(2, 1).text()) > 0  # naive tokens/s
    assert float(table.item(2, 2).text()) > 0  # IO-Binding tokens/s
    # Each ratio names the two numbers it divides, the same the columns show.
    naive_ms, iob_ms = (table.item(0, c).text().split(" ")[0] for c in (1, 2))
    ratio = table.item(0, 3).text()
    assert ratio.startswith(f"Naive {naive_ms} / IO-Binding {iob_ms} = ")
    shown = float(ratio.split("= ")[1].split("x")[0])
    assert abs(shown - float(naive_ms) / float(iob_ms)) < 0.01
    speed = table.item(2, 3).text()
    assert speed.startswith(
        f"IO-Binding {table.item(2, 2).text()} / Naive {table.item(2, 1).text()}"
    )
    # Every ratio carries its runs' spread and the summary's verdict (issue 47: a bare mean
    # ratio stood one line after "no measurable difference").
    verdicts = (", IO-Binding faster (", ", IO-Binding slower (", ", within the spread (")
    for row in (0, 1, 2):
        cell = table.item(row, 3).text()
        assert any(v in cell for v in verdicts), cell
    assert table.item(table.rowCount() - 2, 3).text() == "yes"
    # The last row: the weight bytes a decode step reads, the same folder for every loop.
    weights = view.result["weight_bytes_per_step"]
    assert weights > 0
    for column in (0, 1, 2):
        assert table.item(table.rowCount() - 1, column).text() == fmt_bytes(weights)
    assert view.status.text().startswith("Done: No cache, Naive, IO-Binding on cpu")
    # Every sentence is made from these runs: the per-token medians are the table's.
    text = view.explanation.text()
    for column, label in enumerate(("No cache", "Naive", "IO-Binding")):
        median, spread = table.item(0, column).text().split(" ", 1)  # "39.9 (1.4–51.3)"
        assert f"{label} {median} ms {spread}" in text
    assert "Caching, the whole 16-token answer" in text
    assert f"Naive's {naive_ms} / IO-Binding's {iob_ms} ms per token" in text
    assert ratio[ratio.index(" = ") :] + "." in text  # the cell's verdict is the sentence's
    title = view.caching_chart.title()
    assert title.startswith("16 tokens, caching: Naive ") and ", IO-Binding " in title
    assert view.caching_chart.value("nocache") > 0
    assert window.chat.chat_view.send_button.isEnabled()
    # The charts take the whole width; the chat's panels return with the chat tab.
    assert not window.side_scroll.isVisible()
    window.tabs.setCurrentIndex(0)
    assert window.side_scroll.isVisible()


def test_sweep_and_export(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path, tmp_path: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(8)
    view.sweep_edit.setText("32, 64")
    assert view.run_sweep()
    assert view.job is not None
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS):
        pass
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    assert len(view.sweep_points) == 2
    assert view.sweep_chart.lines["naive"].count() == 2
    assert view.export_button.isEnabled()  # a sweep alone can be exported
    view.choose_export_folder = lambda: str(tmp_path / "export")
    view.export_button.click()
    report = tmp_path / "export" / "report.md"
    assert report.is_file()
    data = json.loads((tmp_path / "export" / "result.json").read_text())
    assert [p["context_tokens"] for p in data["sweep"]] == [32, 64]
    assert (tmp_path / "export" / "sweep.png").stat().st_size > 5000
    assert (tmp_path / "export" / "transfer.png").stat().st_size > 5000
    assert "0 on the CPU" in view.transfer_chart.title()  # both lines at zero, and why
    summary_csv = (tmp_path / "export" / "summary.csv").read_text()
    assert "h2d_bytes_per_token" in summary_csv.splitlines()[0]
    assert "Exported" in view.status.text()


def test_repeats_give_medians_ranges_and_where_the_time_goes(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(8)
    view.repeats_spin.setValue(3)
    assert view.run_comparison()
    assert view.job is not None
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        pass
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    result = blocker.args[0].result
    assert result["repeats"] == 3 and result["naive"]["repeats"] == 3
    low, high = result["naive"]["spread"]["tokens_per_s"]
    assert low <= result["naive"]["tokens_per_s"] <= high
    assert "–" in view.table.item(0, 0).text()  # the median and the range of the runs
    assert view.table.item(7, 0).text() == "0 B"  # host->device on the CPU
    assert view.speed_chart.spreads["naive"].count() == 6  # an "I" drawn beside the bar
    explanation = view.explanation.text()
    assert "CPU" in explanation and "0 bytes per token" in explanation


def test_sweep_on_a_device_with_its_own_memory_draws_the_bytes(
    qtbot, make_window: WindowFactory, varied_model_dir: Path, emulated_device: object
) -> None:
    _window, view = open_compare(make_window, varied_model_dir)
    view.tokens_spin.setValue(6)
    view.repeats_spin.setValue(1)
    view.sweep_edit.setText("32, 64")
    assert view.run_sweep()
    assert view.job is not None
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS):
        pass
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    naive = view.transfer_chart.lines["naive"]
    iob = view.transfer_chart.lines["iobinding"]
    assert naive.count() == iob.count() == 2
    assert naive.at(1).y() > naive.at(0).y() > 10 * iob.at(0).y() > 0  # grows with the context
    assert "0 on the CPU" not in view.transfer_chart.title()


def test_stop_ends_the_comparison(qtbot, make_window: WindowFactory, tiny_model_dir: Path) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(400)
    assert view.run_comparison()
    assert view.job is not None
    with qtbot.waitSignal(view.job.sig_aborted, timeout=RUN_TIMEOUT_MS) as blocker:
        # The flag is read between steps: the first loop ends after its first token.
        view.stop_button.click()
    assert blocker.args[0] == "Comparison stopped."
    qtbot.waitUntil(lambda: not view.running, timeout=5000)
    assert view.status.text() == "Comparison stopped."
    assert view.run_button.isEnabled()


def test_bad_sweep_contexts_are_explained(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.sweep_edit.setText("128, lots")
    assert not view.run_sweep()
    assert "'lots' is not a context length" in view.status.text()
    assert not view.running


def test_parse_contexts() -> None:
    assert parse_contexts(" 512,128 ,128") == (128, 512)
    with pytest.raises(ValueError, match="at least one"):
        parse_contexts(" , ")
    with pytest.raises(ValueError, match="'8'"):
        parse_contexts("8")


@pytest.mark.parametrize(
    "options",
    [
        {"attention": "standard"},
        {"kv_layout": "static", "attention": "standard", "context_length": 128},
    ],
    ids=["concat", "static-window"],
)
def test_comparison_runs_on_every_layout(
    qtbot, make_window: WindowFactory, tiny_gguf: Path, tmp_path: Path, options: dict
) -> None:
    from chatapp.convert.converter import ConvertOptions, convert_gguf

    folder = convert_gguf(tiny_gguf, tmp_path / "model", ConvertOptions(**options))
    _window, view = open_compare(make_window, folder)
    view.tokens_spin.setValue(12)
    assert view.run_comparison()
    assert view.job is not None
    with qtbot.waitSignal(view.job.sig_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        pass
    result = blocker.args[0].result
    assert result["layout"] == (
        "concat" if "attention" in options and len(options) == 1 else "static-window"
    )
    assert result["same_tokens"] is True
    assert result["naive"]["tokens_per_s"] > 0 and result["iobinding"]["tokens_per_s"] > 0


def test_without_no_cache_two_loops_run_and_a_sweep_redoes_the_sentences(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.nocache_check.setChecked(False)
    view.tokens_spin.setValue(8)
    view.repeats_spin.setValue(1)
    assert view.run_comparison()
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    assert view.result is not None and "nocache" not in view.result
    assert view.table.columnCount() == 3  # Naive, IO-Binding, the ratio
    assert view.latency_chart.lines["nocache"].count() == 0
    before = view.explanation.text()
    assert "Caching" not in before and "IO-Binding" in before
    view.sweep_edit.setText("32, 64, 96")
    assert view.run_sweep()
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    after = view.explanation.text()
    assert after.startswith(before.split("\n")[0])  # the comparison's sentences stay
    assert "IO-Binding vs Naive by context" in after  # and the sweep's are added
    assert "at 32" not in before


def test_export_starts_where_the_chat_export_went(
    make_window: WindowFactory, tiny_model_dir: Path, tmp_path: Path
) -> None:
    window, view = open_compare(make_window, tiny_model_dir)
    window.settings.remove(EXPORT_FOLDER_KEY)
    window.settings.remove("history/export_dir")
    assert view.export_start_folder() == str(Path.home())
    remember_export_folder(window.settings, tmp_path / "chat.md")  # a chat export's file
    assert view.export_start_folder() == str(tmp_path)
    window.settings.setValue(EXPORT_FOLDER_KEY, str(tmp_path / "gone"))
    assert view.export_start_folder() == str(Path.home())


def test_titles_and_the_table_fit_at_800_by_500(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    from PySide6.QtCharts import QChartView
    from PySide6.QtGui import QFontMetrics

    window, view = open_compare(make_window, tiny_model_dir)
    window.resize(800, 500)
    view.transfer_chart.set_shared_memory(True)  # the longest title it can have
    # the longest the caching chart can have
    view.caching_chart.setTitle("2048 tokens, caching: Naive no gain, IO-Binding no gain")
    qtbot.waitUntil(lambda: view.width() <= 800)
    for chart_view in view.findChildren(QChartView):
        chart = chart_view.chart()
        width = QFontMetrics(chart.titleFont()).horizontalAdvance(chart.title())
        assert width <= chart_view.width() - 16, (chart.title(), chart_view.width())
    table = view.table
    rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
    assert table.height() >= rows + table.horizontalHeader().height()  # no box inside the box
    # The ratio column stays readable (the table scrolls sideways), not ~25 px of one letter
    # a line (issue 47).
    ratio = table.ratio_column
    assert ratio is not None and table.columnWidth(ratio) >= RATIO_MIN_WIDTH


def test_the_caching_button_runs_the_three_loops_over_200_tokens(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.nocache_check.setChecked(False)
    view.caching_button.click()
    assert view.nocache_check.isChecked() and view.tokens_spin.value() == 200
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    result = view.result
    assert result is not None and result["max_new_tokens"] == 200 and result["repeats"] == 1
    assert set(result["caching_speedup"]) == {"naive", "iobinding"}
    assert view.caching_chart.title().startswith("200 tokens, caching: Naive ")
    assert view.latency_chart.lines["nocache"].count() == 199


def test_the_view_says_in_words_where_no_cache_runs_in_a_sweep(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    """Issue 47: the reason was only in a tooltip. Shown under the sweep's row as the contexts
    and the No cache box change, and only while No cache is left out somewhere."""
    _window, view = open_compare(make_window, tiny_model_dir)
    note = view.sweep_note
    view.nocache_check.setChecked(True)
    view.sweep_edit.setText("128, 512, 1024")
    assert not note.isHidden() and note.text().startswith("No cache runs at 128 only: past ")
    view.sweep_edit.setText("64, 128")  # No cache runs at both
    assert note.isHidden()
    view.sweep_edit.setText("512")
    assert not note.isHidden() and "at none of these contexts" in note.text()
    view.nocache_check.setChecked(False)  # not asked for: nothing to say
    assert note.isHidden()
