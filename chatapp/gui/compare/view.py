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

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.bench.report import device_words
from chatapp.engine.bench.sentences import explanation
from chatapp.engine.bench.summary import per_token_ms
from chatapp.engine.modes import MODES, Mode
from chatapp.gui.common.export_folder import export_folder, remember_export_folder
from chatapp.gui.common.progress import ProgressWithTimeLeft
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import muted
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.gui.compare.chart_grid import CompareCharts
from chatapp.gui.compare.inputs import MAX_PROMPT_CHARS, parse_contexts
from chatapp.gui.compare.saved import show_saved_file
from chatapp.session.compare_jobs import DEFAULT_SWEEP as SWEEP_CONTEXTS
from chatapp.session.compare_jobs import (
    NOCACHE_SWEEP_MAX,
    SWEEP_REPEATS,
    SWEEP_TOKENS,
    CompareFinished,
    CompareRequest,
    LoopFinished,
    ProgressLine,
    StepFigures,
    SweepCosts,
    SweepFinished,
    SweepPoint,
    SweepRequest,
    compare_job,
    duration_text,
    sweep_job,
)
from chatapp.session.jobs import Job
from chatapp.session.model_jobs import EngineHost
from chatapp.store.compare_results import SavedResults, save_results

DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue."
DEFAULT_SWEEP = ",".join(map(str, SWEEP_CONTEXTS))
SEED_TOKENS = 200
log = logging.getLogger(
    __name__
)  # the write-up's figure: caching's speed-up over a 200-token sample


