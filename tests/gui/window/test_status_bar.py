"""Status messages cut to fit with the whole text in a tooltip, and the busy indicator's
seconds and time left."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QToolTip

from chatapp.gui.chat.controller import State
from chatapp.gui.window.status_bar import BusyIndicator, StatusBar

LONG = (
    "IO-Binding · CPU · 412.3 tokens/s · first token 38 ms · perplexity 3.41 · 128 tokens · "
    "context 1,024 of 8,192 · device memory 12.5 MiB"
)


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _window(qtbot, width: int) -> tuple[QMainWindow, StatusBar, QLabel]:
    window = QMainWindow()
    qtbot.addWidget(window)
    bar = StatusBar(window)
    window.setStatusBar(bar)
    label = QLabel("SmolLM2-135M-Instruct · CPU", window)
    bar.addPermanentWidget(label)
    window.resize(width, 200)
    window.show()
    qtbot.waitExposed(window)
    return window, bar, label


def _hover(bar: StatusBar, pos: QPoint) -> None:
    QApplication.sendEvent(bar, QHelpEvent(QEvent.Type.ToolTip, pos, bar.mapToGlobal(pos)))


def test_a_long_message_is_cut_to_fit_with_the_whole_text_as_tooltip(qtbot) -> None:
    # 683 px: a 1366x768 screen at QT_SCALE_FACTOR=2, in device-independent pixels.
    _window_kept, bar, label = _window(qtbot, 683)  # the window owns the bar: keep it
    bar.showMessage(LONG, 10_000)
    room = bar.message_rect()
    assert room.width() > 0 and room.right() < label.x()  # the model's name stays readable
    shown = bar.shown_message()
    assert shown.endswith("…") and LONG.startswith(shown[:-1])
    assert bar.fontMetrics().horizontalAdvance(shown) <= room.width()
    assert bar.message_tooltip() == LONG
    _hover(bar, room.center())
    assert QToolTip.isVisible() and QToolTip.text() == LONG
    _hover(bar, label.geometry().center())  # over the model's name: not the message
    qtbot.waitUntil(lambda: not QToolTip.isVisible(), timeout=3000)
    bar.grab()  # paints the cut message (a paint error would raise here)


def test_a_short_message_is_shown_whole_and_a_wider_window_shows_more(qtbot) -> None:
    window, bar, _ = _window(qtbot, 683)
    bar.showMessage("Copied the code.", 3000)
    assert bar.shown_message() == "Copied the code." and bar.message_tooltip() == ""
    bar.showMessage(LONG)
    narrow = bar.shown_message()
    window.resize(1900, 200)
    qtbot.waitUntil(lambda: bar.width() >= 1800)
    assert len(bar.shown_message()) > len(narrow)
    bar.clearMessage()
    assert bar.shown_message() == "" and bar.message_tooltip() == ""
    bar.grab()


def test_right_to_left_keeps_the_message_right_of_the_widgets(qtbot) -> None:
    window, bar, label = _window(qtbot, 500)
    window.setLayoutDirection(Qt.LayoutDirection.RightToLeft)
    qtbot.waitUntil(lambda: label.x() < bar.width() // 2)
    bar.showMessage(LONG)
    assert bar.message_rect().left() > label.geometry().right()
    assert bar.shown_message().endswith("…")


def test_busy_indicator_counts_seconds_and_says_what_is_left(qtbot) -> None:
    clock = Clock()
    busy = BusyIndicator(clock=clock)
    qtbot.addWidget(busy)
    busy.start("Loading SmolLM2")
    assert busy.running and not busy.isHidden() and busy.label.full_text == "Loading SmolLM2…"
    clock.now += 3.2
    busy.tick()
    assert busy.label.full_text == "Loading SmolLM2… 3 s"  # no earlier load: no estimate
    busy.start("Loading SmolLM2", expected_s=40.0)
    clock.now += 5
    busy.tick()
    assert busy.label.full_text == "Loading SmolLM2… 5 s · about 35 s left"
    clock.now += 34.5
    busy.tick()
    assert busy.label.full_text == "Loading SmolLM2… 40 s · 40 s last time"  # past it: no guess
    busy.stop()
    assert not busy.running and busy.isHidden() and not busy.timer.isActive()


def test_the_window_shows_loading_and_remembers_how_long_it_took(
    qtbot, make_window, tiny_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    assert window.chat.controller.backend_session.state is State.LOADING
    assert window.busy.label.full_text.startswith(f"Loading {tiny_model_dir.name}…")
    assert window.busy.expected_s is None  # never loaded before
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=60_000
    )
    assert not window.busy.running and window.busy.isHidden()
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=60_000
    ):
        window.open_model(tiny_model_dir)  # the same model again: the last time is known
        assert window.busy.expected_s is not None and window.busy.expected_s > 0
    assert isinstance(window.statusBar(), StatusBar)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=60_000
    ):
        window.open_model(tiny_model_dir, device="webgpu")  # another device: no estimate
        assert window.busy.expected_s is None


def test_a_long_busy_text_never_widens_the_window(qtbot) -> None:
    # A plain QLabel would ask for its whole text: 800+ px here, past a 200 % screen.
    window, bar, _ = _window(qtbot, 500)
    busy = BusyIndicator()
    bar.insertPermanentWidget(0, busy)
    before = window.minimumSizeHint().width()
    busy.start("Loading a-model-folder-with-a-very-long-name-Q4_K_M-instruct-2026", 30.0)
    qtbot.waitUntil(lambda: busy.label.text().endswith("…"))
    assert window.minimumSizeHint().width() <= before + 200  # the bar and a few letters
    assert window.width() == 500 and busy.label.toolTip() == busy.label.full_text
