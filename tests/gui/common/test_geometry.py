"""The window fits the screen it opens on and comes back on a screen."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRect, QSettings, QSize
from PySide6.QtWidgets import QSplitter, QWidget

from chatapp.gui.common.geometry import (
    PREFERRED,
    available_area,
    first_size,
    keep_on_screen,
    place_first_time,
    restore,
    restore_splitter,
    save,
    splitter_panes,
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


def _splitter(qtbot, panes: int) -> QSplitter:
    splitter = QSplitter()
    qtbot.addWidget(splitter)
    for _ in range(panes):
        splitter.addWidget(QWidget())
    splitter.resize(600, 200)
    return splitter


def test_splitter_widths_come_back_only_with_as_many_panes(qtbot, tmp_path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    three = _splitter(qtbot, 3)
    three.setSizes([100, 350, 150])
    window = QWidget()
    qtbot.addWidget(window)
    save(settings, window, three)
    saved = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat).value("window/splitter")
    assert splitter_panes(saved) == 3
    again = _splitter(qtbot, 3)
    assert restore_splitter(again, saved)
    # Within the handles' widths (the splitters are not shown, so not laid out exactly).
    assert all(abs(a - b) <= 6 for a, b in zip(again.sizes(), [100, 350, 150], strict=True))
    assert not restore_splitter(_splitter(qtbot, 2), saved)  # saved before a pane was added
    assert not restore_splitter(again, None) and splitter_panes(QByteArray(b"junk")) == 0


def test_pane_sizes_keep_the_chat_usable() -> None:
    from chatapp.gui.common.geometry import pane_sizes

    panes = [(230, 130), (0, 300), (300, 270)]
    # Room for all: the panes as preferred, the chat the rest.
    assert pane_sizes(1200, panes, 1) == [230, 670, 300]
    # 800x500's window: the panes give way, down to their minimums, before the chat does.
    narrow = pane_sizes(730, panes, 1)
    assert narrow[1] >= 300 and narrow[0] >= 130 and narrow[2] >= 270
    assert sum(narrow) <= 730
    # Too narrow for all three: the chat keeps its minimum (the caller hides a pane).
    assert pane_sizes(600, panes, 1) == [130, 300, 270]
    # No pane wider than the chat: a wide side panel gives way down to its minimum.
    wide = [(180, 130), (0, 300), (420, 250)]
    sized = pane_sizes(900, wide, 1)
    assert sized[2] <= sized[1] and sum(sized) == 900 and sized[2] >= 250


def test_no_pane_is_wider_than_the_chat() -> None:
    from chatapp.gui.common.geometry import no_wider_than_chat

    panes = [(230, 130), (0, 300), (300, 250)]
    assert no_wider_than_chat([180, 300, 400], panes, 1) == [180, 350, 350]
    assert no_wider_than_chat([180, 300, 260], panes, 1) == [180, 300, 260]  # already narrower
    assert no_wider_than_chat([180, 200, 400], panes, 1) == [180, 300, 300]  # as wide, no wider
    assert no_wider_than_chat([180, 100, 400], panes, 1) == [140, 270, 270]  # both give way
