"""Chart scales that one spike does not flatten, and a hint instead of empty axes."""

from __future__ import annotations

from PySide6.QtCharts import QChart, QLineSeries, QValueAxis
from PySide6.QtCore import QPointF, Qt

from chatapp.gui.common.chart_style import EmptyHint, mark_outliers, outlier_series, robust_top
from chatapp.gui.common.theme import colors


def test_robust_top_ignores_a_spike() -> None:
    steady = [10.0 + (i % 3) for i in range(60)]
    assert robust_top(steady) < 14
    assert robust_top([*steady, 900.0]) < 16  # one spike does not rescale
    assert robust_top([5.0, 900.0]) > 900  # too few points to call one an outlier
    assert robust_top([], 10.0) == 10.0
    assert robust_top([float("nan"), 3.0], 1.0) >= 3.0


def test_points_above_the_scale_are_marked_on_the_top_edge(qapp) -> None:
    line = QLineSeries()
    line.append([QPointF(i, v) for i, v in enumerate([1.0, 2.0, 50.0, 3.0, 70.0])])
    marks = outlier_series(colors().loops["naive"])
    assert mark_outliers(line, marks, 10.0) == 2
    assert [(p.x(), p.y()) for p in marks.points()] == [(2.0, 10.0), (4.0, 10.0)]


def test_empty_hint_hides_the_axes(qapp) -> None:
    chart = QChart()
    series = QLineSeries()
    chart.addSeries(series)
    x, y = QValueAxis(), QValueAxis()
    chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
    chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
    hint = EmptyHint(chart, "Nothing yet", (x, y))
    assert hint.item.isVisible() and not x.isVisible() and not y.isVisible()
    assert hint.item.text() == "Nothing yet"
    hint.set_empty(False)
    assert not hint.item.isVisible() and x.isVisible() and y.isVisible()
