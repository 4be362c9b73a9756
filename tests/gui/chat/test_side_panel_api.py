"""What other features call on the side panel (tests/test_architecture.py, CHAT_WIDGET_API):
each call reaches the widget it names, and only through the panel."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QLabel, QVBoxLayout

from chatapp.gui.chat.side_panel import FIGURES, SidePanel
from chatapp.session.loop_notes import LoadedDevice


def make_panel(qtbot) -> SidePanel:
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.show()
    return panel


def test_set_figure_rewrites_the_named_figure_only(qtbot) -> None:
    panel = make_panel(qtbot)
    box = panel.figures_box
    labels = {
        "ttft": box.ttft_value,
        "tokens_per_second": box.tokens_per_second_value,
        "perplexity": box.perplexity_value,
        "prompt_perplexity": box.prompt_perplexity_value,
        "transfer": box.transfer_value,
        "context": box.context_value,
    }
    assert set(labels) == set(FIGURES)
    for key, label in labels.items():
        others = {k: (v.text(), v.toolTip(), v.isEnabled()) for k, v in labels.items() if k != key}
        panel.set_figure(key, text=f"{key} text", tip=f"{key} tip", enabled=False)
        assert (label.text(), label.toolTip(), label.isEnabled()) == (
            f"{key} text",
            f"{key} tip",
            False,
        )
        assert panel.figure_tip(key) == f"{key} tip"
        now = {k: (v.text(), v.toolTip(), v.isEnabled()) for k, v in labels.items() if k != key}
        assert now == others
        panel.set_figure(key, enabled=True)  # what is not given stays
        assert (label.text(), label.toolTip(), label.isEnabled()) == (
            f"{key} text",
            f"{key} tip",
            True,
        )
    with pytest.raises(KeyError):
        panel.set_figure("figures_box", text="x")


def test_set_context_with_a_tip(qtbot) -> None:
    panel = make_panel(qtbot)
    box = panel.figures_box
    panel.set_context(100, 512, "100 of 512 tokens sent")
    assert box.context_value.text() == "100 / 512"
    assert box.context_value.toolTip() == box.context_bar.toolTip() == "100 of 512 tokens sent"
    panel.set_context(0, 512, "")  # nothing measured: the figure's tip goes, the bar's stays
    assert box.context_value.toolTip() == ""
    assert box.context_bar.toolTip() == "100 of 512 tokens sent"
    panel.set_context(10, 512)  # no tip given: both stay
    assert box.context_bar.toolTip() == "100 of 512 tokens sent"


def test_a_backend_box_goes_under_the_figures_and_a_note_into_the_loop_box(qtbot) -> None:
    panel = make_panel(qtbot)
    box, note = QLabel("server"), QLabel("note")
    panel.add_backend_box(box)
    panel.add_loop_note(note)
    layout = panel.layout()
    assert isinstance(layout, QVBoxLayout)
    assert layout.indexOf(box) == layout.indexOf(panel.sections["figures"]) + 1
    assert note.parent() is panel.loop_box
    title = panel.loop_title()
    panel.set_loop_title(f"{title} (the server's)")
    assert panel.loop_title() == f"{title} (the server's)"
    assert panel.sections["loop"].header.text() == f"{title} (the server's)"


def test_loaded_and_request_changes(qtbot) -> None:
    panel = make_panel(qtbot)
    loaded = LoadedDevice("remote", "the server http://x", False, 0, "m")
    panel.set_loaded(loaded)
    assert panel.loaded() == loaded == panel.figures_box.loaded
    with qtbot.waitSignal(panel.sig_request_changed, timeout=1000):
        panel.sampling_box.max_tokens_spin.setValue(panel.sampling_box.max_tokens_spin.value() + 1)
    with qtbot.waitSignal(panel.sig_request_changed, timeout=1000):
        panel.system_prompt_box.edit.setPlainText("Answer briefly.")
    assert panel.options().system_prompt == "Answer briefly."
