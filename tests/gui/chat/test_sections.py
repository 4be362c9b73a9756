"""The side panel's sections: which are open at first, what the folded ones say, what is
remembered, and opening one that does not fit folds others (the pane's height is set here;
tests/gui/window/test_view_options_remembered.py checks the whole window at 1366x768)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QScrollArea

from chatapp.gui.chat.side_panel import SidePanel
from chatapp.session import prompt_style as ps


def _panel(qtbot, settings: QSettings, height: int = 2000) -> tuple[SidePanel, QScrollArea]:
    panel = SidePanel()
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setWidget(panel)
    qtbot.addWidget(area)
    panel.restore(settings)
    area.resize(320, height)
    area.show()
    return panel, area


def test_at_first_the_figures_and_loop_are_open_and_the_folded_say_what_they_hold(
    qtbot, tmp_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel, _area = _panel(qtbot, settings)
    sections = panel.sections
    assert [s.is_open() for s in sections] == [True, True, False, False]
    assert not sections.is_open("notes")
    sampling = sections["sampling"].summary
    assert sampling.isVisible() and sampling.full_text() == "Precise · up to 256 tokens · Chat"
    assert sections["system"].summary.full_text() == "none"
    # A template's own system prompt is counted: folded, the line still says so.
    panel.system_prompt_box.set_model_default("You are a helpful AI assistant", 7)
    sections.refresh()
    system = sections["system"].summary.full_text()
    assert system == "the model's own, 7 tokens: \u201cYou are a helpful AI assistant\u201d"
    # The summaries follow what they summarise.
    panel.sampling_box.preset_buttons["balanced"].click()
    prompt = panel.sampling_box.prompt
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CONTINUE))
    panel.system_prompt_box.set_text("Answer in French.\nBe brief.")
    qtbot.waitUntil(lambda: sampling.full_text().startswith("Balanced"))
    assert prompt.choice_combo.currentText() in sampling.full_text()
    assert sections["system"].summary.full_text() == "Answer in French."
    assert sections["loop"].summary.full_text().startswith("IO-Binding · CPU")


def test_the_sampling_summary_counts_tools_in_words(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel, _area = _panel(qtbot, settings)
    sampling = panel.sections["sampling"].summary
    tools = panel.sampling_box.tools
    for names, words in ((["get_weather"], "1 tool"), (["get_weather", "get_time"], "2 tools")):
        path = tmp_path / f"{len(names)}.json"
        spec = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in names
        ]
        path.write_text(json.dumps(spec))
        assert tools.load_file(path)
        panel.sections.refresh()
        assert sampling.full_text().endswith(f"Chat · {words}")


def test_what_is_open_is_remembered(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel, _area = _panel(qtbot, settings)
    panel.sections["figures"].header.click()
    panel.sections["system"].header.click()
    panel.figures_box.notes_section.header.click()
    again, _ = _panel(qtbot, settings)
    opened = [s.is_open() for s in again.sections]
    assert opened == [False, True, False, True] and again.sections.is_open("notes")
    # Every one open is remembered too (not taken for "never chosen").
    for name in ("figures", "sampling"):
        again.sections[name].header.click()
    third, _ = _panel(qtbot, settings)
    assert all(s.is_open() for s in third.sections)


def test_opening_a_section_that_does_not_fit_folds_others_from_the_bottom_up(
    qtbot, tmp_path: Path
) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel, area = _panel(qtbot, settings, height=700)
    sections = panel.sections
    assert panel.minimumSizeHint().height() <= area.viewport().height()  # as it starts
    sections["sampling"].header.click()  # the person's choice stays open; others give way
    qtbot.wait(10)
    assert sections.is_open("sampling") and not sections.is_open("loop")
    assert panel.minimumSizeHint().height() <= area.viewport().height()
    # Folding one opens nothing by itself.
    sections["sampling"].header.click()
    assert [s.is_open() for s in sections].count(True) <= 1


def test_the_loop_summary_keeps_the_precision_while_an_answer_streams(
    qtbot, tmp_path: Path
) -> None:
    """Found driving the window: the folded loop section read "IO-Binding · CPU · Fast (8-bit)"
    idle and "IO-Binding · CPU" while answering (the precision box is only locked then)."""
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel, _area = _panel(qtbot, settings)
    sections = panel.sections
    sections.refresh()
    idle = sections["loop"].summary.full_text()
    assert idle.endswith(panel.precision_selector.currentText())
    panel.set_generating(True)
    sections.refresh()
    assert sections["loop"].summary.full_text() == idle
    panel.set_generating(False)
    panel.set_precision_unavailable("No GGUF kernels run this model.")
    sections.refresh()  # no choice at all: not named
    assert sections["loop"].summary.full_text() == "IO-Binding · CPU"
    panel.set_precision_unavailable(None)
    panel.set_loop_unavailable("The server runs its own loop.")
    sections.refresh()  # a remote server's: not this machine's precision
    assert panel.precision_selector.currentText() not in sections["loop"].summary.full_text()
