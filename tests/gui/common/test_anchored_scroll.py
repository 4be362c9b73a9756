"""The side panel's scroll area stays on what it shows while a widget above changes height
(issue 47: at 1366x768 the panel scrolled by itself while an answer streamed)."""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication, QLabel, QScrollArea, QVBoxLayout, QWidget

from chatapp.gui.common.anchored_scroll import AnchoredScrollArea


def _panel(area: QScrollArea) -> tuple[QLabel, QLabel]:
    content = QWidget()
    layout = QVBoxLayout(content)
    note = QLabel("a note\nof two lines", content)  # the notes of the live figures
    note.setFixedHeight(200)
    filler = QLabel("figures", content)
    filler.setFixedHeight(300)
    settings = QLabel("the sampling settings", content)
    settings.setFixedHeight(400)
    for widget in (note, filler, settings):
        layout.addWidget(widget)
    area.setWidget(content)
    area.setWidgetResizable(True)
    area.resize(300, 300)
    area.show()
    return note, settings


def _top_on_screen(area: QScrollArea, widget: QWidget) -> int:
    return widget.mapTo(area.viewport(), QPoint(0, 0)).y()


def _scrolled_then_note_changes(qtbot, area: QScrollArea) -> tuple[int, int, int]:
    qtbot.addWidget(area)
    note, settings = _panel(area)
    qtbot.waitExposed(area)
    area.verticalScrollBar().setValue(520)  # the settings at the top of the view
    QApplication.processEvents()
    before = _top_on_screen(area, settings)
    note.setFixedHeight(60)  # the note goes while an answer streams
    qtbot.wait(50)
    shrunk = _top_on_screen(area, settings)
    note.setFixedHeight(260)  # and comes back, taller
    qtbot.wait(50)
    return before, shrunk, _top_on_screen(area, settings)


def test_what_the_view_shows_stays_put_when_a_note_above_changes(qtbot) -> None:
    before, shrunk, grown = _scrolled_then_note_changes(qtbot, AnchoredScrollArea())
    assert shrunk == before and grown == before


def test_a_plain_scroll_area_moves_it(qtbot) -> None:
    """What the anchoring fixes (so the check above can fail)."""
    before, shrunk, grown = _scrolled_then_note_changes(qtbot, QScrollArea())
    assert shrunk != before or grown != before


def test_at_the_top_the_top_stays_the_top(qtbot) -> None:
    area = AnchoredScrollArea()
    qtbot.addWidget(area)
    note, _settings = _panel(area)
    qtbot.waitExposed(area)
    note.setFixedHeight(260)
    qtbot.wait(50)
    assert area.verticalScrollBar().value() == 0
