"""The system prompt: saved once typing pauses or the panel hides, never lost; a paste too
long is refused with a note under the box and the prompt kept."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtGui import QGuiApplication

from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.chat.system_prompt_box import SystemPromptBox
from chatapp.gui.common.bounded_text import MAX_TEXT_CHARS


def _box(qtbot) -> SystemPromptBox:
    box = SystemPromptBox()
    qtbot.addWidget(box)
    box.show()
    return box


def test_typing_is_announced_once_it_pauses(qtbot) -> None:
    box = _box(qtbot)
    changes: list[str] = []
    box.sig_changed.connect(lambda: changes.append(box.text()))
    qtbot.keyClicks(box.edit, "Be brief.")
    assert changes == [] and box.pending
    qtbot.waitUntil(lambda: changes == ["Be brief."], timeout=2000)
    assert not box.pending


def test_hiding_announces_what_is_pending(qtbot) -> None:
    box = _box(qtbot)
    changes: list[str] = []
    box.sig_changed.connect(lambda: changes.append(box.text()))
    qtbot.keyClicks(box.edit, "Be kind.")
    box.window().close()
    assert changes == ["Be kind."] and not box.pending


def test_a_huge_paste_is_refused_with_a_note_and_the_prompt_kept(qtbot) -> None:
    box = _box(qtbot)
    qtbot.keyClicks(box.edit, "You are terse.")
    QGuiApplication.clipboard().setText("x" * 6_000_000)
    box.edit.setFocus()
    box.edit.paste()
    assert box.text() == "You are terse."
    assert box.note.isVisible()
    assert box.note.text() == (
        "Not pasted: 6 000 000 characters is more than a model can read "
        "(the system prompt holds at most 1 048 576)."
    )
    assert MAX_TEXT_CHARS == 1_048_576
    qtbot.keyClicks(box.edit, " Really.")  # the next change clears the note
    assert not box.note.isVisible()
    assert box.text() == "You are terse. Really."


def test_the_panel_saves_the_prompt_after_a_pause_and_on_close(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    settings.setValue("chat/system_prompt", "Saved before.")
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.restore(settings)
    panel.sections["system"].set_open(True)  # folded at first: opened, as a person would
    panel.show()
    assert panel.system_prompt_box.edit.toPlainText() == "Saved before."
    assert not panel.system_prompt_box.pending  # restoring is not a change to save
    panel.system_prompt_box.edit.selectAll()
    qtbot.keyClicks(panel.system_prompt_box.edit, "New prompt")
    qtbot.waitUntil(lambda: settings.value("chat/system_prompt") == "New prompt", timeout=2000)
    qtbot.keyClicks(panel.system_prompt_box.edit, ", closed at once")
    panel.close()
    assert settings.value("chat/system_prompt") == "New prompt, closed at once"


def test_an_empty_box_says_what_the_model_is_sent_instead(qtbot) -> None:
    """A template's own system prompt is counted in Context used: the empty box shows it."""
    box = SystemPromptBox()
    qtbot.addWidget(box)
    assert box.edit.placeholderText() == "Empty: no system prompt"
    box.set_model_default("You are a helpful AI assistant named SmolLM", 16)
    shown = box.edit.placeholderText()
    assert "You are a helpful AI assistant named SmolLM" in shown and "16 tokens" in shown
    assert "counted in Context used" in shown and box.edit.toolTip() == shown
    box.set_model_default("", 0)
    assert box.edit.placeholderText() == "Empty: no system prompt" and not box.edit.toolTip()
