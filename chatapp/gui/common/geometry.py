"""Windows that fit the screen: sized to the available area on first start (at any scaling),
put back on a screen when a saved position is off every screen or larger than it, and their
place, size and splitter widths kept between runs."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QDataStream, QRect, QSettings, QSize
from PySide6.QtGui import QGuiApplication, QScreen
from PySide6.QtWidgets import QSplitter, QWidget

from chatapp.gui.common.settings import sync_settings

PREFERRED = QSize(1200, 780)  # the whole layout, comfortably, on a 1280x800 screen
SCREEN_SHARE = 0.92  # of the available area, at most, on first start


def available_area(widget: QWidget) -> QRect:
    """The screen area the window may use (no task bar), in device-independent pixels: with
    QT_SCALE_FACTOR=2 a 1366x768 screen offers about 683x384."""
    screen: QScreen | None = widget.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry() if screen is not None else QRect(0, 0, 1024, 700)


def first_size(area: QRect, preferred: QSize = PREFERRED) -> QSize:
    return QSize(
        min(preferred.width(), int(area.width() * SCREEN_SHARE)),
        min(preferred.height(), int(area.height() * SCREEN_SHARE)),
    )


def place_first_time(window: QWidget) -> None:
    """Size the window to the screen and centre it."""
    area = available_area(window)
    size = first_size(area).expandedTo(window.minimumSizeHint()).boundedTo(area.size())
    window.resize(size)
    window.move(area.center().x() - size.width() // 2, area.center().y() - size.height() // 2)


def restore(window: QWidget, saved: object) -> bool:
    """Restore a saveGeometry() blob and keep the window on the screen; False when there was
    nothing to restore (the caller places it for the first time)."""
    if not isinstance(saved, QByteArray) or saved.isEmpty() or not window.restoreGeometry(saved):
        return False
    keep_on_screen(window)
    return True


def keep_on_screen(window: QWidget) -> None:
    """Shrink the window to the screen that holds most of it (or the primary one) and move it
    fully inside."""
    frame = window.frameGeometry()
    area = _best_screen_area(frame) or available_area(window)
    extra_w = frame.width() - window.width()  # title bar and borders, once the window manager
    extra_h = frame.height() - window.height()  # has decorated it (zero before that)
    width = min(window.width(), area.width() - extra_w)
    height = min(window.height(), area.height() - extra_h)
    if (width, height) != (window.width(), window.height()):
        window.resize(max(width, 200), max(height, 150))
    frame = window.frameGeometry()
    x = min(max(frame.x(), area.left()), area.right() + 1 - frame.width())
    y = min(max(frame.y(), area.top()), area.bottom() + 1 - frame.height())
    if (x, y) != (frame.x(), frame.y()):
        window.move(max(x, area.left()), max(y, area.top()))


def _best_screen_area(frame: QRect) -> QRect | None:
    best, overlap = None, 0
    for screen in QGuiApplication.screens():
        area = screen.availableGeometry()
        common = area.intersected(frame)
        size = common.width() * common.height() if not common.isEmpty() else 0
        if size > overlap:
            best, overlap = area, size
    return best


# ---- saved between runs -----------------------------------------------------------------------
WINDOW_KEY = "window/geometry"
SPLITTER_KEY = "window/splitter"


def save(settings: QSettings, window: QWidget, splitter: QSplitter) -> None:
    """Keep the window's place and size and its splitter's pane widths for the next start."""
    settings.setValue(WINDOW_KEY, window.saveGeometry())
    settings.setValue(SPLITTER_KEY, splitter.saveState())
    sync_settings(settings)  # never through a link planted at its name


def restore_splitter(splitter: QSplitter, saved: object) -> bool:
    """Apply a saveState() blob made with as many panes as `splitter` has now; False when
    there is none (the caller sets default widths). One saved before a pane was added would
    give the new pane another's width."""
    if isinstance(saved, QByteArray) and splitter_panes(saved) == splitter.count():
        return bool(splitter.restoreState(saved))
    return False


def splitter_panes(state: QByteArray) -> int:
    """How many panes a QSplitter.saveState() describes (0 if unreadable)."""
    stream = QDataStream(state)
    marker, _version = stream.readInt32(), stream.readInt32()
    if marker != 0xFF or stream.status() != QDataStream.Status.Ok:
        return 0
    count = stream.readInt32()
    return count if stream.status() == QDataStream.Status.Ok else 0


# ---- the chat between its panes ----------------------------------------------------------------
CHAT_MIN_WIDTH = 300  # the chat's usable width: a prompt box and its hint still readable


def pane_sizes(total: int, panes: list[tuple[int, int]], flexible: int) -> list[int]:
    """Widths for side-by-side panes given as (preferred, minimum) that share `total`: each
    gets its preferred width and pane `flexible` (the chat) the rest; when that rest is below
    the chat's minimum, the other panes give up width toward their minimums, each in
    proportion to what it can give."""
    sizes = [preferred for preferred, _ in panes]
    sizes[flexible] = 0
    need = panes[flexible][1]
    short = need - (total - sum(sizes))
    if short > 0:
        give = [0 if i == flexible else max(0, p - m) for i, (p, m) in enumerate(panes)]
        can = sum(give)
        for i, amount in enumerate(give):
            if amount:
                sizes[i] -= min(amount, -(-short * amount // can))  # rounded up
    sizes[flexible] = max(need, total - sum(sizes))
    return no_wider_than_chat(sizes, panes, flexible)


def no_wider_than_chat(sizes: list[int], panes: list[tuple[int, int]], flexible: int) -> list[int]:
    """No pane wider than the chat (pane `flexible`): one that is gives the chat half the
    difference, down to its own minimum (a side panel as wide as the chat read as the main
    column at 800x500)."""
    sizes = list(sizes)
    for i, (_preferred, minimum) in enumerate(panes):
        if i != flexible and sizes[i] > sizes[flexible]:
            give = min(sizes[i] - minimum, (sizes[i] - sizes[flexible] + 1) // 2)
            if give > 0:
                sizes[i] -= give
                sizes[flexible] += give
    return sizes
