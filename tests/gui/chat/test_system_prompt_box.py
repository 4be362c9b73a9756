"""The system prompt: saved once typing pauses or the panel hides, never lost; a paste too
long is refused with a note under the box and the prompt kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtGui import QGuiApplication

from chatapp.engine.text.chat import ChatTokenizer
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.chat.system_prompt_box import SystemPromptBox
from chatapp.gui.common.bounded_text import MAX_TEXT_CHARS
from tests.gui.conftest import LOAD_TIMEOUT_MS


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


OWN_PROMPT = "You are a tiny helper."
OWN_TEMPLATE = (  # writes its own system prompt when a chat has none, as SmolLM2's does
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\n" + OWN_PROMPT + "<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_models_own_system_prompt_shows_in_the_window_with_its_tokens(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Issue 47: the default system prompt was counted in Context used and never shown. A
    model whose template writes one: the empty box and the folded section name it and its
    tokens (counted here by the model's own tokenizer); a model without one says none."""
    folder = tmp_path / "own-system"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = OWN_TEMPLATE
    config_path.write_text(json.dumps(config))
    tokens = len(ChatTokenizer.from_folder(folder).encode(OWN_PROMPT))
    assert tokens > 0

    window = make_window(["--model", str(folder)])
    panel = window.chat.side_panel
    box = panel.system_prompt_box
    assert box.text() == ""
    shown = box.edit.placeholderText()
    assert f"\u201c{OWN_PROMPT}\u201d" in shown and f"({tokens} tokens)" in shown, shown
    folded = panel.sections["system"].summary
    said = f"the model's own, {tokens} tokens: \u201c{OWN_PROMPT}\u201d"
    qtbot.waitUntil(lambda: folded.full_text() == said)

    # Another model, with no prompt of its own: the last one's is not left on show.
    window.open_model(tiny_model_dir)
    qtbot.waitUntil(
        lambda: (
            window.chat.controller.backend_session.model is not None
            and window.chat.controller.backend_session.model.name == "tiny-llama"
        ),
        timeout=LOAD_TIMEOUT_MS,
    )
    assert box.edit.placeholderText() == "Empty: no system prompt"
    qtbot.waitUntil(lambda: folded.full_text() == "none")
