"""The side panel: the live figures (live_figures.py), the loop toggle (loop_toggle.py),
device and threads, sampling and the system prompt."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSettings, Qt, Signal, Slot
from PySide6.QtGui import QHideEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.devices import CPU, Device
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.guards import DEFAULT_PRECISION, PRECISIONS
from chatapp.engine.model_description import ModelSampling
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.controller import GenerationOptions
from chatapp.gui.chat.live_figures import LiveFigures
from chatapp.gui.chat.loop_toggle import LOCKED_TIP, LoopToggle
from chatapp.gui.chat.sampling_box import SamplingBox
from chatapp.gui.chat.sections import PanelSections
from chatapp.gui.chat.speculative_option import SETTINGS_KEY as SPECULATIVE_KEY
from chatapp.gui.chat.speculative_option import SpeculativeOption
from chatapp.gui.chat.system_prompt_box import SystemPromptBox
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.settings import read_flag, read_int, read_text
from chatapp.gui.common.theme import warning_label
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session.formatting import DEVICE_NAMES, REMOTE
from chatapp.session.loop_notes import (
    PRECISION_NAMES,
    PRECISION_TIP,
    LoadedDevice,
    device_name,
)

# The figures another feature may rewrite (a remote server's client greys what it cannot
# measure): set_figure and figure_tip name them so.
FIGURES = ("ttft", "tokens_per_second", "perplexity", "prompt_perplexity", "transfer", "context")


class SidePanel(QWidget):
    """Other features use the methods and signals listed in tests/test_architecture.py
    (SIDE_PANEL_API), never the widgets inside."""

    sig_mode_changed = Signal(str)
    sig_device_changed = Signal(str)
    sig_threads_changed = Signal(object)  # int | None
    sig_precision_changed = Signal(str)  # guards.PRECISIONS
    sig_speculative_changed = Signal(bool)
    # The figures were (re)written: a remote backend greys what it cannot measure (gui/remote).
    sig_figures_shown = Signal(object)  # AnswerFigures, or None when cleared for an answer
    # What the next answer sends changed: its token limit or the system prompt (the history
    # measures the context again).
    sig_request_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidePanel")
        self._settings: QSettings | None = None
        self._loop_unavailable: str | None = None
        self._precision_unavailable: str | None = None  # no GGUF kernels: no choice
        self._local_tips: dict[QWidget, str] = {}  # while the loop is unavailable
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(4)
        self.figures_box = self._build_figures()
        self.loop_box = self._build_loop()
        sampling, system = self._build_sampling(), self._build_system_prompt()
        boxes = (self.figures_box, self.loop_box, sampling, system)
        # Each box folds to its header (a one-line summary beside it): all four open are
        # about twice a 1366x768 screen's height (sections.py keeps the open ones fitting).
        changes = (
            self.sig_mode_changed,
            self.sig_device_changed,
            self.sig_precision_changed,
            self.sig_figures_shown,
            self.sig_request_changed,
        )
        self.sections = PanelSections(self, self, boxes, changes)
        self.figures_box.notes_section.sig_toggled.connect(self._on_notes_toggled)
        layout.addStretch(1)

    # ---- building -------------------------------------------------------------------------
    def _build_figures(self) -> LiveFigures:
        return LiveFigures(self)

    def _build_loop(self) -> QGroupBox:
        box = QGroupBox("Generation loop and device", self)
        form = QVBoxLayout(box)
        self.loop_toggle = LoopToggle(box)
        self.loop_toggle.sig_mode_changed.connect(self._on_mode_changed)
        form.addWidget(self.loop_toggle)
        self.speculative_option = SpeculativeOption(box)
        self.speculative_option.sig_changed.connect(self._on_speculative_changed)
        form.addWidget(self.speculative_option)
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
        self.precision_selector = QComboBox(box)
        self.precision_selector.setObjectName("precisionSelector")
        for precision in PRECISIONS:
            self.precision_selector.addItem(PRECISION_NAMES[precision], precision)
        self.precision_selector.setToolTip(PRECISION_TIP)
        self.precision_selector.currentIndexChanged.connect(self._on_precision_index_changed)
        row.addRow("Precision", self.precision_selector)
        ignore_wheel_unless_focused(
            self.device_selector, self.threads_spin, self.precision_selector
        )
        form.addLayout(row)
        self.fallback_label = warning_label(box, "deviceFallbackLabel")
        form.addWidget(self.fallback_label)
        self._threads_applied = 0
        return box

    def _build_sampling(self) -> SamplingBox:
        self.sampling_box = box = SamplingBox(self)
        box.sig_changed.connect(self._save)
        box.max_tokens_spin.valueChanged.connect(lambda _v: emit(self.sig_request_changed))
        box.tools.sig_changed.connect(lambda: emit(self.sig_request_changed))
        return box

    def _build_system_prompt(self) -> SystemPromptBox:
        self.system_prompt_box = box = SystemPromptBox(self)
        box.sig_changed.connect(self._save)
        box.edit.textChanged.connect(lambda: emit(self.sig_request_changed))
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
            self.system_prompt_box.text(),
            self.sampling_box.json_answer.schema_text(),
            self.sampling_box.prompt.stops(),
            self.sampling_box.prompt.prompt_style(),
            self.sampling_box.tools.tools(),
            self.sampling_box.tools.choice(),
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

    def precision(self) -> str:  # how the GGUF kernels multiply, guards.PRECISIONS
        return str(self.precision_selector.currentData() or DEFAULT_PRECISION)

    def set_precision(self, precision: str) -> None:
        """Select `precision` without a reload (a model's remembered one, before it loads)."""
        index = self.precision_selector.findData(precision)
        self.precision_selector.blockSignals(True)
        self.precision_selector.setCurrentIndex(max(0, index))
        self.precision_selector.blockSignals(False)

    def set_precision_unavailable(self, reason: str | None) -> None:
        """Grey the precision with `reason` where no GGUF kernels run; None: a choice again."""
        self._precision_unavailable = reason
        self.precision_selector.setEnabled(reason is None)
        self.precision_selector.setToolTip(reason or PRECISION_TIP)

    def precision_applies(self) -> bool:  # GGUF kernels of a local model, locked or not
        return self._precision_unavailable is None and self._loop_unavailable is None

    def speculative(self) -> bool:  # whether the next answers draft (engine/speculative.py)
        return self.speculative_option.enabled()

    def set_speculative_unavailable(self, reason: str | None) -> None:
        """Grey speculative decoding with why it cannot run on this model; None: it can."""
        self.speculative_option.set_unavailable(reason)

    def set_fallback_reason(self, reason: str | None) -> None:
        self.fallback_label.setText(reason or "")
        self.fallback_label.setVisible(bool(reason))

    def set_generating(self, generating: bool) -> None:
        """Loop, device and threads change whole answers only: lock them while one streams."""
        self.loop_toggle.set_locked(generating)
        self.speculative_option.set_locked(generating, LOCKED_TIP)
        for widget, tip in (
            (self.device_selector, "Where ONNX Runtime runs the model (reloads it)"),
            (self.threads_spin, "ONNX Runtime intra-op threads (Auto: one per core)"),
            (self.precision_selector, self._precision_unavailable or PRECISION_TIP),
        ):
            widget.setEnabled(not generating)
            widget.setToolTip(LOCKED_TIP if generating else tip)
        if self._precision_unavailable is not None:  # greyed for its own reason, answering or not
            self.precision_selector.setEnabled(False)
        self.set_loop_unavailable(self._loop_unavailable)

    def set_loop_unavailable(self, reason: str | None) -> None:
        """Grey the loop, device and threads with `reason` as every control's tooltip (a remote
        server runs its own); None: usable again."""
        self._loop_unavailable = reason
        self.loop_box.setEnabled(reason is None)  # a disabled box greys every control in it
        controls = tuple(self.loop_toggle.buttons.values())
        engine = (self.device_selector, self.threads_spin, self.precision_selector)
        for widget in (*controls, *engine):
            if reason is not None:
                self._local_tips.setdefault(widget, widget.toolTip())
                widget.setToolTip(reason)
            elif widget in self._local_tips:
                widget.setToolTip(self._local_tips.pop(widget))

    def set_loading(self, loading: bool) -> None:
        self.device_selector.setEnabled(not loading)
        self.threads_spin.setEnabled(not loading)
        self.precision_selector.setEnabled(not loading and self._precision_unavailable is None)

    # ---- figures (live_figures.py) ---------------------------------------------------------
    def set_context(
        self, used: int, total: int, tip: str | None = None, dropped: int = 0, model: str = ""
    ) -> None:
        """`used` of `total` tokens; `tip`: what the count holds, on the figure and its bar
        ("": none; None: the tooltips stay); `dropped`: the oldest messages it leaves out;
        `model`: whose tokenizer counted them."""
        self.figures_box.set_context(used, total, dropped, model)
        self.sections.schedule()
        if tip is not None:
            self.figures_box.context_value.setToolTip(tip)
            if tip:
                self.figures_box.context_bar.setToolTip(tip)

    def set_figure(
        self,
        key: str,
        *,
        text: str | None = None,
        tip: str | None = None,
        enabled: bool | None = None,
    ) -> None:
        """Rewrite one of FIGURES: its text, tooltip, or whether it shows as available."""
        label = self._figure(key)
        if text is not None:
            label.setText(text)
        if tip is not None:
            label.setToolTip(tip)
        if enabled is not None:
            label.setEnabled(enabled)

    def figure_tip(self, key: str) -> str:
        return self._figure(key).toolTip()

    def _figure(self, key: str) -> QLabel:
        box = self.figures_box
        labels = dict(
            zip(
                FIGURES,
                (
                    box.ttft_value,
                    box.tokens_per_second_value,
                    box.perplexity_value,
                    box.prompt_perplexity_value,
                    box.transfer_value,
                    box.context_value,
                ),
                strict=True,
            )
        )
        return labels[key]

    def loaded(self) -> LoadedDevice:
        """What the next answer runs on, as the figures describe it."""
        return self.figures_box.loaded

    def set_loaded(self, loaded: LoadedDevice) -> None:
        self.figures_box.set_loaded(loaded)

    # ---- where other features add to the panel ------------------------------------------------
    def add_backend_box(self, box: QWidget) -> None:
        """A box on what answers (a remote server's), under the figures."""
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)
        layout.insertWidget(layout.indexOf(self.sections["figures"]) + 1, box)
        self.sections.watch(box)  # it shows: the sections fold to make room

    def add_loop_note(self, note: QWidget) -> None:
        """A note under the loop, device and threads (why they do not apply)."""
        layout = self.loop_box.layout()
        if layout is not None:
            layout.addWidget(note)

    def loop_title(self) -> str:
        return self.sections["loop"].title()

    def set_loop_title(self, title: str) -> None:
        self.sections["loop"].set_title(title)

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
        self.speculative_option.show_figures(None)
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
        self.speculative_option.show_figures(s)
        emit(self.sig_figures_shown, s)

    def finish_answer(self, s: AnswerFigures | None) -> None:
        if s is not None:
            self.figures_box.show_stats(s)
        self.speculative_option.show_figures(s, finished=True)
        self.figures_box.finish_answer()
        emit(self.sig_figures_shown, s)

    def add_latencies(self, first_index: int, latencies_s: Sequence[float]) -> None:
        self.figures_box.add_latencies(first_index, latencies_s)

    # ---- persistence ----------------------------------------------------------------------
    def restore(self, settings: QSettings) -> None:
        """Load the last session's choices, then save every later change to `settings`."""
        self._settings = None  # no saving while we fill the widgets
        self.sampling_box.restore(settings)
        self.set_mode(read_text(settings, "engine/mode", Mode.IOBINDING.value))
        self.set_device(read_text(settings, "engine/device", "cpu"))
        spin = self.threads_spin
        spin.setValue(read_int(settings, "engine/threads", 0, spin.minimum(), spin.maximum()))
        self.speculative_option.set_enabled(read_flag(settings, SPECULATIVE_KEY, True))
        self._threads_applied = self.threads_spin.value()
        edit = self.system_prompt_box.edit
        prompt = read_text(settings, "chat/system_prompt", "", edit.max_chars)
        self.system_prompt_box.set_text("" if edit.too_long(prompt) else prompt)
        self.sections.restore(settings)
        self._settings = settings

    @Slot(bool)
    def _on_notes_toggled(self, open_: bool) -> None:
        if open_:
            self.sections.fit(keep="figures")
        self._save()

    def hideEvent(self, event: QHideEvent) -> None:
        # The system prompt's own hide does not come while its section is folded: a change
        # still waiting for typing to pause is saved as the panel goes (the window closing).
        if self.system_prompt_box.pending:
            self.system_prompt_box.flush()
        super().hideEvent(event)

    def save_now(self) -> None:
        """Save the choices now (a section folded or opened)."""
        self._save()

    @Slot()
    def _save(self) -> None:
        settings = self._settings
        if settings is None:
            return
        self.sampling_box.save(settings)
        settings.setValue("engine/mode", self.mode().value)
        settings.setValue("engine/device", self.device())
        settings.setValue("engine/threads", self.threads_spin.value())
        settings.setValue(SPECULATIVE_KEY, self.speculative())
        settings.setValue("chat/system_prompt", self.system_prompt_box.text())
        self.sections.save(settings)

    @Slot(str)
    def _on_mode_changed(self, mode: str) -> None:
        self.figures_box.set_next_mode(mode)
        self._save()
        emit(self.sig_mode_changed, mode)

    @Slot(int)
    def _on_device_index_changed(self, _index: int) -> None:
        self._save()
        emit(self.sig_device_changed, self.device())

    @Slot(bool)
    def _on_speculative_changed(self, on: bool) -> None:
        self._save()
        emit(self.sig_speculative_changed, on)

    @Slot(int)
    def _on_precision_index_changed(self, _index: int) -> None:
        # Remembered per model by the loading (gui/chat/loading.py), which reloads it.
        emit(self.sig_precision_changed, self.precision())

    @Slot()
    def _on_threads_edited(self) -> None:
        # editingFinished, not valueChanged: a reload per arrow click would be wasteful.
        if self.threads_spin.value() != self._threads_applied:
            self._threads_applied = self.threads_spin.value()
            self._save()
            emit(self.sig_threads_changed, self.threads())
