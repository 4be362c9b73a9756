"""The comparison charts keep QChart's own API: `series()` still lists what they draw."""

from __future__ import annotations

from PySide6.QtCharts import QLineSeries, QStackedBarSeries

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
    assert chart.bars in listed and isinstance(chart.bars, QStackedBarSeries)
    chart.set_value("iobinding", 12.34)
    assert chart.value("iobinding") == 12.3 and chart.value("naive") == 0.0
    # One set per loop, its value only in its own category: each bar in its loop's colour.
    assert [chart.sets[loop].at(LOOPS.index("iobinding")) for loop in LOOPS] == [0.0, 0.0, 12.3]


def test_a_steady_climb_is_not_drawn_as_outliers(qapp) -> None:
    chart = LatencyLinesChart()
    for i in range(1, 101):
        chart.append("nocache", float(i), 10.0 + 2.0 * i)  # no cache: every token costs more
        chart.append("iobinding", float(i), 12.0 + (i % 3))
    assert chart.y_axis.max() >= 210  # the whole climb fits
    assert chart.outliers["nocache"].count() == 0


def test_empty_charts_show_a_hint_not_axes(qapp) -> None:
    for chart in (LatencyLinesChart(), SweepChart(), PairBarChart("Decode speed", "tokens/s")):
        assert chart.hint.item.isVisible()
        assert not any(axis.isVisible() for axis in chart.hint.axes)  # no "0 0 0 0 1"
    bars = PairBarChart("Decode speed", "tokens/s")
    bars.set_value("naive", 10.0)
    assert not bars.hint.item.isVisible() and bars.y_axis.isVisible()
    sweep = SweepChart()
    sweep.add_point("naive", 128, 40.0)
    assert not sweep.hint.item.isVisible() and sweep.x_axis.isVisible()
    sweep.clear()
    assert sweep.hint.item.isVisible()


def test_one_spike_does_not_flatten_the_latency_lines(qapp) -> None:
    chart = LatencyLinesChart()
    for i in range(1, 60):
        chart.append("naive", float(i), 20.0 + (i % 4))
        chart.append("iobinding", float(i), 15.0 + (i % 3))
    chart.append("naive", 60.0, 900.0)  # another program took the CPU for a moment
    assert chart.y_axis.max() < 60  # the normal lines keep the height
    marks = chart.outliers["naive"].points()
    assert [(p.x(), p.y()) for p in marks] == [(60.0, chart.y_axis.max())]
    assert chart.outliers["iobinding"].count() == 0


def test_a_spread_is_drawn_beside_its_bar_not_over_its_label(qapp) -> None:
    chart = PairBarChart("Time per token (median)", "ms")
    chart.set_value("naive", 40.0)
    chart.set_spread("naive", 38.0, 45.0)
    xs = [p.x() for p in chart.spreads["naive"].points()]
    centre = LOOPS.index("naive")
    half_bar = chart.bars.barWidth() / 2
    # The label sits at the bar's centre, inside it; the "I" and its caps stay right of it.
    assert min(xs) > centre + half_bar
    assert max(xs) < centre + 0.5  # and inside its own category
    ys = sorted(p.y() for p in chart.spreads["naive"].points())
    assert (ys[0], ys[-1]) == (38.0, 45.0)
