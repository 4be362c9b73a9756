"""The sampling box: presets, the model's suggestion under the user's own values, Reset, and
what is saved."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from chatapp.engine.model_description import ModelSampling
from chatapp.engine.sampling import PRESETS, SamplingSettings
from chatapp.gui.chat.sampling_box import GREEDY_TIP, OVERRIDES_KEY, SamplingBox

SUGGESTED = ModelSampling(
    SamplingSettings(temperature=0.6, top_k=50, top_p=0.9, repetition_penalty=1.0),
    "its generation_config.json",
    None,
)


def _box(qtbot) -> SamplingBox:
    box = SamplingBox()
    qtbot.addWidget(box)
    return box


def test_starts_greedy_and_follows_the_model(qtbot) -> None:
    box = _box(qtbot)
    assert box.settings().greedy and box.preset() == "model"
    assert box.pressed_preset() == "precise"  # the model's suggestion equals Precise
    assert not box.reset_button.isEnabled()
    box.set_model_defaults(SUGGESTED)
    s = box.settings()
    assert (s.temperature, s.top_k, s.top_p, s.repetition_penalty) == (0.6, 50, 0.9, 1.0)
    assert box.preset() == "model" and box.pressed_preset() is None
    assert "generation_config.json" in box.source_label.text()


def test_picking_a_preset_makes_its_values_the_users(qtbot) -> None:
    box = _box(qtbot)
    changed: list[None] = []
    box.sig_changed.connect(lambda: changed.append(None))
    box.preset_buttons["creative"].click()
    assert box.settings().temperature == PRESETS["creative"].temperature
    assert box.preset() == "creative" and changed
    assert box.pressed_preset() == "creative" and box.preset_buttons["creative"].isVisibleTo(box)
    # Another model's suggestion does not overrule the user's choice.
    box.set_model_defaults(SUGGESTED)
    assert box.settings().temperature == PRESETS["creative"].temperature
    assert "Your choice" in box.source_label.text()
    assert box.reset_button.isEnabled()


def test_an_edit_by_hand_is_custom_and_reset_forgets_it(qtbot) -> None:
    box = _box(qtbot)
    box.set_model_defaults(SUGGESTED)
    box.top_k_spin.setValue(7)
    assert box.preset() == "custom" and box.overrides == {"top_k": 7.0}
    assert box.pressed_preset() is None and "Your own values" in box.source_label.text()
    assert box.settings().temperature == 0.6  # the values not touched still follow the model
    box.reset_button.click()
    assert box.settings().top_k == 50 and box.preset() == "model"
    assert not box.reset_button.isEnabled()


def test_saved_and_restored(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    box = _box(qtbot)
    box.use_preset("balanced")
    box.max_tokens_spin.setValue(99)
    box.save(settings)
    again = _box(qtbot)
    again.restore(settings)
    assert again.preset() == "balanced" and again.settings().max_new_tokens == 99
    assert settings.value(f"{OVERRIDES_KEY}/saved") in (True, "true")


def test_old_settings_keep_only_what_the_user_changed(qtbot, tmp_path: Path) -> None:
    # chatapp 0.1 saved every value; 0.7 and 0.95 were its defaults, 1.3 the user's.
    settings = QSettings(str(tmp_path / "old.ini"), QSettings.Format.IniFormat)
    settings.setValue("sampling/temperature", 0.7)
    settings.setValue("sampling/top_p", 0.95)
    settings.setValue("sampling/repetition_penalty", 1.3)
    box = _box(qtbot)
    box.restore(settings)
    assert box.overrides == {"repetition_penalty": 1.3}
    assert box.settings().greedy  # the old default temperature 0.7 no longer applies


def test_at_temperature_0_the_controls_of_the_random_draw_are_greyed_with_why(qtbot) -> None:
    box = _box(qtbot)
    draw = (box.top_p_spin, box.top_k_spin, box.seed_spin)
    box.temperature_spin.setValue(0.0)
    for spin in draw:
        assert not spin.isEnabled() and spin.toolTip() == GREEDY_TIP
        label = box.form.labelForField(spin)
        assert label is not None and not label.isEnabled()
    # Still used when greedy: the repetition penalty and the token limit.
    assert box.repetition_spin.isEnabled() and box.max_tokens_spin.isEnabled()
    box.temperature_spin.setValue(0.7)
    for spin in draw:
        assert spin.isEnabled() and spin.toolTip() != GREEDY_TIP
    assert box.settings().temperature == 0.7


@pytest.mark.parametrize(
    "seed,max_new_tokens,shown_seed,shown_tokens",
    [(2**70, 2**31, -1, 8192), (-3, -3, -1, 1), (12, 77, 12, 77), (None, 10**12, -1, 8192)],
)
def test_chat_values_beyond_the_boxes_are_shown_within_them(
    qtbot, seed: int | None, max_new_tokens: int, shown_seed: int, shown_tokens: int
) -> None:
    box = _box(qtbot)
    settings = SamplingSettings(temperature=0.5, seed=seed, max_new_tokens=max_new_tokens)
    box.set_chat_values(settings)  # was OverflowError in a Qt slot: the rest never restored
    assert box.seed_spin.value() == shown_seed
    assert box.max_tokens_spin.value() == shown_tokens
    assert box.spins["temperature"].value() == pytest.approx(0.5)
