"""QtCharts of the loops side by side; filled live by the comparison view, or all at once
from a benchmark result by the headless report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from PySide6.QtCharts import (
    QAbstractBarSeries,
    QAreaSeries,
    QBarCategoryAxis,
    QBarSet,
    QChart,
    QLineSeries,
    QScatterSeries,
    QStackedBarSeries,
    QValueAxis,
)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QPainter, QPen

from chatapp.engine.bench.summary import decimals, loop_figures, per_token_ms
from chatapp.engine.modes import MODES, Mode
from chatapp.gui.common.chart_style import (
    EmptyHint,
    mark_outliers,
    outlier_series,
    robust_top,
    style_chart,
)
from chatapp.gui.common.theme import ThemeColors, colors

LOOPS = MODES
LOOP_LABELS: dict[str, str] = {m: m.label for m in MODES}
PART_LABELS = {"run": "run (onnxruntime)", "host": "host preparation", "sample": "sampling"}
RENDER_HINT = QPainter.RenderHint.Antialiasing
BAR_WIDTH = 0.5  # of a category: bar i covers i - 0.25 .. i + 0.25
SPREAD_OFFSET = BAR_WIDTH / 2 + 0.08  # the spread's "I" stands this far right of a bar's centre
RUN_HINT = "Run the loops to fill this chart"
SWEEP_HINT = "Run a context sweep to fill this chart"


def _setup(chart: QChart, title: str, legend: bool = True) -> None:
    chart.setTitle(title)
    chart.setMargins(QMargins(4, 4, 4, 4))
    chart.legend().setVisible(legend)
    chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
    chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)  # live data: no lag


def nice_step(top: float, ticks: int = 5) -> float:
    """A 1, 2 or 5 times a power of ten step giving about `ticks` intervals up to `top`."""
    raw = max(top, 1e-9) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _nice_range(axis: QValueAxis, top: float) -> None:
    """0 to just past `top` with round ticks (10, 20, ...), not 84.7 or a doubled range."""
    step = nice_step(top)
    # Interval before range: the other order briefly lays out thousands of ticks.
    axis.setTickType(QValueAxis.TickType.TicksDynamic)
    axis.setTickAnchor(0)
    axis.setTickInterval(step)
    axis.setRange(0, math.ceil(top / step) * step)


def _value_axes(chart: QChart, x_title: str, y_title: str) -> tuple[QValueAxis, QValueAxis]:
    x_axis, y_axis = QValueAxis(), QValueAxis()
    x_axis.setTitleText(x_title)
    x_axis.setLabelFormat("%d")
    y_axis.setLabelFormat("%g")
    y_axis.setTitleText(y_title)
    chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
    chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
    return x_axis, y_axis


class LoopLinesChart(QChart):
    """One line per loop on value axes, rescaled as points arrive."""

    def __init__(
        self,
        title: str,
        x_title: str,
        y_title: str,
        width: float,
        min_x: float,
        points: bool = False,
        hint: str = RUN_HINT,
    ) -> None:
        super().__init__()
        _setup(self, title)
        self.x_axis, self.y_axis = _value_axes(self, x_title, y_title)
        self._width = width
        # Not `self.series`: that would hide QChart.series(), which Qt's own code may call.
        self.lines: dict[str, QLineSeries] = {}
        self.outliers: dict[str, QScatterSeries] = {}
        for loop in LOOPS:
            series = QLineSeries()
            series.setName(LOOP_LABELS[loop])
            series.setPointsVisible(points)
            self.addSeries(series)
            series.attachAxis(self.x_axis)
            series.attachAxis(self.y_axis)
            self.lines[loop] = series
        for loop in LOOPS:  # above the lines, and out of the legend
            marks = outlier_series(series.color())
            self.addSeries(marks)
            marks.attachAxis(self.x_axis)
            marks.attachAxis(self.y_axis)
            self.legend().markers(marks)[0].setVisible(False)
            self.outliers[loop] = marks
        self.hint = EmptyHint(self, hint, (self.x_axis, self.y_axis))
        self._min_x = min_x
        self._max_x = min_x
        self._values: dict[str, list[float]] = {loop: [] for loop in LOOPS}
        self.apply_colors(colors())

    def apply_colors(self, c: ThemeColors) -> None:
        style_chart(self, c)
        for loop, series in self.lines.items():
            series.setPen(QPen(c.loops[loop], self._width))
            self.outliers[loop].setColor(c.loops[loop])
            self.outliers[loop].setBorderColor(c.loops[loop])
        self.hint.style(c)

    def clear(self) -> None:
        for series in (*self.lines.values(), *self.outliers.values()):
            series.clear()
        self._max_x = self._min_x
        self._values = {loop: [] for loop in LOOPS}
        self._rescale()
        self.hint.set_empty(True)

    def append(self, loop: str, x: float, y: float) -> None:
        self.lines[loop].append(x, y)
        self._max_x = max(self._max_x, x)
        self._values[loop].append(y)
        self._rescale()
        self.hint.set_empty(False)

    def _rescale(self) -> None:
        _nice_range(self.x_axis, self._max_x * 1.02)
        # A spike (another program, a page fault) must not flatten the lines: the scale ignores
        # each line's top 5 % and marks those points on the top edge. Per line, so that the
        # no-cache loop's steady climb is its own top, not the others' spikes.
        top = max(robust_top(values, 1.0) for values in self._values.values())
        _nice_range(self.y_axis, top * 1.05)
        for loop, series in self.lines.items():
            mark_outliers(series, self.outliers[loop], self.y_axis.max())


class LatencyLinesChart(LoopLinesChart):
    """Each token's cost along the answer, one line per loop: it grows without a cache (each
    step re-reads the whole sequence) and stays flat with one."""

    def __init__(self) -> None:
        super().__init__(
            "Time per token along the answer", "token of the answer", "ms", width=1.6, min_x=8.0
        )

    def set_series(self, loop: str, latencies_ms: Sequence[float]) -> None:
        for i, value in enumerate(latencies_ms, start=1):
            self.append(loop, i, value)


class StepSplitChart(QChart):
    """Per token, run / host preparation / sampling as stacked areas, for one loop."""

    PARTS = ("run", "host", "sample")

    def __init__(self, loop: str) -> None:
        super().__init__()
        _setup(self, f"{LOOP_LABELS[loop]}: where each token's time goes")
        self.x_axis, self.y_axis = _value_axes(self, "token", "ms")
        # Each part is the band between the running total before it and after it.
        self.edges = [QLineSeries() for _ in range(len(self.PARTS) + 1)]
        self.areas: dict[str, QAreaSeries] = {}
        for i, part in enumerate(self.PARTS):
            area = QAreaSeries(self.edges[i + 1], self.edges[i])
            area.setName(PART_LABELS[part])
            self.addSeries(area)
            area.attachAxis(self.x_axis)
            area.attachAxis(self.y_axis)
            self.areas[part] = area
        self.outliers = outlier_series(self.areas["run"].color())
        self.addSeries(self.outliers)
        self.outliers.attachAxis(self.x_axis)
        self.outliers.attachAxis(self.y_axis)
        self.legend().markers(self.outliers)[0].setVisible(False)
        self.hint = EmptyHint(self, RUN_HINT, (self.x_axis, self.y_axis))
        self._count, self._shared_top = 0, 1.0
        self._totals: list[float] = []
        self.apply_colors(colors())

    def apply_colors(self, c: ThemeColors) -> None:
        style_chart(self, c)
        for part, area in self.areas.items():
            area.setColor(c.parts[part])
            area.setBorderColor(c.parts[part])
        self.outliers.setColor(c.base_text)
        self.outliers.setBorderColor(c.base_text)
        self.hint.style(c)

    def clear(self) -> None:
        for edge in self.edges:
            edge.clear()
        self.outliers.clear()
        self._count, self._shared_top = 0, 1.0
        self._totals = []
        self._rescale()
        self.hint.set_empty(True)

    def append(self, run_ms: float, host_ms: float, sample_ms: float) -> None:
        self._count += 1
        total = 0.0
        self.edges[0].append(self._count, 0.0)
        for edge, value in zip(self.edges[1:], (run_ms, host_ms, sample_ms), strict=True):
            total += value
            edge.append(self._count, total)
        self._totals.append(total)
        self._rescale()
        self.hint.set_empty(False)

    @property
    def count(self) -> int:
        """Steps drawn."""
        return self._count

    @property
    def y_max(self) -> float:
        """Where this chart's own scale would end (spikes left out)."""
        return robust_top(self._totals, 1.0)

    def set_y_max(self, value: float) -> None:
        """Both loops' charts on one scale, so their heights compare."""
        self._shared_top = max(self._shared_top, value)
        self._rescale()

    def _rescale(self) -> None:
        _nice_range(self.x_axis, max(8.0, self._count))
        _nice_range(self.y_axis, max(self.y_max, self._shared_top) * 1.05)
        mark_outliers(self.edges[-1], self.outliers, self.y_axis.max())


