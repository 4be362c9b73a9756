"""The live figures: one answer's figures together, labelled with its loop and device.

Every value, the caption over them and the note under the host↔device figure describe the
same answer: the one being written or the last one shown. Loading another model or device
changes what the next answer runs on (`set_loaded`), not the words next to an old answer's
numbers. A device's first answer waits for its warm-up (engine/warm_up.py): shown as a phase of
its own with its progress, and named beside the answer it preceded, outside its figures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QFont, QResizeEvent
from PySide6.QtWidgets import (
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.figures import AnswerFigures
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.latency_chart import LatencyChart
from chatapp.gui.common.collapsible import Section
from chatapp.gui.common.theme import muted
from chatapp.session import formatting as fmt
from chatapp.session.context import POLICY_TEXT
from chatapp.session.loop_notes import (
    PERPLEXITY_TIP,
    PROMPT_PERPLEXITY_TIP,
    LoadedDevice,
    answer_caption,
    context_note,
    perplexity_meaning,
    prompt_note,
    transfer_note,
)
from chatapp.units import fmt_bytes

TRANSFER_TIP = "Bytes crossing between host and device memory per generated token"
WARMING = "Preparing the device… {seconds:.0f} s (first answer only)"
WARMED = (
    "The device's first runs took {seconds:.1f} s before this answer (compiling its programs): "
    "not counted in its figures. A prompt of a length not seen before may still compile some "
    "within its TTFT."
)
LATENCY_CAPTION = "Per-token latency (ms)"
TTFT_TIP = "Time to first token: prefill and the first sample"
NOTES_TITLE = "Notes on these figures"
LATENCY_TIP = (
    "One point per token after the first: the first token's time is the TTFT, shown above "
    "(it includes reading the prompt)."
)


class WrappedNote(QLabel):
    """A grey note that wraps to the panel's width (never widens it) and keeps the height its
    lines need there: in a scrolled panel the layout otherwise clips the lines."""

    def __init__(self, name: str, parent: QWidget) -> None:
        super().__init__("", parent)
        self.setObjectName(name)
        self.setWordWrap(True)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # Given more height than its lines need (a longer text before), it starts at the top.
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        muted(self)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        # QLabel's height for a width is never below its minimum height: measured with the
        # minimum standing, a height set at a narrow width (a folded section's first layout)
        # stayed for good, a gap of 240 px under the notes.
        before = self.minimumHeight()
        self.setMinimumHeight(0)
        needed = self.heightForWidth(self.width())
        self.setMinimumHeight(needed if needed > 0 else before)


class LiveFigures(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Live figures", parent)
        self.setObjectName("liveFigures")
        self.loaded = LoadedDevice()
        self.figures: AnswerFigures | None = None  # the answer shown
        self.writing = False
        self.next_mode = "iobinding"  # the loop the next answer uses (words before any answer)
        self._context_used = 0
        self._context_dropped = 0  # the oldest messages the next question leaves out
        self._context_model = ""  # whose tokenizer counted it
        self._pending: AnswerFigures | None = None  # the loop and device of one being started
        self._warm_started = 0.0
        self._warm_seconds: float | None = None
        self._warm_timer = QTimer(self)
        self._warm_timer.setInterval(500)
        self._warm_timer.timeout.connect(self._tick_warm_up)
        self._build()
        self._describe()

    # ---- building -------------------------------------------------------------------------
    def _value_label(self, name: str, caption: str, tip: str) -> QLabel:
        label = QLabel(fmt.MISSING, self)
        label.setObjectName(name)
        font = label.font()
        font.setPointSizeF(font.pointSizeF() + 3)
        font.setWeight(QFont.Weight.DemiBold)
        label.setFont(font)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.setAccessibleName(caption)
        label.setToolTip(tip)
        return label

    def _caption(self, text: str, tip: str = "") -> QLabel:
        label = QLabel(text, self)
        muted(label)
        label.setToolTip(tip)
        return label

    def _build(self) -> None:
        grid = QGridLayout(self)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(3)
        self.answer_label = QLabel("", self)
        self.answer_label.setObjectName("figuresAnswerLabel")
        self.answer_label.setWordWrap(True)
        self.answer_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        grid.addWidget(self.answer_label, 0, 0, 1, 3)
        self.warm_up_bar = QProgressBar(self)
        self.warm_up_bar.setObjectName("warmUpBar")
        self.warm_up_bar.setTextVisible(False)
        self.warm_up_bar.setMaximumHeight(6)
        self.warm_up_bar.hide()
        self.warm_up_note = WrappedNote("warmUpNote", self)
        self.warm_up_note.hide()
        grid.addWidget(self.warm_up_note, 1, 0, 1, 3)
        grid.addWidget(self.warm_up_bar, 2, 0, 1, 3)
        # Three figures a row: in two columns they took a row of captions and values more,
        # and the side panel did not fit a 1366x768 screen.
        cells = (
            ("tokensPerSecondValue", "Tokens/s", "Decode speed (prefill excluded)", 3, 0, 1),
            ("ttftValue", "TTFT (ms)", TTFT_TIP, 3, 1, 1),
            ("perplexityValue", "Perplexity", PERPLEXITY_TIP, 3, 2, 1),
            ("promptPerplexityValue", "Prompt perplexity", PROMPT_PERPLEXITY_TIP, 5, 0, 1),
            ("transferValue", "Host↔device per token", TRANSFER_TIP, 5, 1, 2),
        )
        values = []
        for name, caption, tip, row, column, span in cells:
            value = self._value_label(name, caption, tip)
            values.append(value)
            label = WrappedNote(f"{name}Caption", self)  # wraps rather than widening the panel
            label.setText(caption)
            label.setToolTip(tip)
            grid.addWidget(label, row, column, 1, span)
            grid.addWidget(value, row + 1, column, 1, span)
        for column in range(3):
            grid.setColumnStretch(column, 1)
        (
            self.tokens_per_second_value,
            self.ttft_value,
            self.perplexity_value,
            self.prompt_perplexity_value,
            self.transfer_value,
        ) = values
        # What happens when the context fills up.
        # Caption and value in one row across the columns: the caption must not set the
        # first column's width (the panel stays narrow).
        context_row = QHBoxLayout()
        self.context_caption = self._caption("Context used (tokens)", POLICY_TEXT)
        context_row.addWidget(self.context_caption)
        self.context_value = QLabel(fmt.MISSING, self)
        self.context_value.setObjectName("contextValue")
        context_row.addStretch(1)
        context_row.addWidget(self.context_value)
        grid.addLayout(context_row, 7, 0, 1, 3)
        self.context_bar = QProgressBar(self)
        self.context_bar.setObjectName("contextBar")
        self.context_bar.setTextVisible(False)
        self.context_bar.setMaximumHeight(6)
        self.context_bar.setRange(0, 1)
        self.context_bar.setValue(0)
        grid.addWidget(self.context_bar, 8, 0, 1, 3)
        # The notes that say what the figures mean (what the loop moves between host and
        # device, why Context used differs from the answer's count, a prompt read from the
        # cache): folded under one line by default, remembered by the side panel.
        self.notes = QWidget(self)
        self.notes.setObjectName("figuresNotes")
        notes = QVBoxLayout(self.notes)
        notes.setContentsMargins(0, 0, 0, 0)
        # A prompt read from the cache: why the TTFT is short and its perplexity missing.
        self.prompt_note = WrappedNote("promptNote", self.notes)
        self.prompt_note.hide()
        self.transfer_note = WrappedNote("transferNote", self.notes)
        # Why "Context used" and the answer's own count differ, when they do.
        self.context_note = WrappedNote("contextNote", self.notes)
        self.context_note.hide()
        for note in (self.prompt_note, self.transfer_note, self.context_note):
            notes.addWidget(note)
        self.notes_section = Section(NOTES_TITLE, self.notes, "figuresNotes", self)
        self.notes_section.set_open(False)
        grid.addWidget(self.notes_section, 9, 0, 1, 3)
        self.latency_caption = self._caption(LATENCY_CAPTION, LATENCY_TIP)
        self.latency_caption.setObjectName("latencyCaption")
        self.latency_caption.setWordWrap(True)
        self.latency_caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        grid.addWidget(self.latency_caption, 10, 0, 1, 3)
        self.latency_chart = LatencyChart(self)
        self.latency_chart.setToolTip(LATENCY_TIP)
        grid.addWidget(self.latency_chart, 11, 0, 1, 3)

    # ---- what the next answer runs on -------------------------------------------------------
    def set_loaded(self, loaded: LoadedDevice) -> None:
        """A model was loaded on a device: an answer already shown keeps its own words."""
        self.loaded = loaded
        self._describe()

    def set_next_mode(self, mode: str) -> None:
        """The loop chosen for the next answer: before any answer, the note explains it."""
        self.next_mode = mode
        self._describe()

    # ---- one answer -------------------------------------------------------------------------
    def start_answer(self, writing: AnswerFigures | None = None) -> None:
        """Empty figures: an answer starts (`writing`: its loop and device), or none is
        shown."""
        self.figures = None
        self._pending = writing
        self.writing = writing is not None
        self._warm_seconds = None
        self._warm_timer.stop()
        self.warm_up_bar.hide()
        self.warm_up_note.hide()
        self.latency_chart.clear()
        for label in (
            self.tokens_per_second_value,
            self.ttft_value,
            self.perplexity_value,
            self.prompt_perplexity_value,
        ):
            label.setText(fmt.MISSING)
        self.transfer_value.setText(fmt.MISSING)  # no answer, no figure
        self.transfer_value.setToolTip(TRANSFER_TIP)
        self.perplexity_value.setToolTip(PERPLEXITY_TIP)
        self.prompt_perplexity_value.setToolTip(PROMPT_PERPLEXITY_TIP)
        self._describe()

    def show_stats(self, fig: AnswerFigures) -> None:
        self.figures = fig
        if self._warm_timer.isActive() and (fig.generated_tokens or 0) > 0:
            self._finish_warm_up()
        self.tokens_per_second_value.setText(fmt.rate(fig.tokens_per_s))
        self.ttft_value.setText(fmt.millis(fig.ttft_s))
        for label, value, tip in (
            (self.perplexity_value, fig.perplexity, PERPLEXITY_TIP),
            (self.prompt_perplexity_value, fig.prompt_perplexity, PROMPT_PERPLEXITY_TIP),
        ):
            label.setText(fmt.perplexity(value))
            meaning = perplexity_meaning(value)
            label.setToolTip(f"{meaning}\n\n{tip}" if meaning else tip)
        # A server's count is its usage (prompt + completion); a local one, what the cache holds.
        remote = fig.mode == fmt.REMOTE or fig.device == fmt.REMOTE
        used = fig.tokens_in_context if remote else fig.tokens_read
        self.set_context(used, fig.context_length or 0)
        own = fig.device not in (None, "cpu")
        if (fig.generated_tokens or 0) > 1 or not own:  # decode steps, not the prompt
            self.transfer_value.setText(fmt_bytes(fig.transfer_bytes_per_token))
            self.transfer_value.setToolTip(
                f"{TRANSFER_TIP}\nHost → device {fmt_bytes(fig.h2d_bytes_per_token or 0)}, "
                f"device → host {fmt_bytes(fig.d2h_bytes_per_token or 0)} (medians of the "
                "decode steps)"
            )
        else:
            self.transfer_value.setText(fmt.MISSING)
        self._describe()

    def finish_answer(self) -> None:
        """The answer is written: its figures are now the last answer's."""
        self.writing = False
        if self._warm_timer.isActive() and self.figures is None:  # stopped while warming up
            self._warm_timer.stop()
            self.warm_up_bar.hide()
            self.warm_up_note.hide()
        elif self._warm_timer.isActive():
            self._finish_warm_up()
        self._describe()

    def _describe(self) -> None:
        """The caption and the notes, from the answer shown (or, before one, the device and
        the loop chosen)."""
        fig = self.figures
        self.answer_label.setText(answer_caption(fig or self._pending, self.writing))
        if fig is None and self._pending is not None and self._pending.mode:
            # An answer starts: its loop's words, before its first figures.
            note = transfer_note(None, self.loaded, self._pending.mode)
        else:
            note = transfer_note(fig, self.loaded, self.next_mode)
        self.transfer_note.setText(note)
        for label, text in (
            (self.prompt_note, prompt_note(fig)),
            (
                self.context_note,
                context_note(
                    fig,
                    self._context_used,
                    self.writing,
                    self._context_dropped,
                    self._context_model,
                ),
            ),
        ):
            label.setText(text)
            label.setVisible(bool(text))
        self.latency_caption.setText(self._latency_caption())

    def _latency_caption(self) -> str:
        """What the chart holds: every token after the first, numbered as people count."""
        points = self.latency_chart.point_count
        written = (self.figures.generated_tokens or 0) if self.figures is not None else 0
        if not points or written < 2:
            return LATENCY_CAPTION
        continued = self.figures.continued_tokens if self.figures is not None else None
        if continued and points + 1 < written:
            # A continued answer: the chart holds the last Continue's steps only.
            return (
                f"{LATENCY_CAPTION}: tokens 2–{points + 1} of the {points + 1} the last "
                "Continue wrote (its token 1's is its TTFT)"
            )
        last = max(written, points + 1)
        return f"{LATENCY_CAPTION}: tokens 2–{last} of the {last} written (token 1's is the TTFT)"

    # ---- warm-up ----------------------------------------------------------------------------
    def show_warm_up(self, progress: WarmUpProgress) -> None:
        """The device's first runs before an answer: a phase of its own, with its progress."""
        if not self._warm_timer.isActive():
            self._warm_started = time.monotonic() - progress.elapsed_s
            self._warm_timer.start()
        self.warm_up_bar.setRange(0, progress.steps)
        self.warm_up_bar.setValue(progress.done)
        self.warm_up_bar.show()
        self.warm_up_note.show()
        if progress.finished:
            self._finish_warm_up(progress.elapsed_s)
        else:
            self._tick_warm_up()

    @property
    def warming_up(self) -> bool:
        return self._warm_timer.isActive()

    @Slot()
    def _tick_warm_up(self) -> None:
        self.warm_up_note.setText(WARMING.format(seconds=time.monotonic() - self._warm_started))

    def _finish_warm_up(self, seconds: float | None = None) -> None:
        self._warm_timer.stop()
        self._warm_seconds = (
            seconds if seconds is not None else time.monotonic() - self._warm_started
        )
        self.warm_up_bar.hide()
        self.warm_up_note.setText(WARMED.format(seconds=self._warm_seconds))
        self.warm_up_note.show()

    # ---- context and latencies ----------------------------------------------------------------
    def set_context(self, used: int, total: int, dropped: int = 0, model: str = "") -> None:
        """`used` of `total` tokens; `dropped`: the oldest messages that count leaves out;
        `model`: whose tokenizer counted them (not compared with another model's cache)."""
        self._context_used, self._context_dropped = used, dropped
        self._context_model = model
        self.context_value.setText(fmt.context_usage(used, total))
        self.context_caption.setToolTip(
            f"Tokens of the conversation the model reads, out of the {total} this app sets "
            "aside for it (the model may allow more: the status bar says so when a model "
            f"loads). {POLICY_TEXT}"
            if total
            else POLICY_TEXT
        )
        self.context_bar.setRange(0, max(1, total))
        self.context_bar.setValue(min(used, max(1, total)))
        text = context_note(self.figures, used, self.writing, dropped, model)
        self.context_note.setText(text)
        self.context_note.setVisible(bool(text))

    def add_latencies(self, first_index: int, latencies_s: Sequence[float]) -> None:
        self.latency_chart.add(first_index, latencies_s)
        self.latency_caption.setText(self._latency_caption())
