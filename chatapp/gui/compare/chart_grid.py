"""The comparison view's figures: its sentences, charts and table in one scrolling grid, drawn
live from a running comparison or all at once from saved results (after a restart). Every
figure comes from bench.summary, as the sentences do."""

from __future__ import annotations

from typing import Any

from PySide6.QtCharts import QChartView
from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QResizeEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from chatapp.engine.bench.summary import step_ms
from chatapp.engine.modes import MODES, Mode
from chatapp.gui.common.theme import ThemeColors, on_theme
from chatapp.gui.compare.charts import (
    LOOPS,
    LatencyLinesChart,
    PairBarChart,
    StepSplitChart,
    SweepChart,
    TransferChart,
    add_sweep_point,
    show_loop_bars,
)
from chatapp.gui.compare.report import PER_TOKEN_TITLE, caching_title
from chatapp.gui.compare.table import SummaryTable
from chatapp.session.compare_jobs import StepFigures


class CompareCharts(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.explanation = QLabel("", self)
        self.explanation.setObjectName("compareExplanation")
        self.explanation.setTextFormat(Qt.TextFormat.PlainText)
        self.explanation.setWordWrap(True)
        self.explanation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.latency_chart = LatencyLinesChart()
        self.split_charts: dict[str, StepSplitChart] = {
            loop: StepSplitChart(loop) for loop in LOOPS
        }
        self.caching_chart = PairBarChart("Whole answer", "s")
        self.speed_chart = PairBarChart(PER_TOKEN_TITLE, "ms")
        self.ttft_chart = PairBarChart("Time to first token", "ms")
        self.sweep_chart = SweepChart()
        self.transfer_chart = TransferChart()
        self.table = SummaryTable(self)

        grid = QGridLayout(self)
        grid.addWidget(self.explanation, 0, 0, 1, 2)
        grid.addWidget(self._view(self.latency_chart), 1, 0, 1, 2)
        grid.addWidget(self._view(self.caching_chart), 2, 0)
        grid.addWidget(self._view(self.speed_chart), 2, 1)
        grid.addWidget(self._view(self.ttft_chart), 3, 0)
        grid.addWidget(self._view(self.split_charts[Mode.NOCACHE]), 3, 1)
        grid.addWidget(self._view(self.split_charts[Mode.NAIVE]), 4, 0)
        grid.addWidget(self._view(self.split_charts[Mode.IOBINDING]), 4, 1)
        grid.addWidget(self._view(self.sweep_chart), 5, 0)
        grid.addWidget(self._view(self.transfer_chart), 5, 1)
        grid.addWidget(self.table, 6, 0, 1, 2)
        for row in range(1, 6):
            grid.setRowStretch(row, 1)
        on_theme(self, self._on_theme)

    def _view(self, chart: Any) -> QChartView:
        view = QChartView(chart, self)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumSize(260, 250)  # below this the axis labels no longer fit
        return view

    def _on_theme(self, c: ThemeColors) -> None:
        charts: tuple[Any, ...] = (
            self.latency_chart,
            *self.split_charts.values(),
            self.caching_chart,
            self.speed_chart,
            self.ttft_chart,
            self.sweep_chart,
            self.transfer_chart,
        )
        for chart in charts:
            chart.apply_colors(c)

    # ---- a comparison -------------------------------------------------------------------
    def clear_comparison(self, modes: list[Mode]) -> None:
        self.latency_chart.clear()
        for chart in self.split_charts.values():
            chart.clear()
        for bars in (self.caching_chart, self.speed_chart, self.ttft_chart):
            bars.clear()
        self.caching_chart.setTitle("Whole answer")
        self.table.set_loops(modes)

    def append_step(self, step: StepFigures) -> None:
        self.latency_chart.append(step.loop, step.index, step.latency_ms)
        self.split_charts[step.loop].append(step.run_ms, step.host_ms, step.sample_ms)

    @property
    def steps_drawn(self) -> int:
        return sum(chart.count for chart in self.split_charts.values())

    def share_scale(self) -> None:
        """The cached loops on one scale, so their heights compare; no cache, whose steps grow
        far taller, on its own."""
        cached = [c for loop, c in self.split_charts.items() if Mode(loop).caches]
        tallest = max(c.y_max for c in cached)
        for chart in cached:
            chart.set_y_max(tallest)

    def show_loop(self, loop: str, summary: dict[str, Any]) -> None:
        """A loop's figures over its runs: the bars and its table column."""
        show_loop_bars(loop, summary, self.speed_chart, self.ttft_chart, self.caching_chart)
        self.table.fill_loop(Mode(loop), summary)

    def show_result(self, result: dict[str, Any]) -> None:
        self.table.fill_result(result)
        self.caching_chart.setTitle(caching_title(result))

    def draw_result(self, result: dict[str, Any]) -> None:
        """A whole comparison at once (saved results): what the live run drew, step by step."""
        modes = [m for m in MODES if m in result]
        self.clear_comparison(modes)
        for mode in modes:
            summary = result[mode]
            self.latency_chart.set_series(mode, step_ms(summary))
            for step in summary["first_run"].get("steps") or []:
                parts = (step["run_s"] * 1000, step["host_s"] * 1000, step["sample_s"] * 1000)
                self.split_charts[mode].append(*parts)
            self.show_loop(mode, summary)
        self.share_scale()
        self.show_result(result)

    # ---- a sweep ------------------------------------------------------------------------
    def clear_sweep(self) -> None:
        self.sweep_chart.clear()
        self.transfer_chart.clear()

    def add_sweep_point(self, point: dict[str, Any]) -> None:
        add_sweep_point(self.sweep_chart, self.transfer_chart, point)

    # ---- the sentences ------------------------------------------------------------------
    def set_explanation(self, text: str) -> None:
        self.explanation.setText(text)
        self._fit_explanation()

    def _fit_explanation(self) -> None:
        # A word-wrapped label in a scrolled grid gets one line's height unless told its own.
        label = self.explanation
        label.setMinimumHeight(label.heightForWidth(label.width()) if label.text() else 0)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_explanation()
