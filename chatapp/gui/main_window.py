"""The main window: the frame the features plug into: the chat's page and side panel (which
the chat feature builds, gui/chat/feature.py), the panes, tabs, menus and status bar.

Layout: a horizontal splitter [conversation list | tabs (Chat, Compare loops) | side panel].
The history adds the conversation list (chatapp/gui/history/ui.py); the comparison's tab takes
the whole width while it is shown. The frame imports no feature: it knows the chat by the
`ChatFace` protocol (gui/window/chat_face.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QSettings, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.common import geometry
from chatapp.gui.common.anchored_scroll import AnchoredScrollArea
from chatapp.gui.common.banner import MessageBanner
from chatapp.gui.common.workers import JobRunner
from chatapp.gui.window.chat_face import ChatFace
from chatapp.gui.window.menus import WindowMenus
from chatapp.gui.window.status_bar import BusyIndicator, StatusBar
from chatapp.session.model_jobs import EngineHost

F = TypeVar("F")


class MainWindow(QMainWindow):
    def __init__(
        self,
        settings: QSettings,
        chat: Callable[[MainWindow], ChatFace],
        parent: QWidget | None = None,
        features: Sequence[Callable[[MainWindow], object]] = (),
    ) -> None:
        """`chat`: builds the chat (gui/chat/feature.py's install_chat) once the frame's
        runners, menus and status bar exist; `features`: what plugs in then (gui/app.py's
        FEATURES: the models, the comparison, the history, the remote server), each called
        with the finished frame, in order."""
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("chatapp")
        self.settings = settings
        self._shut_down = False
        # What features subscribe to (see "features" below): called first when the window
        # shuts down, while the worker still runs (the server of "Serve this model" stops
        # there: its requests are jobs on the worker) ...
        self.before_shutdown: list[Callable[[], None]] = []
        # ... and asked, in turn, before the chat shown is replaced by an empty one or another
        # ("new chat", "open", "import", "close"); the history asks about unsaved messages.
        self.leave_checks: list[Callable[[str], bool]] = []
        # ... and asked when the controls are set: a feature at work (a comparison) holds
        # the chat as an answer does.
        self.busy_checks: list[Callable[[], bool]] = []
        self._features: list[object] = []
        self._whole_width: list[QWidget] = []  # tabs shown without the side panes
        self.conversation_list: QWidget | None = None  # the history's, once installed
        # Shows a folder in the file manager; tests replace it.
        self.open_folder: Callable[[Path], bool] = _open_in_file_manager

        # One owner of the engine's thread for the chat, the comparison view and Serve this
        # model: the runner's EngineService (session/engine_service.py), one queue, so they
        # never use the engine at once.
        self.runner = JobRunner("EngineWorkerThread", parent=self)
        # Work that never touches the engine (conversions, reading a folder's graphs, starting
        # the server) runs on its own thread: it never waits behind an answer, nor blocks
        # this one.
        self.tools = JobRunner("ToolWorkerThread", parent=self)
        self.host = EngineHost()
        self.banner = MessageBanner(self)
        self.tabs = QTabWidget(self)
        self.tabs.setObjectName("mainTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.setTabBarAutoHide(True)
        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.setObjectName("mainSplitter")
        self.splitter.setChildrenCollapsible(False)
        self.menus = WindowMenus(self)
        # What other features hook into (the history, the remote server) and tests use.
        self.file_menu = self.menus.file_menu
        self.recent_menu = self.menus.recent_menu
        self.new_chat_action = self.menus.new_chat_action
        self.show_chat_action = self.menus.show_chat_action
        self.open_log_action = self.menus.open_log_action
        self.data_places_action = self.menus.data_places_action
        self.view_options = self.menus.view_options
        self._build_status_bar()

        self.chat = chat(self)
        chat_page = QWidget(self)
        chat_layout = QVBoxLayout(chat_page)
        chat_layout.setContentsMargins(8, 8, 4, 8)
        chat_layout.addWidget(self.banner)
        chat_layout.addWidget(self.chat.chat_view, 1)
        self.tabs.addTab(chat_page, "Chat")

        side_panel = self.chat.side_panel
        # It stays on what it shows while the figures above change height (an answer streams).
        side_scroll = AnchoredScrollArea(self)
        side_scroll.setObjectName("sidePanelScroll")
        side_scroll.setWidget(side_panel)
        side_scroll.setWidgetResizable(True)
        side_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        side_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        # Its narrowest, so that a small window keeps a usable chat (view_options.fit_chat).
        side_scroll.setMinimumWidth(side_panel.minimumSizeHint().width() + 16)
        self.side_scroll = side_scroll

        self.splitter.addWidget(self.tabs)
        self.splitter.addWidget(side_scroll)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 0)
        self.setCentralWidget(self.splitter)
        self.view_options.add_pane(side_scroll, "side")
        self.view_options.add_chat(self.splitter, self.tabs)
        self._restore_geometry()
        self.tabs.currentChanged.connect(self._on_tab_changed)
        self.chat.refresh_controls()
        self.chat.focus()
        for install in features:
            install(self)

    # ---- features (models, compare, history, remote): what they plug into ----------------
    # A feature is an install function the window calls from its `features` list (gui/app.py
    # names them; the window never imports one): it adds its menus (`menus.add_menu`,
    # `menus.add_file_actions`), panes (`add_pane`) and tabs (`add_view`), subscribes to
    # `before_shutdown`, `leave_checks` and `busy_checks`, says things with `notify` and
    # `show_message`, and registers itself (`add_feature`) so that others and tests find it
    # by its class. tests/test_architecture.py lists the window names a feature may use.
    def add_feature(self, feature: object) -> None:
        self._features.append(feature)

    def feature(self, kind: type[F]) -> F | None:
        """The installed feature of class `kind`, if any."""
        return next((f for f in self._features if isinstance(f, kind)), None)

    def may_leave_chat(self, why: str) -> bool:
        """Whether the chat shown may go away (`why`: "new chat", "open", "import",
        "close"): every check agrees; the first that says no ends the asking."""
        return all(check(why) for check in self.leave_checks)

    def add_pane(self, widget: QWidget) -> None:
        """Put a pane (the history's conversation list) on the left; View > Conversation
        list shows or hides it."""
        self.conversation_list = widget
        self.view_options.add_pane(widget, "list")
        self.splitter.insertWidget(0, widget)
        for index, stretch in enumerate((0, 1, 0)):
            self.splitter.setStretchFactor(index, stretch)
        self._restore_splitter()  # a saved layout with the list in it, or the default
        self.show_panes()

    def add_view(
        self,
        widget: QWidget,
        title: str,
        action_text: str,
        shortcut: QKeySequence | None = None,
        whole_width: bool = False,
    ) -> tuple[int, QAction]:
        """Add a tab next to the chat (e.g. "Compare loops"; the tab bar then appears) and
        its View menu action; `whole_width`: the panes beside the chat hide while it shows."""
        index = self.tabs.addTab(widget, title)
        if whole_width:
            self._whole_width.append(widget)
        action = self.menus.add_view_action(
            action_text, lambda: self.tabs.setCurrentIndex(index), shortcut
        )
        return index, action

    def refresh_controls(self) -> None:
        """Enable what the chat's state and the features' busy_checks allow (a feature calls
        this when its own work starts or ends)."""
        self.chat.refresh_controls()

    def open_model(
        self, folder: Path | str, device: str | None = None, onnx_file: str | None = None
    ) -> bool:
        """Load `folder` in the worker (returns at once): the chat's `open_model`."""
        return self.chat.open_model(folder, device, onnx_file)

    @Slot()
    def new_chat(self) -> None:
        """An empty chat, once the leave_checks agree (File > New chat)."""
        self.chat.new_chat()

    def notify(self, text: str, timeout_ms: int = 0) -> None:
        """A passing line in the status bar (0: until the next one)."""
        self.statusBar().showMessage(text, timeout_ms)

    def add_status_widget(self, widget: QWidget) -> None:
        """A feature's widget at the left of the status bar's permanent ones."""
        self.statusBar().insertPermanentWidget(0, widget)

    def dismiss_message(
        self,
        *,
        warnings_too: bool = False,
        failures_before: int | None = None,
        cause: str | None = None,
    ) -> int:
        """Hide the banner when it told of a problem or gave a tip (warnings stay, unless
        `warnings_too`: what they said is gone, e.g. a server's). With `failures_before` (what
        this returned when an answer started, now that it succeeded): hide only a failure the
        banner told of then (`until_answer`). With `cause` (an operation that just succeeded):
        hide only the message shown with that cause. Returns the serial of the banner's last
        message."""
        if cause is not None:
            self.banner.dismiss_cause(cause)
        elif failures_before is not None:
            self.banner.dismiss_if_before(failures_before)
        elif self.banner.level in ("error", "info") or (warnings_too and self.banner.level):
            self.banner.dismiss()
        return self.banner.serial

    def shown_message(self) -> tuple[str, str] | None:
        """The banner's text and level while it shows (a feature replaces or clears its own
        message once its cause is gone)."""
        if not self.banner.isVisible():
            return None
        return self.banner.text(), self.banner.level

    def show_backend(self, line: str, title: str, tip: str | None = None) -> None:
        """What answers: the status bar's model line (`tip`: its tooltip, when given) and the
        window title."""
        self.model_label.setText(line)
        if tip is not None:
            self.model_label.setToolTip(tip)
        self.setWindowTitle(title)

    # ---- building -----------------------------------------------------------------------
    def _build_status_bar(self) -> None:
        bar = StatusBar(self)
        self.setStatusBar(bar)
        self.busy = BusyIndicator(self)
        self.model_label = QLabel("No model", self)
        self.model_label.setObjectName("modelLabel")
        bar.addPermanentWidget(self.busy)
        bar.addPermanentWidget(self.model_label)

    # ---- panes --------------------------------------------------------------------------
    @Slot(int)
    def _on_tab_changed(self, _index: int) -> None:
        self.show_panes()

    def show_panes(self) -> None:
        """The panes beside the chat the View menu asks for; the comparison's charts get the
        whole width."""
        chat = self.tabs.currentWidget() not in self._whole_width
        for i in range(self.splitter.count()):
            widget = self.splitter.widget(i)
            if widget is not None and widget is not self.tabs:
                widget.setVisible(chat and self.view_options.wanted(widget))

    def show_message(
        self,
        text: str,
        level: str = "error",
        until_answer: bool = False,
        action: tuple[str, Callable[[], object]] | None = None,
        cause: str = "",
    ) -> None:
        """Inline banner over the chat (never a blocking dialog: the app keeps going).
        `until_answer`: it tells of a failure that an answer succeeding later shows is over.
        `action`: one button beside the message (its label, what it does). `cause`: what
        failed; `dismiss_message(cause=...)` clears it once that succeeds."""
        self.banner.show_message(text, level, until_answer, action, cause)

    # ---- lifetime -------------------------------------------------------------------------
    def _restore_geometry(self) -> None:
        if not geometry.restore(self, self.settings.value(geometry.WINDOW_KEY)):
            # First start: fit the screen (a small one, or a large scaling factor), without
            # the panes that would squeeze the chat.
            self.view_options.fit_first_start()
            self.show_panes()
            geometry.place_first_time(self)
        self.show_panes()
        self._restore_splitter()

    def _restore_splitter(self) -> None:
        # Once the window is shown and laid out: a state restored into a splitter that has no
        # size yet comes out squeezed to the panes' minimum widths.
        QTimer.singleShot(0, self._apply_splitter)

    def _apply_splitter(self) -> None:
        saved = self.settings.value(geometry.SPLITTER_KEY)
        if geometry.restore_splitter(self.splitter, saved):
            self.view_options.fit_chat()  # saved on a wider screen: the chat first here
            return
        # Each pane as wide as it likes, the chat the rest: on a narrow window the panes give
        # way first, and the list hides while the chat would be too narrow beside it.
        panes = self.view_options.pane_widths()
        chat = self.splitter.indexOf(self.tabs)
        self.splitter.setSizes(geometry.pane_sizes(self.splitter.width(), panes, chat))
        self.view_options.fit_chat()

    def shutdown(self) -> None:
        """Save settings and end the engine service's threads (closing the window calls this)."""
        if self._shut_down:
            return
        self._shut_down = True
        for hook in self.before_shutdown:
            hook()
        geometry.save(self.settings, self, self.splitter)
        self.chat.shutdown()  # both runners

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self._shut_down and not self.may_leave_chat("close"):
            event.ignore()  # the window stays, with its messages
            return
        self.shutdown()
        super().closeEvent(event)


def _open_in_file_manager(folder: Path) -> bool:
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
