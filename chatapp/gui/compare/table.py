"""The comparison's summary table: one column per loop run, a ratio column that says what it
divides ("37.9 / 38.7 = 0.98x"), every row sized to show (no scroll box of its own: the view
scrolls). Its figures come from bench.summary, as the sentences' and the charts' do."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QAbstractScrollArea, QHeaderView, QTableWidget, QTableWidgetItem

from chatapp.engine.bench.sentences import ratio_cell
from chatapp.engine.bench.summary import decimals, loop_figures, summarize_comparison
from chatapp.engine.modes import Mode
from chatapp.units import fmt_bytes

# The one statistic every sentence, chart and ratio uses (bench.summary); p50 is the median.
PER_TOKEN_ROW = "time per token (ms): median of each run's median"
ANSWER_ROW = "whole answer (s)"
SPEED_ROW = "tokens/s (tokens ÷ decode time: a mean)"
TABLE_ROWS = (
    (SPEED_ROW, "tokens_per_s", 1.0, "fig"),
    ("time to first token (ms)", "ttft_s", 1000.0, "{:.0f}"),
    ("prompt tokens/s (prompt ÷ time to first token)", "prompt_tokens_per_s", 1.0, "{:.0f}"),
    ("p95 time per token (ms)", "latency_p95_s", 1000.0, "{:.1f}"),
    ("host preparation share", "host_prep_share", 100.0, "{:.1f}%"),
    ("host→device per token", "h2d_bytes_per_token", 0.0, "bytes"),
    ("device→host per token", "d2h_bytes_per_token", 0.0, "bytes"),
)
# Bytes one decode step reads from the model's weights: why a model is as fast as it is.
WEIGHTS_ROW_LABEL = "weights read per token"
ROW_LABELS = [
    PER_TOKEN_ROW,
    ANSWER_ROW,
    *[r[0] for r in TABLE_ROWS],
    "same tokens",
    WEIGHTS_ROW_LABEL,
]
RATIO_HEADER = "IO-Binding vs Naive (above 1: IO-Binding faster)"
# The ratio column never narrower than this: on an 800-pixel window the last section's rest
# was ~25 px, a ratio and its verdict one letter a line. The table scrolls sideways instead.
RATIO_MIN_WIDTH = 300


def table_text(summary: dict[str, Any], key: str, scale: float, fmt: str) -> str:
    """A summary figure as the table shows it: the median, and the repeats' range if several."""
    if fmt == "bytes":
        return fmt_bytes(summary["transfer"][key])
    if key not in summary:  # a result saved before the figure existed
        return "n/a"
    value = summary[key] * scale
    if fmt == "fig":  # as the ratio column and the sentences write it
        fmt = f"{{:.{decimals(value)}f}}"
    text = fmt.format(value)
    low, high = (summary.get("spread") or {}).get(key, (None, None))
    if low is not None and summary.get("repeats", 1) > 1:
        text += f" ({fmt.format(low * scale)}–{fmt.format(high * scale)})"
    return text


class SummaryTable(QTableWidget):
    def __init__(self, parent: Any = None) -> None:
        super().__init__(len(ROW_LABELS), 1, parent)
        self.setObjectName("compareTable")
        self.setVerticalHeaderLabels(ROW_LABELS)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        # Every row shows: the view's scroll area scrolls, not a box inside it.
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizeAdjustPolicy(QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents)
        self.loops: list[Mode] = []
        self.set_loops([Mode.NAIVE, Mode.IOBINDING])

    def set_loops(self, loops: list[Mode]) -> None:
        """Empty columns for these loops (and the ratio when both cached loops run)."""
        self.loops = list(loops)
        headers = [m.label for m in loops]
        if Mode.NAIVE in loops and Mode.IOBINDING in loops:
            headers.append(RATIO_HEADER)
        self.clearContents()
        self.setColumnCount(len(headers))
        self.setHorizontalHeaderLabels(headers)
        if self.ratio_column is not None:  # its width is the rest, or RATIO_MIN_WIDTH
            self.horizontalHeader().setSectionResizeMode(
                self.ratio_column, QHeaderView.ResizeMode.Interactive
            )
        self.fit_height()

    @property
    def ratio_column(self) -> int | None:
        return len(self.loops) if self.columnCount() > len(self.loops) else None

    def fill_loop(self, loop: Mode, summary: dict[str, Any]) -> None:
        column = self.loops.index(loop)
        figures = loop_figures(loop, summary)
        self.cell(0, column, figures.per_token_ms.text(""))
        self.cell(1, column, figures.answer_s.text(""))
        for row, (_label, key, scale, fmt) in enumerate(TABLE_ROWS, start=2):
            self.cell(row, column, table_text(summary, key, scale, fmt))

    def fill_result(self, result: dict[str, Any]) -> None:
        same = len(TABLE_ROWS) + 2
        ratio = self.ratio_column
        summary = summarize_comparison(result)
        if ratio is not None and summary.io_vs_naive is not None:
            # Every ratio with its spread and the summary's verdict (bench/sentences.py).
            self.cell(0, ratio, ratio_cell(summary.io_vs_naive, "Naive ", "IO-Binding "))
            if summary.io_vs_naive_answer is not None:
                answers = summary.io_vs_naive_answer
                self.cell(1, ratio, ratio_cell(answers, "Naive ", "IO-Binding "))
            if summary.io_vs_naive_speed is not None:
                speed = summary.io_vs_naive_speed
                self.cell(2, ratio, ratio_cell(speed, "IO-Binding ", "Naive "))
        for column in range(len(self.loops)):
            self.cell(same, column, "yes" if result["same_tokens"] else "NO")
        # Every loop runs the same folder: a step reads the same weights (docs/engine.md).
        weights = result.get("weight_bytes_per_step")
        for column in range(len(self.loops)):
            self.cell(same + 1, column, fmt_bytes(weights) if weights else "n/a")
        if ratio is not None:
            self.cell(same, ratio, "yes" if result["same_tokens"] else "NO")
        self.fit_height()

    def cell(self, row: int, column: int, text: str) -> None:
        item = QTableWidgetItem(text)
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.setItem(row, column, item)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_height()

    def _keep_ratio_readable(self) -> None:
        ratio, header = self.ratio_column, self.horizontalHeader()
        if ratio is None:
            header.setStretchLastSection(True)
            return
        others = sum(self.columnWidth(c) for c in range(ratio))
        room = self.viewport().width() - others
        header.setStretchLastSection(room >= RATIO_MIN_WIDTH)
        if room < RATIO_MIN_WIDTH:
            self.setColumnWidth(ratio, RATIO_MIN_WIDTH)

    def fit_height(self) -> None:
        self._keep_ratio_readable()
        self.resizeRowsToContents()
        rows = sum(self.rowHeight(r) for r in range(self.rowCount()))
        scrollbar = self.horizontalScrollBar().sizeHint().height()
        height = self.horizontalHeader().height() + rows + 2 * self.frameWidth() + scrollbar
        self.setMinimumHeight(height)
        self.setMaximumHeight(height)
