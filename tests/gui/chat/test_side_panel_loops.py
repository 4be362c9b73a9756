"""The loop toggle: one button per Mode, in Mode's order, and an answer without a cache."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QPushButton

from chatapp.engine.modes import MODES, Mode
from chatapp.gui.chat.loop_toggle import LoopToggle
from chatapp.session import formatting as fmt
from chatapp.session.loop_notes import LOOP_TIPS
from tests.gui.conftest import greedy, send_and_wait, set_sampling


def test_the_toggle_follows_modes_order_and_labels(qtbot) -> None:
    toggle = LoopToggle()
    qtbot.addWidget(toggle)
    layout = toggle.layout()
    shown = [layout.itemAt(i).widget() for i in range(layout.count())]
    assert [b.text() for b in shown] == ["No cache", "Naive", "IO-Binding"]
    assert [b.objectName() for b in shown] == [
        "modeNoCacheButton",
        "modeNaiveButton",
        "modeIOBindingButton",
    ]
    assert [b.property("segment") for b in shown] == ["first", "middle", "last"]
    # the toggle speaks plain words (session/loop_notes.py), one tip per loop
    assert all(toggle.buttons[m].toolTip() == LOOP_TIPS[m] for m in MODES)
    assert toggle.mode() is Mode.IOBINDING
    with qtbot.waitSignal(toggle.sig_mode_changed) as changed:
        toggle.buttons[Mode.NOCACHE].click()
    assert changed.args == [Mode.NOCACHE] and toggle.mode() is Mode.NOCACHE
    toggle.set_mode("naive")
    assert toggle.mode() is Mode.NAIVE
    toggle.set_locked(True)
    assert not any(b.isEnabled() for b in shown)


def test_an_answer_without_a_cache_is_labelled_and_warned_about(
    qtbot, make_window, varied_model_dir: Path
) -> None:
    window = make_window(["--model", str(varied_model_dir)])
    set_sampling(window, greedy(6))
    window.findChild(QPushButton, "modeNoCacheButton").click()
    assert "1024 tokens" in window.statusBar().currentMessage()
    send_and_wait(qtbot, window, "hello")
    figures = window.chat.conversation.messages[-1].figures
    assert figures.mode == "nocache"
    line = fmt.figures_line(figures)
    assert line.startswith(f"{varied_model_dir.name} (model.onnx) · No cache · CPU")
