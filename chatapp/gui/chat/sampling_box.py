"""The side panel's sampling settings: a row of preset buttons (Precise / Balanced / Creative)
above the detailed values, a line saying where the values come from, and "Reset to model
defaults".

Each loaded model suggests its sampling (chatapp/engine/model_description.py). A
value the user sets, by hand or by picking a preset, is theirs: it is saved and kept when another
model is opened; the values the user never touched follow the model. Reset forgets the user's
values.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QSettings, Signal, Slot
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QWidget,
)

from chatapp.engine.model_description import SAMPLING_FIELDS, ModelSampling, matching_preset
from chatapp.engine.sampling import (
    PRESET_LABELS,
    PRESET_TIPS,
    PRESETS,
    SamplingSettings,
    chosen_sampling,
)
from chatapp.gui.chat.json_answer_box import JsonAnswerOption
from chatapp.gui.chat.prompt_option import PromptOption
from chatapp.gui.chat.tools_option import ToolsOption
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.settings import read_flag, read_int, read_text
from chatapp.gui.common.theme import ThemeColors, muted, on_theme
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session.prompt_style import MAX_STOP_CHARS, MAX_STOPS, format_stops, parse_stops

MAX_STOPS_CHARS = 4 * MAX_STOPS * (MAX_STOP_CHARS + 4)  # their text as saved, escapes and all
OVERRIDES_KEY = "sampling/overrides"  # the values the user chose, one key per field
# Settings of chatapp 0.1 saved every value; only those that differ from its defaults were
# the user's own choice.
OLD_DEFAULTS = {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.1}
MODEL_DEFAULT, CUSTOM = "model", "custom"
BEFORE_ANY_MODEL = ModelSampling(PRESETS["precise"], "the Precise preset", "precise")
# What each control does; at temperature 0 those that only shape the random draw do nothing.
TIPS = {
    "temperature": (
        "How adventurous the choice of each token is: 0 always takes the most likely one "
        "(greedy), higher values take less likely ones more often"
    ),
    "top_p": (
        "Draw only from the most likely tokens that together make up this share of the "
        "probability (1: all of them)"
    ),
    "top_k": "Draw only from this many of the most likely tokens (off: all of them)",
    "repetition_penalty": "Makes tokens already in the conversation less likely (off: 1)",
    "seed": "The same seed and settings write the same answer again (random: a new draw each time)",
}
GREEDY_TIP = (
    "No effect at temperature 0 (greedy): the most likely token is always taken, with no random "
    "draw to shape. Raise the temperature to use it."
)


class SamplingBox(QGroupBox):
    sig_changed = Signal()  # the user changed something (to save); not a new model's defaults

    def __init__(self, parent: QWidget | None = None) -> None:
        # Only "Sampling": folded, the line beside it says what the next answer uses.
        super().__init__("Sampling", parent)
        self.model = BEFORE_ANY_MODEL
        self.overrides: dict[str, float] = {}
        self._filling = False
        self.form = form = QFormLayout(self)
        # In a narrow panel a field goes under its label rather than widening the panel.
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        # One button per preset, in a row: the one the values equal is shown pressed, whether
        # the model suggested it or the user picked it (the line below says which).
        self.preset_buttons: dict[str, QPushButton] = {}
        preset_row = QHBoxLayout()
        preset_row.setSpacing(0)
        for name, label in PRESET_LABELS.items():
            button = QPushButton(label, self)
            button.setObjectName(f"samplingPreset{label}")
            button.setCheckable(True)
            button.setToolTip(PRESET_TIPS[name])
            button.setAccessibleName(f"{label} sampling preset")
            button.clicked.connect(lambda _checked=False, n=name: self.use_preset(n))
            preset_row.addWidget(button, 1)
            self.preset_buttons[name] = button
        on_theme(self, self._style_presets)
        self.reset_button = QPushButton("Reset to model defaults", self)
        self.reset_button.setObjectName("samplingResetButton")
        self.reset_button.setToolTip("Forget your sampling values: use what the model suggests")
        self.reset_button.clicked.connect(self.reset_to_model)
        self.source_label = QLabel("", self)
        self.source_label.setObjectName("samplingSourceLabel")
        self.source_label.setWordWrap(True)
        self.source_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        muted(self.source_label)

        self.temperature_spin = QDoubleSpinBox(self)
        self.temperature_spin.setObjectName("temperatureSpin")
        self.temperature_spin.setRange(0.0, 2.0)
        self.temperature_spin.setSingleStep(0.05)
        self.temperature_spin.setDecimals(2)
        self.temperature_spin.setSpecialValueText("0 (greedy)")
        self.top_p_spin = QDoubleSpinBox(self)
        self.top_p_spin.setObjectName("topPSpin")
        self.top_p_spin.setRange(0.01, 1.0)
        self.top_p_spin.setSingleStep(0.05)
        self.top_p_spin.setDecimals(2)
        self.top_k_spin = QSpinBox(self)
        self.top_k_spin.setObjectName("topKSpin")
        self.top_k_spin.setRange(0, 1000)
        self.top_k_spin.setSpecialValueText("off")
        self.repetition_spin = QDoubleSpinBox(self)
        self.repetition_spin.setObjectName("repetitionPenaltySpin")
        self.repetition_spin.setRange(1.0, 2.0)
        self.repetition_spin.setSingleStep(0.05)
        self.repetition_spin.setDecimals(2)
        self.repetition_spin.setSpecialValueText("off")
        self.max_tokens_spin = QSpinBox(self)
        self.max_tokens_spin.setObjectName("maxNewTokensSpin")
        self.max_tokens_spin.setRange(1, 8192)
        self.max_tokens_spin.setValue(SamplingSettings().max_new_tokens)
        self.seed_spin = QSpinBox(self)
        self.seed_spin.setObjectName("seedSpin")
        self.seed_spin.setRange(-1, 2**31 - 1)
        self.seed_spin.setMinimumWidth(self.seed_spin.fontMetrics().horizontalAdvance("0" * 7) + 30)
        self.seed_spin.setSpecialValueText("random")
        self.seed_spin.setValue(-1)
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {
            "temperature": self.temperature_spin,
            "top_k": self.top_k_spin,
            "top_p": self.top_p_spin,
            "repetition_penalty": self.repetition_spin,
        }
        form.addRow(preset_row)
        form.addRow(self.source_label)
        form.addRow(self.reset_button)
        form.addRow("Temperature", self.temperature_spin)
        form.addRow("Top-p", self.top_p_spin)
        form.addRow("Top-k", self.top_k_spin)
        form.addRow("Repetition penalty", self.repetition_spin)
        form.addRow("Max new tokens", self.max_tokens_spin)
        form.addRow("Seed", self.seed_spin)
        for field, spin in (*self.spins.items(), ("seed", self.seed_spin)):
            spin.setToolTip(TIPS[field])
        self.json_answer = JsonAnswerOption(self)
        self.json_answer.sig_changed.connect(self._on_plain_edit)
        form.addRow(self.json_answer)
        self.tools = ToolsOption(self)  # functions the model may call (per chat, not saved here)
        form.addRow(self.tools)
        self.prompt = PromptOption(self)  # chat or text continuation, stop strings
        self.prompt.sig_changed.connect(self._on_plain_edit)
        form.addRow(self.prompt)
        ignore_wheel_unless_focused(*self.spins.values())
        ignore_wheel_unless_focused(self.max_tokens_spin, self.seed_spin)
        for field, spin in self.spins.items():
            spin.valueChanged.connect(lambda _v, f=field: self._on_value_edited(f))
        self.temperature_spin.valueChanged.connect(self._show_greedy)
        self.max_tokens_spin.valueChanged.connect(self._on_plain_edit)
        self.seed_spin.valueChanged.connect(self._on_plain_edit)
        self._show(save=False)
        self._show_greedy()

    # ---- what the next answer uses ------------------------------------------------------------
    def settings(self) -> SamplingSettings:
        seed = self.seed_spin.value()
        return SamplingSettings(
            temperature=round(self.temperature_spin.value(), 4),
            top_k=self.top_k_spin.value(),
            top_p=round(self.top_p_spin.value(), 4),
            repetition_penalty=round(self.repetition_spin.value(), 4),
            seed=None if seed < 0 else seed,
            max_new_tokens=self.max_tokens_spin.value(),
        )

    def preset(self) -> str:
        """Where the values come from: model (its suggestion), or the user's precise,
        balanced, creative or custom."""
        if not self.overrides:
            return MODEL_DEFAULT
        return matching_preset(self.settings()) or CUSTOM

    def pressed_preset(self) -> str | None:
        """The preset button shown pressed: the preset the values equal, if any."""
        return next((n for n, b in self.preset_buttons.items() if b.isChecked()), None)

    # ---- the model's suggestion and the user's choices -------------------------------------
    def set_model_defaults(self, sampling: ModelSampling) -> None:
        """A model was loaded: the values the user did not choose follow its suggestion."""
        self.model = sampling
        self._show(save=False)

    @Slot()
    def reset_to_model(self) -> None:
        self.overrides = {}
        self._show()

    def use_preset(self, name: str) -> None:
        """The user picked a preset: its values become theirs."""
        preset = chosen_sampling(name)
        self.overrides = {f: float(getattr(preset, f)) for f in SAMPLING_FIELDS}
        self._show()

    def set_chat_values(self, settings: SamplingSettings) -> None:
        """A chat opened from the history: the values it was answered with are shown again
        (those that differ from the model's suggestion count as the user's)."""
        self.overrides = {
            f: float(getattr(settings, f))
            for f in SAMPLING_FIELDS
            if abs(float(getattr(settings, f)) - float(getattr(self.model.settings, f))) > 1e-6
        }
        self._filling = True
        try:
            # Within the boxes' ranges: Qt takes a C int (a seed of 2^70 raised OverflowError).
            spin, seed = self.max_tokens_spin, self.seed_spin
            spin.setValue(min(max(settings.max_new_tokens, spin.minimum()), spin.maximum()))
            given = -1 if settings.seed is None else settings.seed
            seed.setValue(given if 0 <= given <= seed.maximum() else -1)
        finally:
            self._filling = False
        self._show()

    def _on_value_edited(self, field: str) -> None:
        if self._filling:
            return
        self.overrides[field] = float(self.spins[field].value())
        self._show_choice()
        self._changed()

    def _show(self, save: bool = True) -> None:
        """Fill the spin boxes: the user's values over the model's."""
        self._filling = True
        try:
            for field, spin in self.spins.items():
                value = self.overrides.get(field, getattr(self.model.settings, field))
                if isinstance(spin, QSpinBox):
                    spin.setValue(int(value))
                else:
                    spin.setValue(float(value))
        finally:
            self._filling = False
        self._show_choice()
        if save:
            self._changed()

    @Slot()
    def _show_greedy(self) -> None:
        """At temperature 0 the draw is not random: Top-p, Top-k and the seed do nothing, so
        they are greyed with a tooltip that says why (their values are kept)."""
        greedy = self.temperature_spin.value() <= 0.0
        for field, spin in (
            ("top_p", self.top_p_spin),
            ("top_k", self.top_k_spin),
            ("seed", self.seed_spin),
        ):
            spin.setEnabled(not greedy)
            spin.setToolTip(GREEDY_TIP if greedy else TIPS[field])
            label = self.form.labelForField(spin)
            if label is not None:
                label.setEnabled(not greedy)
                label.setToolTip(spin.toolTip())

    def _show_choice(self) -> None:
        equal = matching_preset(self.settings())
        for name, button in self.preset_buttons.items():
            button.setChecked(name == equal)
        suggestion = self.model.source
        if not self.overrides:
            text = f"Following the model: {suggestion}."
        elif equal is None:
            text = f"Your own values. The model suggests {suggestion}."
        else:
            text = f"Your choice. The model suggests {suggestion}."
        self.source_label.setText(text)
        self.source_label.setToolTip(text)
        self.reset_button.setEnabled(bool(self.overrides))

    def _style_presets(self, c: ThemeColors) -> None:
        """A segmented row in the palette's colours, the pressed one in the selection colour."""
        self.setStyleSheet(
            f'QPushButton[checkable="true"] {{ border: 1px solid {c.border.name()}; '
            f"padding: 4px 6px; background: {c.base.name()}; color: {c.base_text.name()}; }}"
            f'QPushButton[checkable="true"]:checked {{ background: {c.accent.name()}; '
            f"color: {c.accent_text.name()}; border-color: {c.accent.name()}; }}"
        )

    def _on_plain_edit(self) -> None:
        if not self._filling:
            self._changed()

    def _changed(self) -> None:
        emit(self.sig_changed)

    # ---- persistence ----------------------------------------------------------------------
    def restore(self, settings: QSettings) -> None:
        self.overrides = {}
        settings.beginGroup(OVERRIDES_KEY)
        try:
            for field in SAMPLING_FIELDS:
                value = self._in_range(field, _number(settings.value(field)))
                if value is not None:
                    self.overrides[field] = value
        finally:
            settings.endGroup()
        if not settings.contains(OVERRIDES_KEY + "/saved"):
            self._migrate(settings)
        self._filling = True
        try:
            # Each value checked as it is read back: out of range or of the wrong kind, the
            # default (a huge number used to stop the window at start with OverflowError).
            tokens_spin, seed_spin = self.max_tokens_spin, self.seed_spin
            default_tokens = SamplingSettings().max_new_tokens
            tokens_spin.setValue(
                read_int(
                    settings,
                    "sampling/max_new_tokens",
                    default_tokens,
                    tokens_spin.minimum(),
                    tokens_spin.maximum(),
                )
            )
            seed_spin.setValue(read_int(settings, "sampling/seed", -1, -1, seed_spin.maximum()))
            enabled = read_flag(settings, "sampling/json_answer", False)
            schema_edit = self.json_answer.schema_edit
            schema = read_text(settings, "sampling/json_schema", "", schema_edit.max_chars)
            schema = "" if schema_edit.too_long(schema) else schema
            self.json_answer.set_state(enabled, schema)
            stops = read_text(settings, "sampling/stops", "", MAX_STOPS_CHARS)
            self.prompt.set_state(self.prompt.choice(), _stops(stops))
        finally:
            self._filling = False
        self._show(save=False)

    def _migrate(self, settings: QSettings) -> None:
        for field, old_default in OLD_DEFAULTS.items():
            value = self._in_range(field, _number(settings.value(f"sampling/{field}")))
            if value is not None and abs(value - old_default) > 1e-6:
                self.overrides[field] = value
            settings.remove(f"sampling/{field}")

    def _in_range(self, field: str, value: float | None) -> float | None:
        """A saved value its box can show; None for one out of range (its default then)."""
        spin = self.spins.get(field)
        if value is None or spin is None:
            return value
        return value if spin.minimum() <= value <= spin.maximum() else None

    def save(self, settings: QSettings) -> None:
        settings.remove(OVERRIDES_KEY)
        for field, value in self.overrides.items():
            settings.setValue(f"{OVERRIDES_KEY}/{field}", value)
        settings.setValue(f"{OVERRIDES_KEY}/saved", True)
        settings.setValue("sampling/max_new_tokens", self.max_tokens_spin.value())
        settings.setValue("sampling/seed", self.seed_spin.value())
        settings.setValue("sampling/json_answer", self.json_answer.check.isChecked())
        settings.setValue("sampling/json_schema", self.json_answer.schema_edit.toPlainText())
        settings.setValue("sampling/stops", format_stops(self.prompt.user_stops()))


def _stops(value: object) -> tuple[str, ...]:
    try:
        return parse_stops(value) if isinstance(value, str) else ()
    except ValueError:
        return ()


def _number(value: object) -> float | None:
    if isinstance(value, str) and len(value) > 64:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
