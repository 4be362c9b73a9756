"""The comparison view: both loops on one prompt, drawn live, plus a context sweep and export.

Runs are jobs (chatapp/session/compare_jobs.py) on the window's JobRunner, the thread that
runs the chat's answers, with the window's one engine; this widget only draws what comes back.
The result has the shape of `chatapp bench --json`, so Export writes the same report as
`chatapp bench --report`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCharts import QChartView
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.bench.report import where_time_goes
from chatapp.engine.modes import Mode
from chatapp.gui.common.progress import ProgressWithTimeLeft
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, on_theme
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.gui.compare.charts import (
    LOOP_LABELS,
    LOOPS,
    LatencyLinesChart,
    PairBarChart,
    StepSplitChart,
    SweepChart,
    TransferChart,
)
from chatapp.session.arg_checks import MAX_CONTEXT, MAX_SWEEP_POINTS
from chatapp.session.compare_jobs import (
    CompareFinished,
    CompareRequest,
    LoopFinished,
    ProgressLine,
    StepFigures,
    SweepFinished,
    SweepPoint,
    SweepRequest,
    compare_job,
    sweep_job,
)
from chatapp.session.jobs import Job
from chatapp.session.model_jobs import EngineHost
from chatapp.units import fmt_bytes

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."
DEFAULT_SWEEP = "128,512,1024,2048"
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


def table_text(summary: dict[str, Any], key: str, scale: float, fmt: str) -> str:
    """A summary figure as the table shows it: the median, and the repeats' range if several."""
    if fmt == "bytes":
        return fmt_bytes(summary["transfer"][key])
    text = fmt.format(summary[key] * scale)
    low, high = (summary.get("spread") or {}).get(key, (None, None))
    if low is not None and summary.get("repeats", 1) > 1:
        text += f" ({fmt.format(low * scale)}–{fmt.format(high * scale)})"
    return text


MAX_PROMPT_CHARS = 4_000  # the prompt line: a benchmark question, not a document


def parse_contexts(text: str) -> tuple[int, ...]:
    """'128, 512,1024' -> (128, 512, 1024); ValueError with a readable message otherwise.
    At most MAX_SWEEP_POINTS lengths, each at most MAX_CONTEXT (the command line's limits):
    a pasted list of thousands, or a 5000-digit number, is refused before any work."""
    parts = [p for p in text.replace(" ", "").split(",") if p]
    if len(parts) > MAX_SWEEP_POINTS:
        raise ValueError(f"at most {MAX_SWEEP_POINTS} context lengths")
    values = []
    for part in parts:
        shown = part if len(part) <= 12 else part[:11] + "…"
        if not (part.isascii() and part.isdigit()) or len(part) > 9 or int(part) < 16:
            raise ValueError(f"'{shown}' is not a context length (a whole number of at least 16)")
        if int(part) > MAX_CONTEXT:
            raise ValueError(f"{part} is more than any model's context ({MAX_CONTEXT})")
        values.append(int(part))
    if not values:
        raise ValueError("give at least one context length, e.g. 128,512,1024")
    return tuple(sorted(set(values)))


