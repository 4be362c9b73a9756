"""The comparison charts keep QChart's own API: `series()` still lists what they draw."""

from __future__ import annotations

from PySide6.QtCharts import QBarSeries, QLineSeries

from chatapp.gui.compare.charts import LOOPS, LatencyLinesChart, PairBarChart, SweepChart


def test_line_charts_keep_qchart_series(qapp) -> None:
    for chart in (LatencyLinesChart(), SweepChart()):
        listed = chart.series()  # a dict attribute of that name used to hide this method
        lines = [
            s for s in listed if isinstance(s, QLineSeries) and s not in chart.outliers.values()
        ]
        assert set(lines) == set(chart.lines.values()) and len(lines) == len(LOOPS)
        chart.append("naive", 1.0, 2.0)
        assert chart.lines["naive"].count() == 1


def test_bar_charts_keep_qchart_series(qapp) -> None:
    chart = PairBarChart("Decode speed", "tokens/s")
    listed = chart.series()  # the bars, and the lines that draw the repeats' ranges
    assert chart.bars in listed and isinstance(chart.bars, QBarSeries)
    chart.set_value("iobinding", 12.34)
    assert chart.value("iobinding") == 12.3 and chart.value("naive") == 0.0