# The chat's export folder: both exports start where the last one went (else home).
class CompareView(QWidget):
    sig_running = Signal(bool)  # the main window keeps the chat from sending meanwhile

    def __init__(
        self,
        runner: JobRunner,
        host: EngineHost,
        parent: QWidget | None = None,
        results_path: Path | None = None,
    ) -> None:
        super().__init__(parent)
        self.results_path = results_path  # where the last results are kept (None: nowhere)
        self.sweep_header: dict[str, Any] | None = None
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
        if results_path is not None:
            show_saved_file(self, results_path)

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
            "Runs of the loops: the figures are medians, the bars and the table show the "
            f"range (a context sweep runs each point {SWEEP_REPEATS} time to stay short)"
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
        self.sweep_edit.setToolTip(
            f"Context lengths (tokens of real text before the prompt); each point runs "
            f"{SWEEP_TOKENS} tokens per loop, no cache only up to {NOCACHE_SWEEP_MAX} tokens"
        )
        self.sweep_estimate = QLabel("", self)
        self.sweep_estimate.setObjectName("sweepEstimate")
        muted(self.sweep_estimate)
        self.sweep_note = QLabel("", self)  # where No cache runs: in words, not only a tooltip
        self.sweep_note.setObjectName("sweepNoCacheNote")
        self.sweep_note.setWordWrap(True)
        muted(self.sweep_note)
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
        self.charts = CompareCharts(self)
        # The figures by name (tests and scripts read them here).
        self.explanation, self.table = self.charts.explanation, self.charts.table
        self.latency_chart, self.split_charts = self.charts.latency_chart, self.charts.split_charts
        self.caching_chart, self.speed_chart = self.charts.caching_chart, self.charts.speed_chart
        self.ttft_chart, self.sweep_chart = self.charts.ttft_chart, self.charts.sweep_chart
        self.transfer_chart = self.charts.transfer_chart

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
        sweep_row.addWidget(self.sweep_estimate)
        sweep_row.addWidget(self.export_button)

        # The charts, the sentences and the table scroll: the view must fit a laptop screen.
        scroll = QScrollArea(self)
        scroll.setObjectName("compareScroll")
        scroll.setWidget(self.charts)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.addLayout(prompt_row)
        layout.addLayout(controls)
        layout.addLayout(sweep_row)
        layout.addWidget(self.sweep_note)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(scroll, 1)

        self.run_button.clicked.connect(self.run_comparison)
        self.caching_button.clicked.connect(self.run_caching_figure)
        self.stop_button.clicked.connect(self.stop)
        self.sweep_button.clicked.connect(self.run_sweep)
        self.sweep_edit.textChanged.connect(self._on_sweep_edited)
        self.nocache_check.toggled.connect(self._on_sweep_edited)
        self._on_sweep_edited()
        self.export_button.clicked.connect(self._on_export_clicked)

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
        self.charts.clear_comparison(list(modes))
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
        self.charts.clear_sweep()
        self._explain()
        self._start(sweep_job(self.host, self.sweep_request(contexts)), self._on_sweep_finished)
        return True

    def sweep_request(self, contexts: tuple[int, ...]) -> SweepRequest:
        prompt = self.prompt_edit.text().strip() or DEFAULT_PROMPT
        return SweepRequest(prompt, contexts, SWEEP_TOKENS, SWEEP_REPEATS, self.modes())

    def sweep_estimate_s(self) -> float | None:
        """What the sweep in the box would take, from the last comparison's own figures (its
        prefill per prompt token and its median step); None before any comparison."""
        compared = self.compared
        loop = compared.get(Mode.IOBINDING) if compared else None
        if compared is None or loop is None or not compared.get("prompt_tokens"):
            return None
        try:
            contexts = parse_contexts(self.sweep_edit.text())
        except ValueError:
            return None
        costs = SweepCosts(
            loop["ttft_s"] / compared["prompt_tokens"], per_token_ms(loop).median / 1000
        )
        return costs.sweep_s(self.sweep_request(contexts))

    @Slot()
    def _on_sweep_edited(self, *_args: object) -> None:
        seconds = self.sweep_estimate_s()
        about = duration_text(seconds) if seconds is not None else ""
        self.sweep_estimate.setText(
            f"{about.capitalize()} by the last comparison" if about else "Estimated when it starts"
        )
        try:
            note = self.sweep_request(parse_contexts(self.sweep_edit.text())).nocache_note()
        except ValueError:
            note = ""
        self.sweep_note.setText(note)
        self.sweep_note.setVisible(bool(note))

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
                self.charts.append_step(item)
                steps += 1
            elif isinstance(item, ProgressLine):
                if item.text:  # a step's line moves only the bar
                    self.status.setText(item.text)
                if item.fraction is not None:
                    self.progress.set_fraction(item.fraction)
            elif isinstance(item, LoopFinished):
                self.charts.show_loop(item.loop, item.summary)
            elif isinstance(item, SweepPoint):
                self._on_sweep_point(item)
        if steps:
            # The first run streams its steps: the bar moves with them.
            drawn = self.charts.steps_drawn
            self.progress.set_fraction(min(1.0, drawn / self._steps_per_run) / self._runs)
            self.charts.share_scale()

    @Slot(object)
    def _on_finished(self, done: CompareFinished) -> None:
        self.result = dict(done.result)
        self.compared = dict(done.result)
        if self.sweep_points:
            self.result["sweep"] = list(self.sweep_points)
        r = done.result
        self.charts.show_result(r)
        self._on_sweep_edited()
        self._set_running(False)
        self._save()
        loops = ", ".join(m.label for m in MODES if m in r)
        self.status.setText(
            f"Done: {loops} on {device_words(r)}, {r['prompt_tokens']} prompt tokens, "
            f"{r['max_new_tokens']} generated, {r['repeats']} run(s); same tokens: "
            f"{'yes' if r['same_tokens'] else 'no'}."
        )
        self._explain()

    def _explain(self) -> None:
        """The sentences, from the comparison and the sweep now on screen (and nothing else)."""
        self.charts.set_explanation(explanation(self.compared, self.sweep_points))

    def _on_sweep_point(self, point: SweepPoint) -> None:
        self.sweep_points.append(point.point)
        self.charts.add_sweep_point(point.point)
        if self.result is not None:
            self.result["sweep"] = list(self.sweep_points)

    @Slot(object)
    def _on_sweep_finished(self, done: SweepFinished) -> None:
        self.sweep_header = done.header
        if self.result is None and self.sweep_points:
            # A sweep alone still exports: its shortest context stands as the main point.
            self.result = {**done.header, **self.sweep_points[0]}
        if self.result is not None:
            self.result["sweep"] = list(self.sweep_points)
        self.transfer_chart.set_shared_memory(not done.header.get("device_own_memory"))
        self._set_running(False)
        self.status.setText(f"Context sweep done: {len(self.sweep_points)} points.")
        self._explain()
        self._save()

    # ---- results kept between runs --------------------------------------------------------
    def _save(self) -> None:
        if self.results_path is None:
            return
        saved = SavedResults(self.compared, list(self.sweep_points), self.sweep_header)
        try:
            save_results(saved, self.results_path)
        except OSError:  # the results stay on screen; only the next start misses them
            log.warning("could not save the comparison to %s", self.results_path, exc_info=True)

    def show_saved(self, saved: SavedResults) -> None:
        """The last results, as they were when the app closed (no run needed)."""
        if saved.comparison is not None:
            self.compared, self.result = saved.comparison, dict(saved.comparison)
            self.charts.draw_result(saved.comparison)
        self.sweep_header = saved.sweep_header
        for point in saved.sweep:
            self._on_sweep_point(SweepPoint(point["prompt_tokens"], point))
        header = self.compared or self.sweep_header or {}
        if self.result is None and saved.sweep:
            self.result = {**header, **saved.sweep[0]}
        if self.result is not None and saved.sweep:
            self.result["sweep"] = list(saved.sweep)
        if saved.sweep:
            self.charts.transfer_chart.set_shared_memory(not header.get("device_own_memory"))
        when = (header.get("environment") or {}).get("time", "")
        self.status.setText(
            f"The last results, measured {when} with {header.get('model', 'a model')} on "
            f"{device_words(header)}: run the loops to measure again."
        )
        self._explain()
        self._on_sweep_edited()
        self._update_buttons()

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