class CompareView(QWidget):
    sig_running = Signal(bool)  # the main window keeps the chat from sending meanwhile

    def __init__(self, runner: JobRunner, host: EngineHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareView")
        self.runner = runner
        self.host = host
        self.job: JobHandle | None = None  # the comparison or sweep running (or last run)
        self.result: dict[str, Any] | None = None
        self.sweep_points: list[dict[str, Any]] = []
        self._running = False
        self._can_run = False
        self.system_prompt: Callable[[], str] = lambda: ""
        # Tests (and scripts) may replace this to skip the folder dialog.
        self.choose_export_folder: Callable[[], str] = self._ask_folder
        self._build()
        self._update_buttons()

    # ---- layout -------------------------------------------------------------------------
    def _build(self) -> None:
        self.prompt_edit = QLineEdit(DEFAULT_PROMPT, self)
        self.prompt_edit.setObjectName("comparePrompt")
        self.prompt_edit.setMaxLength(MAX_PROMPT_CHARS)
        self.tokens_spin = QSpinBox(self)
        self.tokens_spin.setObjectName("compareTokens")
        self.tokens_spin.setRange(4, 2048)
        self.tokens_spin.setValue(64)
        self.tokens_spin.setToolTip(
            "Tokens each loop generates (greedy; end-of-text ignored so "
            "both loops do the same work)"
        )
        self.repeats_spin = QSpinBox(self)
        self.repeats_spin.setObjectName("compareRepeats")
        self.repeats_spin.setRange(1, 9)
        self.repeats_spin.setValue(3)
        self.repeats_spin.setToolTip(
            "Runs of both loops: the figures are medians, the bars and the table show the range"
        )
        ignore_wheel_unless_focused(self.tokens_spin, self.repeats_spin)
        self.run_button = QPushButton("Run both loops", self)
        self.run_button.setObjectName("compareRunButton")
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setObjectName("compareStopButton")
        self.sweep_edit = QLineEdit(DEFAULT_SWEEP, self)
        self.sweep_edit.setObjectName("sweepContexts")
        self.sweep_edit.setToolTip("Context lengths (tokens of real text before the prompt)")
        self.sweep_button = QPushButton("Context sweep", self)
        self.sweep_button.setObjectName("sweepRunButton")
        self.export_button = QPushButton("Export…", self)
        self.export_button.setObjectName("compareExportButton")
        self.export_button.setToolTip("PNG charts, CSV and JSON of every number, Markdown report")
        self.status = QLabel("Compare the naive and IO-Binding loops on one prompt.", self)
        self.status.setTextFormat(Qt.TextFormat.PlainText)  # it quotes errors and input
        self.status.setObjectName("compareStatus")
        self.status.setWordWrap(True)
        self.progress = ProgressWithTimeLeft(self)
        self.progress.setObjectName("compareProgress")
        self._steps_per_run = 1  # decode steps of both loops in one run (the first streams)
        self._runs = 1
        self.explanation = QLabel("", self)
        self.explanation.setObjectName("compareExplanation")
        self.explanation.setWordWrap(True)

        self.latency_chart = LatencyLinesChart()
        self.split_charts: dict[str, StepSplitChart] = {
            loop: StepSplitChart(loop) for loop in LOOPS
        }
        self.speed_chart = PairBarChart("Decode speed", "tokens/s")
        self.ttft_chart = PairBarChart("Time to first token", "ms")
        self.sweep_chart = SweepChart()
        self.transfer_chart = TransferChart()
        self.table = QTableWidget(len(TABLE_ROWS) + 2, 3, self)
        self.table.setObjectName("compareTable")
        self.table.setHorizontalHeaderLabels(
            [LOOP_LABELS[Mode.NAIVE], LOOP_LABELS[Mode.IOBINDING], "ratio"]
        )
        self.table.setVerticalHeaderLabels(
            [r[0] for r in TABLE_ROWS] + ["same tokens", WEIGHTS_ROW_LABEL]
        )
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)

        controls = QHBoxLayout()
        controls.addWidget(QLabel("Prompt", self))
        controls.addWidget(self.prompt_edit, 1)
        controls.addWidget(QLabel("Tokens", self))
        controls.addWidget(self.tokens_spin)
        controls.addWidget(QLabel("Runs", self))
        controls.addWidget(self.repeats_spin)
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        sweep_row = QHBoxLayout()
        sweep_row.addWidget(QLabel("Contexts", self))
        sweep_row.addWidget(self.sweep_edit, 1)
        sweep_row.addWidget(self.sweep_button)
        sweep_row.addWidget(self.export_button)

        grid = QGridLayout()
        grid.addWidget(self._view(self.latency_chart), 0, 0, 1, 2)
        grid.addWidget(self._view(self.split_charts[Mode.NAIVE]), 1, 0)
        grid.addWidget(self._view(self.split_charts[Mode.IOBINDING]), 1, 1)
        grid.addWidget(self._view(self.speed_chart), 2, 0)
        grid.addWidget(self._view(self.ttft_chart), 2, 1)
        grid.addWidget(self._view(self.sweep_chart), 3, 0)
        grid.addWidget(self._view(self.transfer_chart), 3, 1)
        grid.addWidget(self.table, 4, 0, 1, 2)
        for row in range(5):
            grid.setRowStretch(row, 1)

        # The charts scroll: the view must not force a window taller than a laptop screen.
        charts = QWidget(self)
        charts.setLayout(grid)
        scroll = QScrollArea(self)
        scroll.setObjectName("compareScroll")
        scroll.setWidget(charts)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addLayout(sweep_row)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(self.explanation)
        layout.addWidget(scroll, 1)

        on_theme(self, self._on_theme)
        self.run_button.clicked.connect(self.run_comparison)
        self.stop_button.clicked.connect(self.stop)
        self.sweep_button.clicked.connect(self.run_sweep)
        self.export_button.clicked.connect(self._on_export_clicked)

    def _on_theme(self, c: ThemeColors) -> None:
        charts: tuple[Any, ...] = (
            self.latency_chart,
            *self.split_charts.values(),
            self.speed_chart,
            self.ttft_chart,
            self.sweep_chart,
            self.transfer_chart,
        )
        for chart in charts:
            chart.apply_colors(c)

    def _view(self, chart: Any) -> QChartView:
        view = QChartView(chart, self)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumSize(260, 250)  # below this the axis labels no longer fit
        return view

    # ---- state ----------------------------------------------------------------------------
    def set_available(self, available: bool) -> None:
        """Whether a model is loaded and idle (the chat is not answering)."""
        self._can_run = available
        self._update_buttons()

    def _set_running(self, running: bool) -> None:
        self._running = running
        if running:
            self.progress.start()
        else:
            self.progress.finish()
        self._update_buttons()
        emit(self.sig_running, running)

    def _update_buttons(self) -> None:
        idle = self._can_run and not self._running
        self.run_button.setEnabled(idle)
        self.sweep_button.setEnabled(idle)
        self.stop_button.setEnabled(self._running)
        self.export_button.setEnabled(not self._running and self.result is not None)
        tip = "" if idle else "Needs a loaded model and no answer or comparison in progress."
        self.run_button.setToolTip(tip)
        self.sweep_button.setToolTip(tip)

    @property
    def running(self) -> bool:
        return self._running

    # ---- actions --------------------------------------------------------------------------
    @Slot()
    def run_comparison(self) -> bool:
        if self._running or not self._can_run:
            return False
        prompt = self.prompt_edit.text().strip() or DEFAULT_PROMPT
        self.result = None
        self.latency_chart.clear()
        for chart in self.split_charts.values():
            chart.clear()
        for bars in (self.speed_chart, self.ttft_chart):
            bars.clear_spread()
            for loop in LOOPS:
                bars.set_value(loop, 0.0)
        self.table.clearContents()
        self.explanation.setText("")
        request = CompareRequest(
            prompt, self.system_prompt(), self.tokens_spin.value(), self.repeats_spin.value()
        )
        self._steps_per_run = max(1, 2 * (request.max_new_tokens - 1))
        self._runs = max(1, request.repeats)
        self._start(compare_job(self.host, request), self._on_finished)
        self.status.setText("Starting…")
        return True

    @Slot()
    def run_sweep(self) -> bool:
        if self._running or not self._can_run:
            return False
        try:
            contexts = parse_contexts(self.sweep_edit.text())
        except ValueError as exc:
            self.status.setText(f"Context sweep: {exc}.")
            return False
        self.sweep_points = []
        self.sweep_chart.clear()
        self.transfer_chart.clear()
        prompt = self.prompt_edit.text().strip() or DEFAULT_PROMPT
        tokens = min(self.tokens_spin.value(), 64)
        request = SweepRequest(prompt, contexts, tokens, self.repeats_spin.value())
        self._start(sweep_job(self.host, request), self._on_sweep_finished)
        return True

    def _start(self, job: Job, on_finished: Callable[[Any], None]) -> None:
        self._set_running(True)
        handle = self.job = self.runner.submit(job)
        handle.sig_finished.connect(on_finished)
        handle.sig_yielded.connect(self._on_yielded)
        handle.sig_errored.connect(self._on_errored)
        handle.sig_aborted.connect(self._on_stopped)

    @Slot()
    def stop(self) -> None:
        if self.job is not None and not self.job.done:
            self.job.stop()
            self.status.setText("Stopping after the current step…")

    # ---- results --------------------------------------------------------------------------
    @Slot(object)
    def _on_yielded(self, batch: YieldedBatch) -> None:
        steps = 0
        for item in batch.items:
            if isinstance(item, StepFigures):
                self.latency_chart.append(item.loop, item.index, item.latency_ms)
                self.split_charts[item.loop].append(item.run_ms, item.host_ms, item.sample_ms)
                steps += 1
            elif isinstance(item, ProgressLine):
                self.status.setText(item.text)
                if item.fraction is not None:
                    self.progress.set_fraction(item.fraction)
            elif isinstance(item, LoopFinished):
                self._on_loop_finished(item)
            elif isinstance(item, SweepPoint):
                self._on_sweep_point(item)
        if steps:
            # The first run streams its steps: the bar moves with them.
            drawn = sum(chart.count for chart in self.split_charts.values())
            self.progress.set_fraction(min(1.0, drawn / self._steps_per_run) / self._runs)
            tallest = max(c.y_max for c in self.split_charts.values())
            for chart in self.split_charts.values():
                chart.set_y_max(tallest)  # one scale for both loops

    def _on_loop_finished(self, done: LoopFinished) -> None:
        summary = done.summary
        spread = summary.get("spread") or {}
        for chart, key, scale in (
            (self.speed_chart, "tokens_per_s", 1.0),
            (self.ttft_chart, "ttft_s", 1000.0),
        ):
            chart.set_value(done.loop, summary[key] * scale)
            if summary.get("repeats", 1) > 1 and key in spread:
                low, high = spread[key]
                chart.set_spread(done.loop, low * scale, high * scale)
        column = LOOPS.index(done.loop)
        for row, (_label, key, scale, fmt) in enumerate(TABLE_ROWS):
            self._cell(row, column, table_text(summary, key, scale, fmt))

    @Slot(object)
    def _on_finished(self, done: CompareFinished) -> None:
        self.result = dict(done.result)
        if self.sweep_points:
            self.result["sweep"] = list(self.sweep_points)
        r = done.result
        self._cell(0, 2, f"{r['speedup_tokens_per_s']:.2f}x")
        self._cell(2, 2, f"{r['speedup_latency']:.2f}x lower")
        self._cell(len(TABLE_ROWS), 2, "yes" if r["same_tokens"] else "NO")
        # Both loops run the same folder: a step reads the same weights (docs/engine.md).
        weights = r.get("weight_bytes_per_step")
        for column in range(len(LOOPS)):
            self._cell(len(TABLE_ROWS) + 1, column, fmt_bytes(weights) if weights else "n/a")
        self._set_running(False)
        self.status.setText(
            f"IO-Binding vs naive: {r['speedup_tokens_per_s']:.2f}x tokens/s, "
            f"{r['speedup_latency']:.2f}x lower median latency; same tokens: "
            f"{'yes' if r['same_tokens'] else 'no'} ({r['prompt_tokens']} prompt tokens, "
            f"{r['max_new_tokens']} generated, {r['device']}, median of {r['repeats']} runs)."
        )
        self.explanation.setText(where_time_goes(r))

    def _on_sweep_point(self, point: SweepPoint) -> None:
        self.sweep_points.append(point.point)
        context = point.point["prompt_tokens"]
        for loop in LOOPS:
            summary = point.point[loop]
            self.sweep_chart.add_point(loop, context, summary["tokens_per_s"])
            transfer = summary["transfer"]
            moved = transfer["h2d_bytes_per_token"] + transfer["d2h_bytes_per_token"]
            self.transfer_chart.add_point(loop, context, moved)
        if self.result is not None:
            self.result["sweep"] = list(self.sweep_points)

    @Slot(object)
    def _on_sweep_finished(self, done: SweepFinished) -> None:
        if self.result is None and self.sweep_points:
            # A sweep alone still exports: its shortest context stands as the main point.
            self.result = {**done.header, **self.sweep_points[0]}
        if self.result is not None:
            self.result["sweep"] = list(self.sweep_points)
        self.transfer_chart.set_shared_memory(not done.header.get("device_own_memory"))
        self._set_running(False)
        self.status.setText(f"Context sweep done: {len(self.sweep_points)} points.")

    @Slot(object)
    def _on_errored(self, error: JobError) -> None:
        self._on_stopped(error.message)

    @Slot(str)
    def _on_stopped(self, message: str) -> None:
        self._set_running(False)
        self.status.setText(message)

    def _cell(self, row: int, column: int, text: str) -> None:
        item = QTableWidgetItem(text)
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.table.setItem(row, column, item)

    # ---- export ---------------------------------------------------------------------------
    def _ask_folder(self) -> str:
        return QFileDialog.getExistingDirectory(self, "Export the comparison into a folder")

    @Slot()
    def _on_export_clicked(self) -> None:
        folder = self.choose_export_folder()
        if folder:
            self.export(Path(folder))

    def export(self, folder: Path) -> Path | None:
        """Write the report (PNG charts, CSV, JSON, Markdown) into `folder`."""
        from chatapp.gui.compare.report import write_report

        if self.result is None:
            self.status.setText("Run a comparison first.")
            return None
        try:
            files = write_report(self.result, folder)
        except OSError as exc:
            self.status.setText(f"Could not export to {folder}: {exc}")
            return None
        self.status.setText(
            f"Exported {len(files.images)} charts, CSV, JSON and {files.markdown.name} to {folder}."
        )
        return files.markdown
