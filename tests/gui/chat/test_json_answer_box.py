"""The "JSON answer" option: a schema box shown only while checked, checked as JSON while
typed, saved with the sampling settings, and carried into the next answer's options."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from chatapp.gui.chat.json_answer_box import JsonAnswerOption
from chatapp.gui.chat.sampling_box import SamplingBox


def _option(qtbot) -> JsonAnswerOption:
    option = JsonAnswerOption()
    qtbot.addWidget(option)
    option.show()
    return option


def test_off_by_default_and_the_box_shows_when_checked(qtbot) -> None:
    option = _option(qtbot)
    assert option.schema_text() is None and not option.schema_edit.isVisible()
    with qtbot.waitSignal(option.sig_changed, timeout=1000):
        option.check.setChecked(True)
    assert option.schema_edit.isVisible() and option.schema_text() == ""


def test_text_that_is_not_a_json_object_gets_a_note(qtbot) -> None:
    option = _option(qtbot)
    option.check.setChecked(True)
    qtbot.keyClicks(option.schema_edit, '{"type": ')
    assert option.note.isVisible() and "Not valid JSON" in option.note.text()
    qtbot.keyClicks(option.schema_edit, '"object"}')
    assert not option.note.isVisible()
    assert option.schema_text() == '{"type": "object"}'
    option.schema_edit.setPlainText("[1]")
    assert "object" in option.note.text()
    with qtbot.waitSignal(option.sig_changed, timeout=2000):  # once typing pauses
        pass


def test_a_hostile_schema_gets_a_note_not_an_exception(qtbot) -> None:
    option = _option(qtbot)
    option.check.setChecked(True)
    for text, words in (
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # was an uncaught RecursionError
        ('{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}', "loop"),
        ('{"type": "integer", "maximum": 1e999}', "out of range"),
        ('{"$ref": "http://example.com/s.json"}', "inside the schema"),
    ):
        option.schema_edit.setPlainText(text)
        assert option.note.isVisible() and words in option.note.text()
    option.schema_edit.setPlainText('{"type": "object"}')
    assert not option.note.isVisible()


def test_the_sampling_box_saves_and_restores_it(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    box = SamplingBox()
    qtbot.addWidget(box)
    box.json_answer.check.setChecked(True)
    box.json_answer.schema_edit.setPlainText('{"type": "object"}')
    box.save(settings)
    again = SamplingBox()
    qtbot.addWidget(again)
    again.restore(settings)
    assert again.json_answer.schema_text() == '{"type": "object"}'
    assert again.json_answer.check.isChecked()
    fresh = SamplingBox()
    qtbot.addWidget(fresh)
    fresh.restore(QSettings(str(tmp_path / "empty.ini"), QSettings.Format.IniFormat))
    assert fresh.json_answer.schema_text() is None
