"""What every chart shares: colours from the theme, a scale that one spike does not flatten
(points above it are marked at the top edge), and a hint instead of empty axes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from PySide6.QtCharts import QAbstractAxis, QChart, QScatterSeries, QXYSeries
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QBrush, QColor, QPen
from PySide6.QtWidgets import QGraphicsSimpleTextItem

from chatapp.gui.common.theme import ThemeColors

# With this many points or more, the scale ignores the highest 5 %.
ROBUST_MIN_POINTS = 20
PERCENTILE = 95.0
HEADROOM = 1.2


def robust_top(values: Sequence[float] | np.ndarray, minimum: float = 0.0) -> float:
    """Where a value axis should end: a little above the largest value, or, when a few
    values stand far above the rest, at the 95th percentile x 1.2 (they are drawn as marks
    at the top edge instead of squashing every other point to the floor)."""
    data = np.asarray(values, dtype=np.float64)
    data = data[np.isfinite(data)]
    if data.size == 0:
        return minimum
    top = float(data.max()) * 1.1
    if data.size >= ROBUST_MIN_POINTS:
        top = min(top, float(np.percentile(data, PERCENTILE)) * HEADROOM)
    return max(minimum, top)


def style_chart(chart: QChart, c: ThemeColors) -> None:
    """Background, title, legend and axes in the theme's colours."""
    chart.setBackgroundBrush(QBrush(c.base))
    chart.setBackgroundPen(QPen(c.chart_grid))
    chart.setPlotAreaBackgroundVisible(False)
    chart.setTitleBrush(QBrush(c.base_text))
    chart.legend().setLabelColor(c.base_text)
    for axis in chart.axes():
        style_axis(axis, c)


def style_axis(axis: QAbstractAxis, c: ThemeColors) -> None:
    axis.setLabelsColor(c.base_text)
    axis.setTitleBrush(QBrush(c.base_text))
    axis.setLinePenColor(c.chart_line)
    axis.setGridLineColor(c.chart_grid)
    axis.setMinorGridLineColor(c.chart_grid)


def outlier_series(color: QColor, name: str = "above the scale") -> QScatterSeries:
    """Marks for points above the axis: a triangle on the top edge, in the line's colour."""
    series = QScatterSeries()
    series.setName(name)
    series.setMarkerShape(QScatterSeries.MarkerShape.MarkerShapeTriangle)
    series.setMarkerSize(9.0)
    series.setColor(color)
    series.setBorderColor(color)
    return series


def mark_outliers(source: QXYSeries, marks: QScatterSeries, top: float) -> int:
    """Put a mark at (x, top) for each point of `source` above `top`; returns how many."""
    above = [QPointF(p.x(), top) for p in source.points() if p.y() > top]
    marks.replace(above)
    return len(above)


class EmptyHint:
    """A line of text in the middle of an empty chart; its axes are hidden meanwhile (empty
    axes showed ticks like "0 0 0 0 1")."""

    def __init__(self, chart: QChart, text: str, axes: Iterable[QAbstractAxis]) -> None:
        self.chart = chart
        self.axes = list(axes)
        self.item = QGraphicsSimpleTextItem(text, chart)
        self.empty = True
        chart.plotAreaChanged.connect(self._place)
        self.set_empty(True)

    def set_text(self, text: str) -> None:
        self.item.setText(text)
        self._place(self.chart.plotArea())

    def set_empty(self, empty: bool) -> None:
        self.empty = empty
        self.item.setVisible(empty)
        for axis in self.axes:
            axis.setVisible(not empty)
        self._place(self.chart.plotArea())

    def style(self, c: ThemeColors) -> None:
        self.item.setBrush(QBrush(c.muted))

    def _place(self, area: QRectF) -> None:
        box = self.item.boundingRect()
        self.item.setPos(area.center().x() - box.width() / 2, area.center().y() - box.height() / 2)
