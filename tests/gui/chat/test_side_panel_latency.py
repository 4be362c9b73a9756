"""The side panel's latency chart: a hint while empty, a scale one spike does not flatten."""

from __future__ import annotations

from chatapp.gui.chat.latency_chart import LatencyChart


def test_latency_chart_hint_and_outliers(qtbot) -> None:
    chart = LatencyChart()
    qtbot.addWidget(chart)
    assert chart.hint.item.isVisible() and not chart.y_axis.isVisible()
    chart.add(0, [0.5] + [0.010] * 40)  # the first token's is the TTFT: not drawn here
    assert chart.point_count == 40 and not chart.hint.item.isVisible()
    assert chart.series.at(0).x() == 2  # tokens numbered from 1
    assert not chart.series.pointsVisible()  # too many to count: a line
    assert chart.y_axis.max() <= 20
    chart.add(41, [1.2])  # a 1.2 s stall
    assert chart.y_axis.max() <= 20 and chart.outliers.count() == 1
    chart.clear()
    assert chart.point_count == 0 and chart.hint.item.isVisible()
