"""The side panel's "Speculative decoding" (gui/chat/speculative_option.py): on by default and
remembered, greyed with the engine's reason where it cannot run, the same answer on and off,
and a note that says what drafting did for the answer shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QCheckBox

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.native_kernels import library_path
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.chat.speculative_option import NOTHING_DRAFTED, SETTINGS_KEY
from tests.gui.conftest import greedy, send_and_wait, set_sampling

BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")


@pytest.fixture(scope="module")
def native_model_dir(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("speculative-window")
    return convert_gguf(tiny_gguf, root / "tiny", ConvertOptions(graph="native"))


def test_on_by_default_and_remembered(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.restore(settings)
    assert panel.speculative()
    with qtbot.waitSignal(panel.sig_speculative_changed) as changed:
        panel.speculative_option.check.setChecked(False)
    assert changed.args == [False]
    settings.sync()
    again = SidePanel()
    qtbot.addWidget(again)
    again.restore(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert not again.speculative()
    settings.setValue(SETTINGS_KEY, "not a boolean")  # a damaged file: the default
    third = SidePanel()
    qtbot.addWidget(third)
    third.restore(settings)
    assert third.speculative()


def test_greyed_with_its_reason_and_locked_while_answering(qtbot) -> None:
    panel = SidePanel()
    qtbot.addWidget(panel)
    check = panel.speculative_option.check
    panel.set_speculative_unavailable("it needs the GGUF kernels' fast precision on the CPU")
    assert not check.isEnabled() and "fast precision" in check.toolTip()
    panel.set_speculative_unavailable(None)
    assert check.isEnabled()
    panel.set_generating(True)
    assert not check.isEnabled()
    panel.set_generating(False)
    assert check.isEnabled()


def test_the_note_says_what_drafting_did(qtbot) -> None:
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.show()
    note = panel.speculative_option.note
    kept = AnswerFigures(
        generated_tokens=41, drafted_tokens=30, accepted_tokens=27, mode="iobinding"
    )
    panel.finish_answer(kept)
    assert note.isVisible()
    assert note.text() == "Speculative: 27 of 30 drafted kept, 3.1 tokens a pass."  # 40 / 13
    plain = AnswerFigures(
        generated_tokens=41, drafted_tokens=0, accepted_tokens=0, mode="iobinding"
    )
    panel.show_stats(plain)  # while it streams: nothing said yet
    assert not note.isVisible()
    panel.finish_answer(plain)
    assert note.text() == NOTHING_DRAFTED
    panel.start_answer()
    assert not note.isVisible()
    panel.finish_answer(AnswerFigures(generated_tokens=41))  # an old answer: no such figures
    assert not note.isVisible()


@BUILT
def test_the_window_answers_the_same_with_and_without_drafting(
    qtbot, make_window, native_model_dir: Path
) -> None:
    window = make_window(["--model", str(native_model_dir)])
    check = window.findChild(QCheckBox, "speculativeCheck")
    assert check.isEnabled() and check.isChecked()
    set_sampling(window, greedy(40))
    prompt = "abc abc abc abc abc abc abc abc"
    send_and_wait(qtbot, window, prompt)
    drafted = window.chat.conversation.messages[-1]
    assert drafted.figures.drafted_tokens, "nothing was drafted: the test would show nothing"
    assert "speculative:" in window.chat.chat_view.transcript.toPlainText()
    check.setChecked(False)
    window.chat.chat_view.new_chat_button.click()
    send_and_wait(qtbot, window, prompt)
    plain = window.chat.conversation.messages[-1]
    assert plain.figures.drafted_tokens == 0
    assert plain.content == drafted.content
    assert "speculative:" not in window.chat.chat_view.transcript.toPlainText()


def test_a_stock_graph_greys_it(qtbot, make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    check = window.findChild(QCheckBox, "speculativeCheck")
    assert not check.isEnabled()
    assert "fast precision" in check.toolTip()
