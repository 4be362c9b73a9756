"""The side panel: live figures, the latency chart, the loop toggle, device and sampling."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, QSettings, Qt, Signal, Slot
from PySide6.QtGui import QFont, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractButton,
    QButtonGroup,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.devices import CPU, Device
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.model_folder.sampling_defaults import ModelSampling
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.chat.controller import GenerationOptions
from chatapp.gui.chat.sampling_box import SamplingBox
from chatapp.gui.chat.system_prompt_box import SystemPromptBox
from chatapp.gui.common.chart_style import (
    EmptyHint,
    mark_outliers,
    outlier_series,
    robust_top,
    style_chart,
)
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, muted, on_theme, warning_label
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session import formatting as fmt
from chatapp.session.context import POLICY_TEXT
from chatapp.units import fmt_bytes

LOCKED_TIP = "Applies to whole answers: wait for this one to finish or press Stop."


def segment_style(c: ThemeColors) -> str:
    """The segments in the palette's colours: the checked one in the selection colour."""
    return f"""
QPushButton {{ border: 1px solid {c.border.name()}; padding: 5px 10px;
    background: {c.base.name()}; color: {c.base_text.name()}; }}
QPushButton:checked {{ background: {c.accent.name()}; color: {c.accent_text.name()};
    border-color: {c.accent.name()}; }}
QPushButton:disabled {{ color: {c.disabled.name()}; }}
QPushButton:checked:disabled {{ background: {c.accent_disabled.name()};
    color: {c.accent_disabled_text.name()}; border-color: {c.accent_disabled.name()}; }}
QPushButton[segment="first"] {{
    border-top-left-radius: 5px; border-bottom-left-radius: 5px; border-right: none; }}
QPushButton[segment="middle"] {{ border-right: none; }}
QPushButton[segment="last"] {{
    border-top-right-radius: 5px; border-bottom-right-radius: 5px; }}
"""


def mode_button_name(mode: Mode) -> str:
    """The object name of a loop's button, from its label: "modeNoCacheButton", ..."""
    words = mode.label.replace("-", " ").split()
    return "mode" + "".join(w[:1].upper() + w[1:] for w in words) + "Button"


