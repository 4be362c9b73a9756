"""The side panel: the live figures (live_figures.py), the loop toggle, device and threads,
sampling and the system prompt."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractButton,
    QButtonGroup,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.devices import CPU, Device
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.model_folder.sampling_defaults import ModelSampling
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.controller import GenerationOptions
from chatapp.gui.chat.live_figures import LiveFigures
from chatapp.gui.chat.sampling_box import SamplingBox
from chatapp.gui.chat.system_prompt_box import SystemPromptBox
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, on_theme, warning_label
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session.formatting import DEVICE_NAMES, REMOTE
from chatapp.session.loop_notes import (
    LOOP_TIPS,
    LoadedDevice,
    device_name,
)

LOCKED_TIP = "Applies to whole answers: wait for this one to finish or press Stop."


def segment_style(c: ThemeColors) -> str:
    """The segments in the palette's colours: the checked one in the selection colour."""
    return f"""
QPushButton {{ border: 1px solid {c.border.name()}; padding: 5px 6px;
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
            button.setToolTip(LOOP_TIPS.get(mode, mode.description))
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
            button.setToolTip(LOCKED_TIP if locked else LOOP_TIPS.get(mode, mode.description))

    @Slot(QAbstractButton, bool)
    def _on_toggled(self, _button: QAbstractButton, checked: bool) -> None:
        if checked:
            emit(self.sig_mode_changed, self.mode())


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
    def _build_figures(self) -> LiveFigures:
        box = LiveFigures(self)
        # By their old names: the history, the remote figures and tests read them.
        self.tokens_per_second_value = box.tokens_per_second_value
        self.ttft_value = box.ttft_value
        self.perplexity_value = box.perplexity_value
        self.prompt_perplexity_value = box.prompt_perplexity_value
        self.transfer_value = box.transfer_value
        self.transfer_note = box.transfer_note
        self.context_value = box.context_value
        self.context_bar = box.context_bar
        self.latency_chart = box.latency_chart
        return box

    def _build_loop(self) -> QGroupBox:
        box = QGroupBox("Generation loop and device", self)
        form = QVBoxLayout(box)
        self.loop_toggle = LoopToggle(box)
        self.loop_toggle.sig_mode_changed.connect(self._on_mode_changed)
        form.addWidget(self.loop_toggle)
        row = QFormLayout()
        # In a narrow panel the device box goes under its label, at the panel's full width.
        row.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.device_selector = QComboBox(box)
        self.device_selector.setObjectName("deviceSelector")
        # Adapter names can be long ("llvmpipe (LLVM 15.0.6, 256 bits)"): the box keeps the
        # panel's width and each item's tooltip shows the whole name.
        self.device_selector.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.device_selector.setMinimumContentsLength(16)
        # The CPU until the window's device probe (a job on its tool thread) says what runs
        # here; meanwhile the device asked for (saved, or --device) is kept as it is.
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
            self.sampling_box.prompt.stops(),
            self.sampling_box.prompt.prompt_style(),
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
            # A short name in the box, so that it and its list fit a narrow panel.
            short = device_name(device.name) if device.name in DEVICE_NAMES else device.label
            if device.software:
                short = short.replace(")", ", slow)") if short.endswith(")") else f"{short} (slow)"
            self.device_selector.addItem(short, device.name)
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

    # ---- figures (live_figures.py) ---------------------------------------------------------
    def set_context(self, used: int, total: int) -> None:
        self.figures_box.set_context(used, total)

    def set_device_memory(
        self,
        own_memory: bool,
        device_label: str,
        kv_bytes_per_token: int = 0,
        device: str | None = None,
        model: str | None = None,
    ) -> None:
        """What the next answer runs on: an answer already shown keeps its own words."""
        name = device or ("gpu" if own_memory else "cpu")
        self.figures_box.set_loaded(
            LoadedDevice(name, device_label, own_memory, kv_bytes_per_token, model)
        )

    def start_answer(self) -> None:
        """No answer's figures: a new chat, or another conversation opened."""
        self.figures_box.start_answer()
        emit(self.sig_figures_shown, None)

    def begin_answer(self) -> None:
        """An answer starts: its figures, labelled with the loop and device it runs on."""
        loaded = self.figures_box.loaded
        remote = loaded.name == REMOTE
        self.figures_box.start_answer(
            AnswerFigures(
                mode=REMOTE if remote else self.mode(), device=loaded.name, model=loaded.model
            )
        )
        emit(self.sig_figures_shown, None)

    def show_warm_up(self, progress: WarmUpProgress) -> None:
        self.figures_box.show_warm_up(progress)

    def show_stats(self, s: AnswerFigures) -> None:
        self.figures_box.show_stats(s)
        emit(self.sig_figures_shown, s)

    def finish_answer(self, s: AnswerFigures | None) -> None:
        if s is not None:
            self.figures_box.show_stats(s)
        self.figures_box.finish_answer()
        emit(self.sig_figures_shown, s)

    def add_latencies(self, first_index: int, latencies_s: Sequence[float]) -> None:
        self.figures_box.add_latencies(first_index, latencies_s)

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
        self.figures_box.set_next_mode(mode)
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
