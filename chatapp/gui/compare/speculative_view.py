"""View > Plain vs speculative: the loaded model answers one prompt plain and with drafting
(session/speculative_jobs.py), and the view charts both answers' time token by token, with the
table and sentences of `chatapp bench --speculative`, each true of the numbers beside it.

The chart is cumulative: where drafted tokens are kept, several tokens come out of one pass over
the weights, so the drafted answer's line climbs in steps and ends lower; its per-token points
alone would be one tall point per pass and zeros between.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt, Signal, Slot
from PySide6.QtGui import QFontDatabase, QPainter
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.bench.speculative import bench_prompts
from chatapp.gui.common.chart_style import style_chart
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import on_theme
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session.jobs import JobError
from chatapp.session.speculative_jobs import (
    AnswerCosts,
    SpeculativeCompared,
    SpeculativeRequest,
    speculative_compare_job,
)

if TYPE_CHECKING:
    from chatapp.gui.common.workers import JobHandle, JobRunner, YieldedBatch
    from chatapp.session.model_jobs import EngineHost

CHART_TITLE = "Time to write the answer, token by token (first repeat; ms after the first token)"
IDLE = (
    "Runs the prompt greedily, plain and with speculative decoding in turn (each from an empty "
    "cache); the two answers must be the same."
)
NEEDS_MODEL = "Needs a loaded model and no answer or comparison in progress."
SYSTEMS = {False: "Plain", True: "Speculative"}


class SpeculativeView(QWidget):
    sig_running = Signal(bool)

    def __init__(self, runner: JobRunner, host: EngineHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("speculativeView")
        self.runner, self.host = runner, host
        self.job: JobHandle | None = None
        self.compared: SpeculativeCompared | None = None
        self._running = False
        self._can_run = False
        self._refusal: str | None = None
        self._build()
        self._update_buttons()

    # ---- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        grounded = next(p for p in bench_prompts() if p.kind == "grounded")
        self.prompt_edit = QPlainTextEdit(grounded.chat, self)
        self.prompt_edit.setObjectName("speculativePrompt")
        self.prompt_edit.setMaximumHeight(110)
        self.tokens_spin = QSpinBox(self)
        self.tokens_spin.setObjectName("speculativeTokens")
        self.tokens_spin.setRange(8, 1024)
        self.tokens_spin.setValue(96)
        self.tokens_spin.setToolTip("Tokens each answer may write (greedy)")
        self.repeats_spin = QSpinBox(self)
        self.repeats_spin.setObjectName("speculativeRepeats")
        self.repeats_spin.setRange(1, 9)
        self.repeats_spin.setValue(3)
        self.repeats_spin.setToolTip("Answers of each kind: the ratio is the median of theirs")
        ignore_wheel_unless_focused(self.tokens_spin, self.repeats_spin)
        self.run_button = QPushButton("Run both", self)
        self.run_button.setObjectName("speculativeRunButton")
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setObjectName("speculativeStopButton")
        controls = QHBoxLayout()
        for text, widget in (("Tokens", self.tokens_spin), ("Repeats", self.repeats_spin)):
            controls.addWidget(QLabel(text, self))
            controls.addWidget(widget)
        controls.addStretch(1)
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        self.status = QLabel(IDLE, self)
        self.status.setObjectName("speculativeStatus")
        self.status.setWordWrap(True)
        self.chart = QChart()
        self.chart.setTitle(CHART_TITLE)
        self.chart.setMargins(QMargins(4, 4, 4, 4))
        self.chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)
        self.series: dict[bool, QLineSeries] = {}
        for drafts, name in SYSTEMS.items():
            series = self.series[drafts] = QLineSeries()
            series.setName(name)
        self.x_axis, self.y_axis = QValueAxis(), QValueAxis()
        self.x_axis.setTitleText("token")
        self.x_axis.setLabelFormat("%d")
        self.y_axis.setTitleText("ms since the first token")
        self.y_axis.setLabelFormat("%g")
        self.chart.addAxis(self.x_axis, Qt.AlignmentFlag.AlignBottom)
        self.chart.addAxis(self.y_axis, Qt.AlignmentFlag.AlignLeft)
        for series in self.series.values():
            self.chart.addSeries(series)
            series.attachAxis(self.x_axis)
            series.attachAxis(self.y_axis)
        on_theme(self, lambda c: style_chart(self.chart, c))
        view = QChartView(self.chart, self)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumHeight(220)
        self.results = QLabel("", self)
        self.results.setObjectName("speculativeResults")
        self.results.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.results.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.results.setWordWrap(True)
        # The chart and the table scroll: the view must fit a laptop screen at 200 % (a tab's
        # least height is the window's: 1366x768 at 200 % leaves 384 px).
        body = QWidget(self)
        body_layout = QVBoxLayout(body)
        body_layout.setContentsMargins(0, 0, 0, 0)
        body_layout.addWidget(view, 1)
        body_layout.addWidget(self.results)
        scroll = QScrollArea(self)
        scroll.setObjectName("speculativeScroll")
        scroll.setWidget(body)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Prompt (an answer that repeats or quotes it gains most)", self))
        layout.addWidget(self.prompt_edit)
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)
        self.run_button.clicked.connect(self.run)
        self.stop_button.clicked.connect(self.stop)

    # ---- state ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._running

    def set_available(self, available: bool, refusal: str | None = None) -> None:
        """Whether a model is loaded and idle (the chat is not answering); `refusal`: why
        speculative decoding cannot run on the loaded model."""
        self._can_run = available and refusal is None
        self._refusal = refusal
        if refusal and not self._running:
            self.status.setText(f"Speculative decoding does not run on this model: {refusal}.")
        elif not self._running and self.compared is None:
            self.status.setText(IDLE)
        self._update_buttons()

    def _set_running(self, running: bool) -> None:
        self._running = running
        self._update_buttons()
        emit(self.sig_running, running)

    def _update_buttons(self) -> None:
        idle = self._can_run and not self._running
        self.run_button.setEnabled(idle)
        self.run_button.setToolTip("" if idle else self._refusal or NEEDS_MODEL)
        self.stop_button.setEnabled(self._running)

    # ---- actions --------------------------------------------------------------------------
    @Slot()
    def run(self) -> bool:
        prompt = self.prompt_edit.toPlainText().strip()
        if self._running or not self._can_run or not prompt:
            return False
        self.compared = None
        for series in self.series.values():
            series.clear()
        self.results.setText("")
        request = SpeculativeRequest(prompt, self.tokens_spin.value(), self.repeats_spin.value())
        self._set_running(True)
        handle = self.job = self.runner.submit(speculative_compare_job(self.host, request))
        handle.sig_yielded.connect(self._on_yielded)
        handle.sig_finished.connect(self._on_finished)
        handle.sig_errored.connect(self._on_errored)
        handle.sig_aborted.connect(self._on_stopped)
        self.status.setText("Running: plain and speculative answers in turn…")
        return True

    @Slot()
    def stop(self) -> None:
        if self.job is not None and not self.job.done:
            self.job.stop()
            self.status.setText("Stopping after the current answer…")

    # ---- results --------------------------------------------------------------------------
    @Slot(object)
    def _on_yielded(self, batch: YieldedBatch) -> None:
        for item in batch.items:
            if isinstance(item, AnswerCosts):
                self.status.setText(
                    f"{SYSTEMS[item.drafts]} answer {item.repeat + 1}: "
                    f"{item.tokens_per_s:.1f} tokens/s, {item.tokens_per_pass:.2f} tokens a pass"
                )
                if item.repeat == 0:
                    self._draw(item)

    def _draw(self, costs: AnswerCosts) -> None:
        total, points = 0.0, []
        for i, ms in enumerate(costs.latencies_ms):
            total += ms
            points.append(QPointF(i + 2, total))  # token 2 is the first after the first
        self.series[costs.drafts].replace(points)
        ends = [s.at(s.count() - 1) for s in self.series.values() if s.count()]
        self.x_axis.setRange(1, max(2.0, *(p.x() for p in ends)))
        self.y_axis.setRange(0, max(1.0, *(p.y() for p in ends)) * 1.05)
        # Round ticks (0, 200, 400 ms), not the range cut in four (184.184, 368.367).
        self.x_axis.applyNiceNumbers()
        self.y_axis.applyNiceNumbers()

    @Slot(object)
    def _on_finished(self, done: SpeculativeCompared) -> None:
        self.compared = done
        self._set_running(False)
        self.results.setText("\n".join(done.lines))
        self.status.setText(
            f"Done: {done.bench.model}, {done.result.tokens} tokens an answer, "
            f"{done.bench.repeats} repeat(s); same tokens: "
            f"{'yes' if done.result.same_tokens else 'NO'}."
        )

    @Slot(object)
    def _on_errored(self, error: JobError) -> None:
        self._set_running(False)
        self.status.setText(error.message)

    @Slot(str)
    def _on_stopped(self, message: str) -> None:
        self._set_running(False)
        self.status.setText(message)