class LoopToggle(QWidget):
    """A segmented control with one button per loop, in Mode's order: No cache | Naive |
    IO-Binding."""

    sig_mode_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.buttons: dict[Mode, QPushButton] = {}
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for mode in MODES:
            button = QPushButton(mode.label, self)
            button.setObjectName(mode_button_name(mode))
            button.setToolTip(mode.description)
            last = len(MODES) - 1
            button.setProperty(
                "segment",
                "first" if mode.order == 0 else "last" if mode.order == last else "middle",
            )
            button.setCheckable(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            self.group.addButton(button)
            layout.addWidget(button, 1)
            self.buttons[mode] = button
        self.naive_button = self.buttons[Mode.NAIVE]
        self.iobinding_button = self.buttons[Mode.IOBINDING]
        on_theme(self, lambda c: self.setStyleSheet(segment_style(c)))
        self.iobinding_button.setChecked(True)
        self.group.buttonToggled.connect(self._on_toggled)

    def mode(self) -> Mode:
        return next((m for m, b in self.buttons.items() if b.isChecked()), Mode.IOBINDING)

    def set_mode(self, mode: str) -> None:
        self.buttons[Mode(mode) if mode in MODES else Mode.IOBINDING].setChecked(True)

    def set_locked(self, locked: bool) -> None:
        for mode, button in self.buttons.items():
            button.setEnabled(not locked)
            button.setToolTip(LOCKED_TIP if locked else mode.description)

    @Slot(QAbstractButton, bool)
    def _on_toggled(self, _button: QAbstractButton, checked: bool) -> None:
        if checked:
            emit(self.sig_mode_changed, self.mode())


class LatencyChart(QChartView):
    """Per-token latency of the answer being written (ms), one point per decode step."""

    def __init__(self, parent: QWidget | None = None) -> None:
        chart = QChart()
        super().__init__(chart, parent)
        self.setObjectName("latencyChart")
        self.series = QLineSeries()
        self.series.setName("latency")
        chart.addSeries(self.series)
        chart.legend().hide()
        chart.setMargins(QMargins(0, 0, 0, 0))
        chart.setBackgroundRoundness(0)
        small = QFont(self.font())
        small.setPointSizeF(max(6.5, self.font().pointSizeF() - 2))
        self.x_axis = QValueAxis()
        self.x_axis.setLabelFormat("%d")
        self.x_axis.setTitleText("token")
        self.y_axis = QValueAxis()
        self.y_axis.setLabelFormat("%.0f")
        self.y_axis.setTitleText("ms")
        for axis, side in (
            (self.x_axis, Qt.AlignmentFlag.AlignBottom),
            (self.y_axis, Qt.AlignmentFlag.AlignLeft),
        ):
            axis.setLabelsFont(small)
            axis.setTitleFont(small)
            axis.setTickCount(3)
            chart.addAxis(axis, side)
            self.series.attachAxis(axis)
        self.outliers = outlier_series(self.series.color())
        chart.addSeries(self.outliers)
        self.outliers.attachAxis(self.x_axis)
        self.outliers.attachAxis(self.y_axis)
        self.hint = EmptyHint(chart, "Latencies appear as an answer is written", chart.axes())
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(124)
        on_theme(self, self._style)
        self.clear()

    def _style(self, c: ThemeColors) -> None:
        style_chart(self.chart(), c)
        line = c.loops["iobinding"]
        self.series.setPen(QPen(line, 1.6))
        self.outliers.setColor(line)
        self.outliers.setBorderColor(line)
        self.hint.style(c)

    def clear(self) -> None:
        self.series.clear()
        self.outliers.clear()
        self._values_ms: list[float] = []
        self.x_axis.setRange(0, 16)
        self.y_axis.setRange(0, 50)
        self.hint.set_empty(True)

    def add(self, first_index: int, latencies_s: Sequence[float]) -> None:
        points = [
            QPointF(first_index + i, s * 1000.0)
            for i, s in enumerate(latencies_s)
            if first_index + i > 0  # token 0's latency is the TTFT, shown on its own
        ]
        if not points:
            return
        self.series.append(points)
        self._values_ms += [p.y() for p in points]
        last = points[-1].x()
        self.x_axis.setRange(0, max(16.0, last))
        # One slow token (a page fault, another program) must not flatten the line: the scale
        # ignores the top 5 % and marks what is above it at the top edge.
        top = robust_top(self._values_ms, 10.0)
        self.y_axis.setRange(0, top)
        # Round tick labels (0, 20, 40 rather than 0, 23, 46).
        self.x_axis.applyNiceNumbers()
        self.y_axis.applyNiceNumbers()
        mark_outliers(self.series, self.outliers, self.y_axis.max())
        self.hint.set_empty(False)

    @property
    def point_count(self) -> int:
        return self.series.count()


TRANSFER_TIP = "Bytes crossing between host and device memory per generated token"


class SidePanel(QWidget):
    sig_mode_changed = Signal(str)
    sig_device_changed = Signal(str)
    sig_threads_changed = Signal(object)  # int | None
    # The figures were (re)written: a remote backend greys what it cannot measure (gui/remote).
    sig_figures_shown = Signal(object)  # AnswerFigures, or None when cleared for an answer

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidePanel")
        self._settings: QSettings | None = None
        self._loop_unavailable: str | None = None
        self._local_tips: dict[QWidget, str] = {}  # while the loop is unavailable
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(4)
        self.figures_box = self._build_figures()
        self.loop_box = self._build_loop()
        layout.addWidget(self.figures_box)
        layout.addWidget(self.loop_box)
        layout.addWidget(self._build_sampling())
        layout.addWidget(self._build_system_prompt(), 1)

    # ---- building -------------------------------------------------------------------------
    def _value_label(self, name: str) -> QLabel:
        label = QLabel(fmt.MISSING, self)
        label.setObjectName(name)
        font = label.font()
        font.setPointSizeF(font.pointSizeF() + 3)
        font.setWeight(QFont.Weight.DemiBold)
        label.setFont(font)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    def _build_figures(self) -> QGroupBox:
        box = QGroupBox("Live figures", self)
        grid = QGridLayout(box)
        grid.setHorizontalSpacing(12)
        self.tokens_per_second_value = self._value_label("tokensPerSecondValue")
        self.ttft_value = self._value_label("ttftValue")
        self.perplexity_value = self._value_label("perplexityValue")
        self.prompt_perplexity_value = self._value_label("promptPerplexityValue")
        cells = (
            ("Tokens/s", self.tokens_per_second_value, "Decode speed (prefill excluded)"),
            ("TTFT (ms)", self.ttft_value, "Time to first token: prefill and the first sample"),
            ("Perplexity", self.perplexity_value, "exp(mean NLL) of the generated tokens"),
            (
                "Prompt perplexity",
                self.prompt_perplexity_value,
                "The same for the new prompt, from a quarter (at most 64) of its tokens",
            ),
        )
        for i, (caption, value, tip) in enumerate(cells):
            value.setAccessibleName(caption)
            label = QLabel(caption, box)
            muted(label)
            label.setToolTip(tip)
            value.setToolTip(tip)
            grid.addWidget(label, (i // 2) * 2, i % 2)
            grid.addWidget(value, (i // 2) * 2 + 1, i % 2)
        transfer_caption = QLabel("Host↔device per token", box)
        muted(transfer_caption)
        transfer_caption.setToolTip(TRANSFER_TIP)
        self.transfer_value = self._value_label("transferValue")
        self.transfer_value.setAccessibleName("Host↔device per token")
        self.transfer_value.setToolTip(TRANSFER_TIP)
        self.transfer_note = QLabel("", box)
        self.transfer_note.setObjectName("transferNote")
        self.transfer_note.setWordWrap(True)
        # Its long text must wrap to the panel, not widen it (the panel's width comes from the
        # figures and the controls).
        self.transfer_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        muted(self.transfer_note)
        grid.addWidget(transfer_caption, 4, 0, 1, 2)
        grid.addWidget(self.transfer_value, 5, 0, 1, 2)
        grid.addWidget(self.transfer_note, 6, 0, 1, 2)
        self._own_memory = False
        context_caption = QLabel("Context used (tokens)", box)
        muted(context_caption)
        context_caption.setToolTip(POLICY_TEXT)  # what happens when the context fills up
        self.context_value = QLabel(fmt.MISSING, box)
        self.context_value.setObjectName("contextValue")
        self.context_bar = QProgressBar(box)
        self.context_bar.setObjectName("contextBar")
        self.context_bar.setTextVisible(False)
        self.context_bar.setMaximumHeight(6)
        self.context_bar.setRange(0, 1)
        self.context_bar.setValue(0)
        grid.addWidget(context_caption, 7, 0)
        grid.addWidget(self.context_value, 7, 1, Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.context_bar, 8, 0, 1, 2)
        chart_caption = QLabel("Per-token latency", box)
        muted(chart_caption)
        grid.addWidget(chart_caption, 9, 0, 1, 2)
        self.latency_chart = LatencyChart(box)
        grid.addWidget(self.latency_chart, 10, 0, 1, 2)
        return box

    def _build_loop(self) -> QGroupBox:
        box = QGroupBox("Generation loop and device", self)
        form = QVBoxLayout(box)
        self.loop_toggle = LoopToggle(box)
        self.loop_toggle.sig_mode_changed.connect(self._on_mode_changed)
        form.addWidget(self.loop_toggle)
        row = QFormLayout()
        self.device_selector = QComboBox(box)
        self.device_selector.setObjectName("deviceSelector")
        # Adapter names can be long ("llvmpipe (LLVM 15.0.6, 256 bits)"): the box keeps the
        # panel's width and the open list and each item's tooltip show the whole name.
        self.device_selector.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.device_selector.setMinimumContentsLength(18)
        # The CPU until the window's device probe (a job on its tool thread) says what runs
        # here; meanwhile the device asked for (saved, or --device) is kept as it is.
        self.devices_known = False
        self._wanted_device = "cpu"
        self.set_devices([CPU])
        self.devices_known = False
        self.device_selector.currentIndexChanged.connect(self._on_device_index_changed)
        row.addRow("Device", self.device_selector)
        self.threads_spin = QSpinBox(box)
        self.threads_spin.setObjectName("threadsSpin")
        self.threads_spin.setRange(0, 256)
        self.threads_spin.setSpecialValueText("Auto")
        self.threads_spin.setToolTip("ONNX Runtime intra-op threads (Auto: one per core)")
        self.threads_spin.editingFinished.connect(self._on_threads_edited)
        row.addRow("Threads", self.threads_spin)
        ignore_wheel_unless_focused(self.device_selector, self.threads_spin)
        form.addLayout(row)
        self.fallback_label = warning_label(box, "deviceFallbackLabel")
        form.addWidget(self.fallback_label)
        self._threads_applied = 0
        return box

    def _build_sampling(self) -> SamplingBox:
        self.sampling_box = box = SamplingBox(self)
        # The spin boxes by their old names: the history and scripts set them.
        self.temperature_spin = box.temperature_spin
        self.top_p_spin = box.top_p_spin
        self.top_k_spin = box.top_k_spin
        self.repetition_spin = box.repetition_spin
        self.max_tokens_spin = box.max_tokens_spin
        self.seed_spin = box.seed_spin
        box.sig_changed.connect(self._save)
        return box

    def _build_system_prompt(self) -> SystemPromptBox:
        self.system_prompt_box = box = SystemPromptBox(self)
        self.system_prompt_edit = box.edit
        box.sig_changed.connect(self._save)
        return box

    # ---- what the next answer uses ------------------------------------------------------------
    def sampling_settings(self) -> SamplingSettings:
        return self.sampling_box.settings()

    def set_model_sampling(self, sampling: ModelSampling | None) -> None:
        """A model was loaded: its suggested sampling, under what the user chose."""
        if sampling is not None:
            self.sampling_box.set_model_defaults(sampling)

    def options(self) -> GenerationOptions:
        return GenerationOptions(
            self.sampling_settings(),
            self.mode(),
            self.system_prompt_edit.toPlainText(),
            self.sampling_box.json_answer.schema_text(),
        )

    def mode(self) -> Mode:
        return self.loop_toggle.mode()

    def set_mode(self, mode: str) -> None:
        self.loop_toggle.set_mode(mode)

    def preselect(self, mode: str | None = None, device: str | None = None) -> None:
        """Command-line choices: shown for this run, not saved over the user's own."""
        settings, self._settings = self._settings, None
        try:
            if mode:
                self.set_mode(mode)
            if device:
                self.set_device(device)
        finally:
            self._settings = settings

    def device(self) -> str:
        if not self.devices_known:
            return self._wanted_device
        return str(self.device_selector.currentData() or "cpu")

    def set_devices(self, devices: list[Device]) -> None:
        """The devices that run here (CPU last), with the one asked for selected if it is
        among them; no reload is asked for."""
        self.devices_known = True
        self.device_selector.blockSignals(True)
        self.device_selector.clear()
        for device in devices:
            self.device_selector.addItem(device.label, device.name)
            index = self.device_selector.count() - 1
            self.device_selector.setItemData(index, device.label, Qt.ItemDataRole.ToolTipRole)
        self.device_selector.blockSignals(False)
        self.set_device(self._wanted_device)

    def set_device(self, name: str) -> None:
        """Select `name` without asking for a reload (the caller loads the model itself)."""
        self._wanted_device = name.lower()
        index = self.device_selector.findData(name.lower())
        self.device_selector.blockSignals(True)
        self.device_selector.setCurrentIndex(
            index if index >= 0 else self.device_selector.count() - 1
        )
        self.device_selector.blockSignals(False)

    def threads(self) -> int | None:
        return self.threads_spin.value() or None

    def set_fallback_reason(self, reason: str | None) -> None:
        self.fallback_label.setText(reason or "")
        self.fallback_label.setVisible(bool(reason))

    def set_generating(self, generating: bool) -> None:
        """Loop, device and threads change whole answers only: lock them while one streams."""
        self.loop_toggle.set_locked(generating)
        for widget, tip in (
            (self.device_selector, "Where ONNX Runtime runs the model (reloads it)"),
            (self.threads_spin, "ONNX Runtime intra-op threads (Auto: one per core)"),
        ):
            widget.setEnabled(not generating)
            widget.setToolTip(LOCKED_TIP if generating else tip)
        self.set_loop_unavailable(self._loop_unavailable)

    def set_loop_unavailable(self, reason: str | None) -> None:
        """Grey the loop, device and threads with `reason` as every control's tooltip (a remote
        server runs its own); None: usable again."""
        self._loop_unavailable = reason
        self.loop_box.setEnabled(reason is None)  # a disabled box greys every control in it
        controls = tuple(self.loop_toggle.buttons.values())
        for widget in (*controls, self.device_selector, self.threads_spin):
            if reason is not None:
                self._local_tips.setdefault(widget, widget.toolTip())
                widget.setToolTip(reason)
            elif widget in self._local_tips:
                widget.setToolTip(self._local_tips.pop(widget))

    def set_loading(self, loading: bool) -> None:
        self.device_selector.setEnabled(not loading)
        self.threads_spin.setEnabled(not loading)

    # ---- figures --------------------------------------------------------------------------
    def set_context(self, used: int, total: int) -> None:
        self.context_value.setText(fmt.context_usage(used, total))
        self.context_bar.setRange(0, max(1, total))
        self.context_bar.setValue(min(used, max(1, total)))

    def set_device_memory(self, own_memory: bool, device_label: str) -> None:
        """Whether the loaded device has memory of its own: what the transfer figure means."""
        self._own_memory = own_memory
        self.transfer_value.setText(fmt.MISSING if own_memory else fmt_bytes(0))
        self.transfer_note.setText(
            f"On {device_label} the naive loop moves every layer's KV cache to the host and "
            "back for each token; IO-Binding moves only the token, the mask and the logits."
            if own_memory
            else "The CPU works in the host's own memory, so nothing crosses a bus. Pick a GPU "
            "or WebGPU device to see what the naive loop moves."
        )

    def start_answer(self) -> None:
        self.latency_chart.clear()
        for label in (
            self.tokens_per_second_value,
            self.ttft_value,
            self.perplexity_value,
            self.prompt_perplexity_value,
        ):
            label.setText(fmt.MISSING)
        if self._own_memory:
            self.transfer_value.setText(fmt.MISSING)
        emit(self.sig_figures_shown, None)

    def show_stats(self, s: AnswerFigures) -> None:
        self.tokens_per_second_value.setText(fmt.rate(s.tokens_per_s))
        self.ttft_value.setText(fmt.millis(s.ttft_s))
        self.perplexity_value.setText(fmt.perplexity(s.perplexity))
        self.prompt_perplexity_value.setText(fmt.perplexity(s.prompt_perplexity))
        self.set_context(s.tokens_in_context, s.context_length or 0)
        if (s.generated_tokens or 0) > 1 or not self._own_memory:  # decode steps, not the prompt
            self.transfer_value.setText(fmt_bytes(s.transfer_bytes_per_token))
            self.transfer_value.setToolTip(
                f"{TRANSFER_TIP}\nHost → device {fmt_bytes(s.h2d_bytes_per_token or 0)}, "
                f"device → host {fmt_bytes(s.d2h_bytes_per_token or 0)} (medians of the decode "
                "steps)"
            )
        emit(self.sig_figures_shown, s)

    def add_latencies(self, first_index: int, latencies_s: Sequence[float]) -> None:
        self.latency_chart.add(first_index, latencies_s)

    # ---- persistence ----------------------------------------------------------------------
    def restore(self, settings: QSettings) -> None:
        """Load the last session's choices, then save every later change to `settings`."""
        self._settings = None  # no saving while we fill the widgets
        self.sampling_box.restore(settings)
        self.set_mode(str(settings.value("engine/mode", Mode.IOBINDING)))
        self.set_device(str(settings.value("engine/device", "cpu")))
        self.threads_spin.setValue(_int(settings, "engine/threads", 0))
        self._threads_applied = self.threads_spin.value()
        self.system_prompt_box.set_text(str(settings.value("chat/system_prompt", "") or ""))
        self._settings = settings

    @Slot()
    def _save(self) -> None:
        settings = self._settings
        if settings is None:
            return
        self.sampling_box.save(settings)
        settings.setValue("engine/mode", self.mode().value)
        settings.setValue("engine/device", self.device())
        settings.setValue("engine/threads", self.threads_spin.value())
        settings.setValue("chat/system_prompt", self.system_prompt_edit.toPlainText())

    @Slot(str)
    def _on_mode_changed(self, mode: str) -> None:
        self._save()
        emit(self.sig_mode_changed, mode)

    @Slot(int)
    def _on_device_index_changed(self, _index: int) -> None:
        self._save()
        emit(self.sig_device_changed, self.device())

    @Slot()
    def _on_threads_edited(self) -> None:
        # editingFinished, not valueChanged: a reload per arrow click would be wasteful.
        if self.threads_spin.value() != self._threads_applied:
            self._threads_applied = self.threads_spin.value()
            self._save()
            emit(self.sig_threads_changed, self.threads())


def _int(settings: QSettings, key: str, default: int) -> int:
    try:
        return int(settings.value(key, default))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
