"""The comparison view: the loops on one prompt, drawn live, plus a context sweep and export.

Runs are jobs (chatapp/session/compare_jobs.py) on the window's JobRunner, the thread that
runs the chat's answers, with the window's one engine; this widget only draws what comes back.
The loop without a cache is optional (a checkbox): its time per token grows with the length.
Every sentence under the controls comes from chatapp/engine/bench/sentences.py, computed from the
same summary (bench/summary.py) as the table and the charts, redone after each comparison and
sweep. The result has the shape of
`chatapp bench --json`, so Export writes the same report as `chatapp bench --report`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCharts import QChartView
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QPainter, QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.bench.sentences import explanation
from chatapp.engine.bench.summary import loop_figures, per_token_ms
from chatapp.engine.modes import MODES, Mode
from chatapp.gui.common.export_folder import export_folder, remember_export_folder
from chatapp.gui.common.progress import ProgressWithTimeLeft
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, on_theme
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.gui.compare.charts import (
    LOOPS,
    LatencyLinesChart,
    PairBarChart,
    StepSplitChart,
    SweepChart,
    TransferChart,
)
from chatapp.gui.compare.inputs import MAX_PROMPT_CHARS, parse_contexts
from chatapp.gui.compare.report import PER_TOKEN_TITLE, caching_title
from chatapp.gui.compare.table import SummaryTable
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

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."
DEFAULT_SWEEP = "128,512,1024,2048"
SEED_TOKENS = 200  # the write-up's figure: caching's speed-up over a 200-token sample


# The chat's export folder: both exports start where the last one went (else home).
class CompareView(QWidget):
    sig_running = Signal(bool)  # the main window keeps the chat from sending meanwhile

    def __init__(self, runner: JobRunner, host: EngineHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareView")
        self.runner = runner
        self.host = host
        self.job: JobHandle | None = None  # the comparison or sweep running (or last run)
        self.result: dict[str, Any] | None = None
        self.compared: dict[str, Any] | None = None  # the last comparison (not a sweep's stand-in)
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
            "every loop does the same work)"
        )
        self.repeats_spin = QSpinBox(self)
        self.repeats_spin.setObjectName("compareRepeats")
        self.repeats_spin.setRange(1, 9)
        self.repeats_spin.setValue(3)
        self.repeats_spin.setToolTip(
            "Runs of the loops: the figures are medians, the bars and the table show the range"
        )
        ignore_wheel_unless_focused(self.tokens_spin, self.repeats_spin)
        self.nocache_check = QCheckBox(Mode.NOCACHE.label, self)
        self.nocache_check.setObjectName("compareNoCache")
        self.nocache_check.setChecked(True)
        self.nocache_check.setToolTip(
            f"{Mode.NOCACHE.description} The slowest loop by far; in a sweep it runs only "
            "on the shorter contexts."
        )
        self.run_button = QPushButton("Run the loops", self)
        self.run_button.setObjectName("compareRunButton")
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setObjectName("compareStopButton")
        self.caching_button = QPushButton(f"Caching over {SEED_TOKENS} tokens", self)
        self.caching_button.setObjectName("compareCachingButton")
        self.caching_button.setToolTip(
            f"The write-up's figure: the three loops once over {SEED_TOKENS} new tokens, and "
            "how much faster the whole answer is with a cache (minutes on a slow machine: "
            "without a cache every token costs more than the last; Stop ends it)"
        )
        self.sweep_edit = QLineEdit(DEFAULT_SWEEP, self)
        self.sweep_edit.setObjectName("sweepContexts")
        self.sweep_edit.setToolTip("Context lengths (tokens of real text before the prompt)")
        self.sweep_button = QPushButton("Context sweep", self)
        self.sweep_button.setObjectName("sweepRunButton")
        self.export_button = QPushButton("Export…", self)
        self.export_button.setObjectName("compareExportButton")
        self.export_button.setToolTip("PNG charts, CSV and JSON of every number, Markdown report")
        self.status = QLabel("Compare the loops (no cache, naive, IO-Binding) on one prompt.", self)
        self.status.setTextFormat(Qt.TextFormat.PlainText)  # it quotes errors and input
        self.status.setObjectName("compareStatus")
        self.status.setWordWrap(True)
        self.progress = ProgressWithTimeLeft(self)
        self.progress.setObjectName("compareProgress")
        self._steps_per_run = 1  # decode steps of all loops in one run (the first streams)
        self._runs = 1
        self.explanation = QLabel("", self)
        self.explanation.setObjectName("compareExplanation")
        self.explanation.setTextFormat(Qt.TextFormat.PlainText)
        self.explanation.setWordWrap(True)
        self.explanation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.latency_chart = LatencyLinesChart()
        self.split_charts: dict[str, StepSplitChart] = {
            loop: StepSplitChart(loop) for loop in LOOPS
        }
        self.caching_chart = PairBarChart("Whole answer", "s")
        self.speed_chart = PairBarChart(PER_TOKEN_TITLE, "ms")
        self.ttft_chart = PairBarChart("Time to first token", "ms")
        self.sweep_chart = SweepChart()
        self.transfer_chart = TransferChart()
        self.table = SummaryTable(self)

        prompt_row = QHBoxLayout()
        prompt_row.addWidget(QLabel("Prompt", self))
        prompt_row.addWidget(self.prompt_edit, 1)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Tokens", self))
        controls.addWidget(self.tokens_spin)
        controls.addWidget(QLabel("Runs", self))
        controls.addWidget(self.repeats_spin)
        controls.addWidget(self.nocache_check)
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        controls.addWidget(self.caching_button)
        controls.addStretch(1)
        sweep_row = QHBoxLayout()
        sweep_row.addWidget(QLabel("Contexts", self))
        sweep_row.addWidget(self.sweep_edit, 1)
        sweep_row.addWidget(self.sweep_button)
        sweep_row.addWidget(self.export_button)

        grid = QGridLayout()
        grid.addWidget(self.explanation, 0, 0, 1, 2)
        grid.addWidget(self._view(self.latency_chart), 1, 0, 1, 2)
        grid.addWidget(self._view(self.caching_chart), 2, 0)
        grid.addWidget(self._view(self.speed_chart), 2, 1)
        grid.addWidget(self._view(self.ttft_chart), 3, 0)
        grid.addWidget(self._view(self.split_charts[Mode.NOCACHE]), 3, 1)
        grid.addWidget(self._view(self.split_charts[Mode.NAIVE]), 4, 0)
        grid.addWidget(self._view(self.split_charts[Mode.IOBINDING]), 4, 1)
        grid.addWidget(self._view(self.sweep_chart), 5, 0)
        grid.addWidget(self._view(self.transfer_chart), 5, 1)
        grid.addWidget(self.table, 6, 0, 1, 2)
        for row in range(1, 6):
            grid.setRowStretch(row, 1)

        # The charts, the sentences and the table scroll: the view must fit a laptop screen.
        charts = QWidget(self)
        charts.setLayout(grid)
        scroll = QScrollArea(self)
        scroll.setObjectName("compareScroll")
        scroll.setWidget(charts)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.addLayout(prompt_row)
        layout.addLayout(controls)
        layout.addLayout(sweep_row)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(scroll, 1)

        on_theme(self, self._on_theme)
        self.run_button.clicked.connect(self.run_comparison)
        self.caching_button.clicked.connect(self.run_caching_figure)
        self.stop_button.clicked.connect(self.stop)
        self.sweep_button.clicked.connect(self.run_sweep)
        self.export_button.clicked.connect(self._on_export_clicked)

    def _on_theme(self, c: ThemeColors) -> None:
        charts: tuple[Any, ...] = (
            self.latency_chart,
            *self.split_charts.values(),
            self.caching_chart,
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
        for button in (self.run_button, self.caching_button, self.sweep_button):
            button.setEnabled(idle)
        self.stop_button.setEnabled(self._running)
        self.export_button.setEnabled(not self._running and self.result is not None)
        tip = "" if idle else "Needs a loaded model and no answer or comparison in progress."
        self.run_button.setToolTip(tip)
        self.sweep_button.setToolTip(tip)

    @property
    def running(self) -> bool:
        return self._running

    def modes(self) -> tuple[Mode, ...]:
        """The loops a run takes: the cached two, and no cache when its box is ticked."""
        return tuple(m for m in MODES if m.caches or self.nocache_check.isChecked())

    # ---- actions --------------------------------------------------------------------------
    @Slot()
    def run_comparison(self) -> bool:
        if self._running or not self._can_run:
            return False
        prompt = self.prompt_edit.text().strip() or DEFAULT_PROMPT
        modes = self.modes()
        self.result = self.compared = None
        self.latency_chart.clear()
        for chart in self.split_charts.values():
            chart.clear()
        for bars in (self.caching_chart, self.speed_chart, self.ttft_chart):
            bars.clear()
        self.caching_chart.setTitle("Whole answer")
        self.table.set_loops(list(modes))
        self._explain()
        request = CompareRequest(
            prompt,
            self.system_prompt(),
            self.tokens_spin.value(),
            self.repeats_spin.value(),
            modes,
        )
        self._steps_per_run = max(1, len(modes) * (request.max_new_tokens - 1))
        self._runs = max(1, request.repeats)
        self._start(compare_job(self.host, request), self._on_finished)
        self.status.setText("Starting…")
        return True

    @Slot()
    def run_caching_figure(self) -> bool:
        """The write-up's figure: every loop once over SEED_TOKENS new tokens."""
        self.tokens_spin.setValue(SEED_TOKENS)
        self.repeats_spin.setValue(1)
        self.nocache_check.setChecked(True)
        return self.run_comparison()

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
        self._explain()
        prompt = self.prompt_edit.text().strip() or DEFAULT_PROMPT
        tokens = min(self.tokens_spin.value(), 64)
        request = SweepRequest(prompt, contexts, tokens, self.repeats_spin.value(), self.modes())
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
            # The cached loops on one scale, so their heights compare; no cache, whose steps
            # grow far taller, on its own.
            cached = [c for loop, c in self.split_charts.items() if Mode(loop).caches]
            tallest = max(c.y_max for c in cached)
            for chart in cached:
                chart.set_y_max(tallest)

    def _on_loop_finished(self, done: LoopFinished) -> None:
        summary = done.summary
        spread = summary.get("spread") or {}
        per_token = loop_figures(Mode(done.loop), summary).per_token_ms
        self.speed_chart.set_value(done.loop, per_token.median)
        if per_token.count >= 2:
            self.speed_chart.set_spread(done.loop, per_token.low, per_token.high)
        for chart, key, scale in (
            (self.caching_chart, "answer_s", 1.0),
            (self.ttft_chart, "ttft_s", 1000.0),
        ):
            chart.set_value(done.loop, summary[key] * scale)
            if summary.get("repeats", 1) > 1 and key in spread:
                low, high = spread[key]
                chart.set_spread(done.loop, low * scale, high * scale)
        self.table.fill_loop(Mode(done.loop), summary)

    @Slot(object)
    def _on_finished(self, done: CompareFinished) -> None:
        self.result = dict(done.result)
        self.compared = dict(done.result)
        if self.sweep_points:
            self.result["sweep"] = list(self.sweep_points)
        r = done.result
        self.table.fill_result(r)
        self.caching_chart.setTitle(caching_title(r))
        self._set_running(False)
        loops = ", ".join(m.label for m in MODES if m in r)
        self.status.setText(
            f"Done: {loops} on {r['device']}, {r['prompt_tokens']} prompt tokens, "
            f"{r['max_new_tokens']} generated, {r['repeats']} run(s); same tokens: "
            f"{'yes' if r['same_tokens'] else 'no'}."
        )
        self._explain()

    def _explain(self) -> None:
        """The sentences, from the comparison and the sweep now on screen (and nothing else)."""
        self.explanation.setText(explanation(self.compared, self.sweep_points))
        self._fit_explanation()

    def _fit_explanation(self) -> None:
        # A word-wrapped label in a scrolled grid gets one line's height unless told its own.
        label = self.explanation
        label.setMinimumHeight(label.heightForWidth(label.width()) if label.text() else 0)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_explanation()

    def _on_sweep_point(self, point: SweepPoint) -> None:
        self.sweep_points.append(point.point)
        context = point.point["prompt_tokens"]
        for loop in (m for m in LOOPS if m in point.point):
            summary = point.point[loop]
            self.sweep_chart.add_point(loop, context, per_token_ms(summary).median)
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
        self._explain()

    @Slot(object)
    def _on_errored(self, error: JobError) -> None:
        self._on_stopped(error.message)

    @Slot(str)
    def _on_stopped(self, message: str) -> None:
        self._set_running(False)
        self.status.setText(message)

    # ---- export ---------------------------------------------------------------------------
    def _settings(self) -> Any:
        return getattr(self.window(), "settings", None)

    def export_start_folder(self) -> str:
        """Where the last export (chat, history or comparison) went, else the home folder."""
        settings = self._settings()
        return str(export_folder(settings)) if settings is not None else str(Path.home())

    def _ask_folder(self) -> str:
        return QFileDialog.getExistingDirectory(
            self, "Export the comparison into a folder", self.export_start_folder()
        )

    @Slot()
    def _on_export_clicked(self) -> None:
        folder = self.choose_export_folder()
        if folder and self.export(Path(folder)) is not None:
            settings = self._settings()
            if settings is not None:
                remember_export_folder(settings, Path(folder).parent)

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
