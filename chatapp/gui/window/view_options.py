"""The View menu's choices that shape the window: the theme (System / Light / Dark), and the
conversation list and side panel shown or hidden (Ctrl+B, Ctrl+Alt+B). All are remembered; on
a first start the panels that do not fit the screen beside the chat start hidden."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QSettings, QTimer, Slot
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMenu, QScrollArea, QSplitter, QWidget

from chatapp.gui.common.geometry import (
    CHAT_MIN_WIDTH,
    available_area,
    keep_on_screen,
    no_wider_than_chat,
    pane_sizes,
)
from chatapp.gui.common.settings import read_flag
from chatapp.gui.common.theme import THEME_KEY, THEME_LABELS, THEMES, apply_theme, saved_theme

LIST_KEY = "view/conversation_list"
SIDE_KEY = "view/side_panel"
# Widths (device-independent pixels) below which a first start hides a panel: the chat keeps
# at least ~420 px beside what is shown.
WIDTH_FOR_SIDE_PANEL = 780
WIDTH_FOR_BOTH_PANELS = 1020
LIST_MIN_WIDTH = 130  # the conversation list, narrowed for the chat: titles elided


class ViewOptions(QObject):
    def __init__(
        self,
        window: QWidget,
        menu: QMenu,
        settings: QSettings,
        show_panes: Callable[[], None],
    ) -> None:
        super().__init__(window)
        self.window = window
        self.settings = settings
        self.show_panes = show_panes  # the window lays its panes out again
        self._panes: dict[QWidget, QAction] = {}  # each pane beside the chat, by its toggle
        self._splitter: QSplitter | None = None  # the panes and the chat, side by side
        self._chat: QWidget | None = None
        menu.addSeparator()
        self.list_action = self._toggle(menu, "Conversation &list", "Ctrl+B", LIST_KEY)
        self.side_action = self._toggle(menu, "&Side panel", "Ctrl+Alt+B", SIDE_KEY)
        self.theme_menu = menu.addMenu("&Theme")
        self.theme_group = QActionGroup(self)
        self.theme_group.setExclusive(True)
        self.theme_actions: dict[str, QAction] = {}
        for name in THEMES:
            action = self.theme_menu.addAction(THEME_LABELS[name])
            action.setCheckable(True)
            action.setObjectName(f"theme_{name}")
            action.triggered.connect(lambda _checked=False, n=name: self.set_theme(n))
            self.theme_group.addAction(action)
            self.theme_actions[name] = action
        self.theme = saved_theme(settings)
        self.theme_actions[self.theme].setChecked(True)
        if self.theme != "system":
            apply_theme(self.theme)
        self._list_fits = True
        window.installEventFilter(self)  # resizes: keep the chat usable

    def _toggle(self, menu: QMenu, text: str, shortcut: str, key: str) -> QAction:
        action = QAction(text, self.window)
        action.setCheckable(True)
        action.setShortcut(QKeySequence(shortcut))
        action.setChecked(_flag(self.settings, key, True))
        action.toggled.connect(lambda on: self._on_toggled(key, on))
        menu.addAction(action)
        return action

    # ---- panels ---------------------------------------------------------------------------
    def fit_first_start(self) -> None:
        """On a screen too narrow for every panel, start without those that do not fit (a
        choice the user made before stays)."""
        width = available_area(self.window).width()
        for action, key, needs in (
            (self.side_action, SIDE_KEY, WIDTH_FOR_SIDE_PANEL),
            (self.list_action, LIST_KEY, WIDTH_FOR_BOTH_PANELS),
        ):
            if not self.settings.contains(key) and width < needs:
                action.blockSignals(True)  # for this screen, not saved as a choice
                action.setChecked(False)
                action.blockSignals(False)

    def add_pane(self, widget: QWidget, side: str) -> None:
        """`widget` is shown or hidden by the toggle of its `side` ("list" on the left, "side"
        on the right)."""
        self._panes[widget] = self.list_action if side == "list" else self.side_action

    def wanted(self, widget: QWidget) -> bool:
        """Whether the user wants `widget` (a pane beside the chat) shown."""
        action = self._panes.get(widget)
        if action is None:
            return True
        if action is self.list_action:
            return action.isChecked() and self._list_fits
        return action.isChecked()

    # ---- a narrow window: the chat first ------------------------------------------------------
    def add_chat(self, splitter: QSplitter, chat: QWidget) -> None:
        """The splitter that holds the panes, and the chat in it (kept usable first)."""
        self._splitter, self._chat = splitter, chat

    def pane_widths(self) -> list[tuple[int, int]]:
        """(preferred, minimum) width of each pane of the window's splitter, in order."""
        splitter = self._splitter
        panes: list[tuple[int, int]] = []
        for i in range(splitter.count() if splitter is not None else 0):
            widget = splitter.widget(i) if splitter is not None else None
            action = self._panes.get(widget) if widget is not None else None
            if widget is not None and action is self.list_action:
                preferred = max(230, widget.sizeHint().width())
                least = max(widget.minimumWidth(), widget.minimumSizeHint().width())
                panes.append((preferred, max(LIST_MIN_WIDTH, least)))
            elif widget is not None and action is self.side_action:
                minimum = widget.minimumWidth()
                inner = widget.widget() if isinstance(widget, QScrollArea) else widget
                hint = (inner or widget).sizeHint().width()
                panes.append((max(minimum, hint + 24), minimum))
            else:  # the chat
                panes.append((0, CHAT_MIN_WIDTH))
        return panes

    def fit_chat(self) -> None:
        """Hide the conversation list while the window is too narrow for it beside a usable
        chat (the View menu's choice stays), then narrow the shown panes before the chat."""
        window, splitter = self.window, self._splitter
        if splitter is None:
            return
        shown = [
            (i, pane)
            for i, pane in enumerate(self.pane_widths())
            if (widget := splitter.widget(i)) is not None
            and (widget is self._chat or self.wanted_ignoring_width(widget))
        ]
        handles = splitter.handleWidth() * max(0, len(shown) - 1)
        needed = sum(minimum for _, (_, minimum) in shown) + handles
        fits = splitter.width() >= needed
        if fits != self._list_fits:
            self._list_fits = fits
            self.show_panes()
        visible = [
            (i, pane)
            for i, pane in shown
            if (widget := splitter.widget(i)) is not None and widget.isVisibleTo(window)
        ]
        chat = next((i for i, _ in visible if splitter.widget(i) is self._chat), None)
        sizes = splitter.sizes()
        if chat is None or len(visible) < 2:
            return
        widths = [sizes[i] for i, _ in visible]
        panes = [p for _, p in visible]
        flexible = [i for i, _ in visible].index(chat)
        if sizes[chat] < CHAT_MIN_WIDTH:
            wanted = pane_sizes(sum(widths), panes, flexible)
        else:  # wide enough; but no pane wider than the chat (a saved layout, a drag)
            wanted = no_wider_than_chat(widths, panes, flexible)
        if wanted != widths:
            for (i, _), width in zip(visible, wanted, strict=True):
                sizes[i] = width
            splitter.setSizes(sizes)

    def wanted_ignoring_width(self, widget: QWidget) -> bool:
        if self._panes.get(widget) is self.list_action:
            return self.list_action.isChecked()
        return self.wanted(widget)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self.fit_chat)  # once the splitter has its new width
        return False

    def _on_toggled(self, key: str, on: bool) -> None:
        self.settings.setValue(key, on)
        self.show_panes()
        # A pane shown may widen the window past the screen's edge: bring it back once the
        # layout has settled.
        QTimer.singleShot(0, lambda: keep_on_screen(self.window))

    # ---- theme ----------------------------------------------------------------------------
    @Slot(str)
    def set_theme(self, name: str) -> None:
        self.theme = apply_theme(name)
        self.theme_actions[self.theme].setChecked(True)
        self.settings.setValue(THEME_KEY, self.theme)


def _flag(settings: QSettings, key: str, default: bool) -> bool:
    return read_flag(settings, key, default)