class PairBarChart(QChart):
    """One figure (tokens/s, TTFT, the whole answer's time) per loop, side by side, each bar in
    its loop's colour: one stacked set per loop with a value only in its own category (a zero
    draws nothing, label included)."""

    def __init__(self, title: str, unit: str) -> None:
        super().__init__()
        _setup(self, title, legend=False)
        self.bars = QStackedBarSeries()
        self.bars.setBarWidth(BAR_WIDTH)
        self.bars.setLabelsVisible(True)
        self.bars.setLabelsFormat("@value")
        self.bars.setLabelsPosition(QAbstractBarSeries.LabelsPosition.LabelsInsideEnd)
        self.sets: dict[str, QBarSet] = {}
        for loop in LOOPS:
            bar = QBarSet(LOOP_LABELS[loop])
            bar.append([0.0] * len(LOOPS))
            self.bars.append(bar)
            self.sets[loop] = bar
        self.addSeries(self.bars)
        self.categories = QBarCategoryAxis()
        self.categories.append([LOOP_LABELS[loop] for loop in LOOPS])
        self.y_axis = QValueAxis()
        self.y_axis.setTitleText(unit)
        self.y_axis.setLabelFormat("%g")
        self.addAxis(self.categories, Qt.AlignmentFlag.AlignBottom)
        self.addAxis(self.y_axis, Qt.AlignmentFlag.AlignLeft)
        self.bars.attachAxis(self.categories)
        self.bars.attachAxis(self.y_axis)

        # The spread: an "I" per bar on a hidden axis where bar i sits at x = i, drawn beside
        # the bar's right edge so that it never covers the bar's label (issue 36).
        self.spread_axis = QValueAxis()
        self.spread_axis.setRange(-0.5, len(LOOPS) - 0.5)
        self.spread_axis.setVisible(False)
        self.addAxis(self.spread_axis, Qt.AlignmentFlag.AlignTop)
        self.spreads: dict[str, QLineSeries] = {}
        for loop in LOOPS:
            line = QLineSeries()
            self.addSeries(line)
            line.attachAxis(self.spread_axis)
            line.attachAxis(self.y_axis)
            self.spreads[loop] = line
        self._high: dict[str, float] = dict.fromkeys(LOOPS, 0.0)
        self.hint = EmptyHint(self, RUN_HINT, (self.categories, self.y_axis))
        self.apply_colors(colors())

    def apply_colors(self, c: ThemeColors) -> None:
        style_chart(self, c)
        self.spread_axis.setVisible(False)
        for loop, bar in self.sets.items():
            bar.setColor(c.loops[loop])
            bar.setBorderColor(c.loops[loop])
            bar.setLabelColor(c.base)  # inside the bar: the loop colours contrast with it
        for line in self.spreads.values():
            line.setPen(QPen(c.base_text, 1.6))
        self.hint.style(c)

    def set_value(self, loop: str, value: float) -> None:
        # As the table and the sentences write it (1044.9, 37.9, 2.68, 0.402): a 0.04 s answer
        # is not drawn as nothing, and a label never reads 1040 beside a table's 1044.9.
        self.sets[loop].replace(LOOPS.index(loop), round(value, decimals(value)))
        self._rescale()

    def set_spread(self, loop: str, low: float, high: float) -> None:
        """Draw the range the repeats spanned (nothing for a single run), beside the bar."""
        x, cap = LOOPS.index(loop) + SPREAD_OFFSET, 0.05
        points = [(x - cap, low), (x + cap, low), (x, low), (x, high), (x - cap, high)]
        points.append((x + cap, high))
        self.spreads[loop].replace([QPointF(px, py) for px, py in points])
        self._high[loop] = high
        self._rescale()

    def clear_spread(self) -> None:
        for line in self.spreads.values():
            line.clear()
        self._high = dict.fromkeys(LOOPS, 0.0)

    def clear(self) -> None:
        self.clear_spread()
        for loop in LOOPS:
            self.set_value(loop, 0.0)

    def _rescale(self) -> None:
        values = [self.value(loop) for loop in LOOPS]
        top = max(values + list(self._high.values()))
        _nice_range(self.y_axis, max(1.0, top * 1.2))
        self.hint.set_empty(top <= 0)
        self.bars.setLabelsVisible(top > 0)

    def value(self, loop: str) -> float:
        return float(self.sets[loop].at(LOOPS.index(loop)))


