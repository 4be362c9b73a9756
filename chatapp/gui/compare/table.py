"""The comparison's summary table: one column per loop run, a ratio column, every row sized to
show (no scroll box of its own: the view scrolls)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractScrollArea, QHeaderView, QTableWidget, QTableWidgetItem

from chatapp.engine.modes import Mode
from chatapp.session.compare_text import per_token, speed_ratio, spread_of
from chatapp.units import fmt_bytes

PER_TOKEN_ROW = "time per token (ms), first run"
ANSWER_ROW = "whole answer (s)"
TABLE_ROWS = (
    ("tokens/s", "tokens_per_s", 1.0, "{:.1f}"),
    ("time to first token (ms)", "ttft_s", 1000.0, "{:.0f}"),
    ("p50 latency (ms)", "latency_p50_s", 1000.0, "{:.1f}"),
    ("p95 latency (ms)", "latency_p95_s", 1000.0, "{:.1f}"),
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
RATIO_HEADER = "IO-Binding / Naive"


def table_text(summary: dict[str, Any], key: str, scale: float, fmt: str) -> str:
    """A summary figure as the table shows it: the median, and the repeats' range if several."""
    if fmt == "bytes":
        return fmt_bytes(summary["transfer"][key])
    text = fmt.format(summary[key] * scale)
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
        self.fit_height()

    @property
    def ratio_column(self) -> int | None:
        return len(self.loops) if self.columnCount() > len(self.loops) else None

    def fill_loop(self, loop: Mode, summary: dict[str, Any]) -> None:
        column = self.loops.index(loop)
        self.cell(0, column, per_token(summary).text(""))
        answers = summary.get("answer_s_all") or [summary.get("answer_s", 0.0)]
        self.cell(1, column, spread_of(answers).text("", digits=2))
        for row, (_label, key, scale, fmt) in enumerate(TABLE_ROWS, start=2):
            self.cell(row, column, table_text(summary, key, scale, fmt))

    def fill_result(self, result: dict[str, Any]) -> None:
        same = len(TABLE_ROWS) + 2
        ratio = self.ratio_column
        if ratio is not None:
            by_median = speed_ratio(result[Mode.IOBINDING], result[Mode.NAIVE])
            verdict = (
                "no measurable difference"
                if not by_median.measurable
                else "faster"
                if by_median.value > 1
                else "slower"
            )
            self.cell(0, ratio, f"{by_median.text()}: {verdict}")
            if "speedup_tokens_per_s" in result:
                self.cell(2, ratio, f"{result['speedup_tokens_per_s']:.2f}x (means)")
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

    def fit_height(self) -> None:
        self.resizeRowsToContents()
        rows = sum(self.rowHeight(r) for r in range(self.rowCount()))
        scrollbar = self.horizontalScrollBar().sizeHint().height()
        height = self.horizontalHeader().height() + rows + 2 * self.frameWidth() + scrollbar
        self.setMinimumHeight(height)
        self.setMaximumHeight(height)
