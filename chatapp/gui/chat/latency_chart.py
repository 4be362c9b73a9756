"""The latency chart of the live panel: per-token latency of the answer being written (ms),
one point per decode step, with slow outliers marked at the top edge.

Tokens are numbered as people count them, from 1; token 1 has no point: its time is the TTFT
(it includes reading the prompt), shown beside the chart. An answer of 7 tokens has 6 points,
at 2 to 7, each drawn as a dot while there are few enough to count."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QFont, QPainter, QPen
from PySide6.QtWidgets import QWidget

from chatapp.gui.common.chart_style import (
    EmptyHint,
    mark_outliers,
    outlier_series,
    robust_top,
    style_chart,
)
from chatapp.gui.common.theme import ThemeColors, on_theme


class LatencyChart(QChartView):
    """Per-token latency of the answer being written (ms), one point per decode step."""

    DOTS_UP_TO = 32  # points drawn as dots up to this many: a short answer's can be counted

    def __init__(self, parent: QWidget | None = None) -> None:
        chart = QChart()
        super().__init__(chart, parent)
        self.setObjectName("latencyChart")
        self.series = QLineSeries()
        self.series.setName("latency")
        chart.addSeries(self.series)
        chart.legend().hide()
        chart.setMargins(QMargins(0, 0, 0, 0))
        # No padding inside the chart: in 90 px its axes keep their numbers and titles, and
        # the side panel fits a 1366x768 screen after an answer (at 104 px it scrolled by 1 px).
        chart.layout().setContentsMargins(0, 0, 0, 0)
        chart.setBackgroundRoundness(0)
        small = QFont(self.font())
        small.setPointSizeF(max(6.5, self.font().pointSizeF() - 2))
        self.x_axis = QValueAxis()
        self.x_axis.setLabelFormat("%d")
        self.x_axis.setTitleText("token")
        self.y_axis = QValueAxis()
        self.y_axis.setLabelFormat("%.0f")
        self.y_axis.setTitleText("ms")
        for axis, side in (
            (self.x_axis, Qt.AlignmentFlag.AlignBottom),
            (self.y_axis, Qt.AlignmentFlag.AlignLeft),
        ):
            axis.setLabelsFont(small)
            axis.setTitleFont(small)
            axis.setTickCount(3)
            chart.addAxis(axis, side)
            self.series.attachAxis(axis)
        self.outliers = outlier_series(self.series.color())
        chart.addSeries(self.outliers)
        self.outliers.attachAxis(self.x_axis)
        self.outliers.attachAxis(self.y_axis)
        self.hint = EmptyHint(chart, "Latencies appear\nas an answer is written", chart.axes())
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(90)
        on_theme(self, self._style)
        self.clear()

    def _style(self, c: ThemeColors) -> None:
        style_chart(self.chart(), c)
        line = c.loops["iobinding"]
        self.series.setPen(QPen(line, 1.6))
        self.outliers.setColor(line)
        self.outliers.setBorderColor(line)
        self.hint.style(c)

    def clear(self) -> None:
        self.series.clear()
        self.outliers.clear()
        self._values_ms: list[float] = []
        self.x_axis.setRange(1, 16)
        self.y_axis.setRange(0, 50)
        self.hint.set_empty(True)

    def add(self, first_index: int, latencies_s: Sequence[float]) -> None:
        points = [
            QPointF(first_index + i + 1, s * 1000.0)  # token numbers from 1
            for i, s in enumerate(latencies_s)
            if first_index + i > 0  # the first token's latency is the TTFT, shown on its own
        ]
        if not points:
            return
        self.series.append(points)
        self.series.setPointsVisible(self.series.count() <= self.DOTS_UP_TO)
        self._values_ms += [p.y() for p in points]
        last = points[-1].x()
        self.x_axis.setRange(1, max(16.0, last))
        # One slow token (a page fault, another program) must not flatten the line: the scale
        # ignores the top 5 % and marks what is above it at the top edge.
        top = robust_top(self._values_ms, 10.0)
        self.y_axis.setRange(0, top)
        # Round tick labels (0, 20, 40 rather than 0, 23, 46).
        self.x_axis.applyNiceNumbers()
        self.y_axis.applyNiceNumbers()
        mark_outliers(self.series, self.outliers, self.y_axis.max())
        self.hint.set_empty(False)

    @property
    def point_count(self) -> int:
        return self.series.count()
