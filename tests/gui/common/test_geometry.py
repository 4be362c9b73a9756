"""The window fits the screen it opens on and comes back on a screen."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QWidget

from chatapp.gui.common.geometry import (
    PREFERRED,
    available_area,
    first_size,
    keep_on_screen,
    place_first_time,
    restore,
)


def test_first_size_fits_small_and_scaled_screens() -> None:
    assert first_size(QRect(0, 0, 2560, 1440)) == PREFERRED
    small = first_size(QRect(0, 0, 800, 500))
    assert small.width() <= 800 * 0.92 and small.height() <= 500 * 0.92
    # 1366x768 at 200 %: 683x384 device-independent pixels.
    scaled = first_size(QRect(0, 0, 683, 384))
    assert scaled.width() <= 683 and scaled.height() <= 384


def test_place_first_time_centres_inside_the_screen(qtbot) -> None:
    widget = QWidget()
    qtbot.addWidget(widget)
    place_first_time(widget)
    area = available_area(widget)
    assert area.contains(widget.geometry())
    assert abs(widget.geometry().center().x() - area.center().x()) <= 2


def test_a_saved_position_off_screen_is_brought_back(qtbot) -> None:
    widget = QWidget()
    qtbot.addWidget(widget)
    area = available_area(widget)
    widget.resize(QSize(area.width() + 400, area.height() + 300))
    widget.move(area.right() + 500, area.bottom() + 500)
    keep_on_screen(widget)
    assert widget.width() <= area.width() and widget.height() <= area.height()
    assert area.contains(widget.frameGeometry())


def test_restore_says_when_there_is_nothing_to_restore(qtbot) -> None:
    widget = QWidget()
    qtbot.addWidget(widget)
    assert not restore(widget, None) and not restore(widget, "junk")
    widget.resize(400, 300)
    widget.move(10, 20)
    saved = widget.saveGeometry()
    other = QWidget()
    qtbot.addWidget(other)
    assert restore(other, saved)
    assert other.size() == QSize(400, 300)


def test_the_window_comes_back_as_it_was_left(make_window, tiny_model_dir) -> None:
    first = make_window(["--model", str(tiny_model_dir)], wait=False)
    area = available_area(first)
    assert area.contains(first.frameGeometry())  # first start: fitted to the screen
    first.resize(QSize(1000, 620))
    first.move(area.left() + 40, area.top() + 30)
    first.close()
    again = make_window(["--model", str(tiny_model_dir)], wait=False)
    assert again.size() == QSize(1000, 620)
    assert (again.x(), again.y()) == (area.left() + 40, area.top() + 30)
