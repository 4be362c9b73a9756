"""Regenerate under greedy sampling (or a fixed seed) writes the same answer: a note says so
and offers one click to regenerate with sampling that varies."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.sampling import PRESETS, SamplingSettings
from chatapp.gui.chat.controller import State
from chatapp.gui.chat.regenerate_note import same_answer
from tests.gui.conftest import ANSWER_TIMEOUT_MS, send_and_wait


def test_which_settings_write_the_same_answer() -> None:
    precise = same_answer(PRESETS["precise"], "precise")
    assert precise is not None and "Precise" in precise.text and precise.fix == "preset"
    seeded = same_answer(SamplingSettings(temperature=0.7, seed=7), "custom")
    assert seeded is not None and "seed 7" in seeded.text and seeded.fix == "seed"
    assert same_answer(PRESETS["balanced"], "balanced") is None


def test_regenerate_at_precise_says_why_and_offers_balanced(
    qtbot, make_window, tiny_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    panel, view = window.chat.side_panel, window.chat.chat_view
    panel.sampling_box.use_preset("precise")
    panel.sampling_box.max_tokens_spin.setValue(6)
    send_and_wait(qtbot, window, "Tell me something")
    note = view.regenerate_note
    assert not note.isVisible()
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        view.regenerate_button.click()
    assert note.isVisible() and "same answer" in note.label.text()
    assert note.button.text() == "Regenerate with Balanced"
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=10_000
    )
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        note.button.click()
    assert panel.sampling_box.preset() == "balanced" and not note.isVisible()
    assert window.chat.conversation.messages[-1].version_count == 3  # each regenerate kept
    # A new question: the note was about the last answer.
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=10_000
    )
    send_and_wait(qtbot, window, "Another")
    assert not note.isVisible()