class SweepChart(LoopLinesChart):
    """The loops' time per token (the median, as the sentences say) against the context."""

    def __init__(self) -> None:
        super().__init__(
            "Time per token by context",
            "tokens in the context",
            "ms (median)",
            width=2.0,
            min_x=128.0,
            points=True,
            hint=SWEEP_HINT,
        )

    def add_point(self, loop: str, context_tokens: int, ms_per_token: float) -> None:
        self.append(loop, context_tokens, ms_per_token)


class TransferChart(LoopLinesChart):
    """Bytes crossing host <-> device per decode token, against the context length."""

    TITLE = "Host↔device bytes per token"

    def __init__(self) -> None:
        super().__init__(
            self.TITLE,
            "tokens in the context",
            "MB per token",
            width=2.0,
            min_x=128.0,
            points=True,
            hint=SWEEP_HINT,
        )

    def add_point(self, loop: str, context_tokens: int, bytes_per_token: float) -> None:
        self.append(loop, context_tokens, bytes_per_token / 1e6)

    def set_shared_memory(self, shared: bool) -> None:
        """On the CPU both lines are zero: the title says why instead of leaving a puzzle."""
        self.setTitle(f"{self.TITLE}: 0 on the CPU" if shared else self.TITLE)


def show_loop_bars(
    loop: str,
    summary: dict[str, Any],
    per_token: PairBarChart,
    ttft: PairBarChart,
    answer: PairBarChart,
) -> None:
    """A loop's bars from its bench summary, as the view and the report draw them: the median
    time per token with the runs' spread, the time to first token and the whole answer (ranges
    only over several runs)."""
    figures = loop_figures(Mode(loop), summary).per_token_ms
    per_token.set_value(loop, figures.median)
    if figures.count >= 2:
        per_token.set_spread(loop, figures.low, figures.high)
    spread = summary.get("spread") or {}
    for chart, key, scale in ((answer, "answer_s", 1.0), (ttft, "ttft_s", 1000.0)):
        if key not in summary:
            continue
        chart.set_value(loop, summary[key] * scale)
        if summary.get("repeats", 1) > 1 and key in spread:
            low, high = spread[key]
            chart.set_spread(loop, low * scale, high * scale)


def add_sweep_point(sweep: SweepChart, transfer: TransferChart, point: dict[str, Any]) -> None:
    """One context of a sweep: each loop's median time per token and bytes moved per token."""
    context = point["prompt_tokens"]
    for loop in (m for m in LOOPS if m in point):
        summary = point[loop]
        sweep.add_point(loop, context, per_token_ms(summary).median)
        moved = summary["transfer"]
        transfer.add_point(
            loop, context, moved["h2d_bytes_per_token"] + moved["d2h_bytes_per_token"]
        )
