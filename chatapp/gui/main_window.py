"""The main window: composes the chat view, the side panel and the menus around one controller.

Layout: a horizontal splitter [conversation list | tabs (Chat, Compare loops) | side panel].
The history adds the conversation list (chatapp/gui/history/ui.py); the comparison's tab takes
the whole width while it is shown.
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

from chatapp.engine.devices import CPU
from chatapp.engine.modes import Mode
from chatapp.gui.chat.controller import ChatController, GenerationOptions, State
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.chat.view import ChatView
from chatapp.gui.common import geometry
from chatapp.gui.common.banner import MessageBanner
from chatapp.gui.common.settings import remember_recent
from chatapp.gui.common.workers import JobRunner
from chatapp.gui.models.library import (
    last_load_seconds,
    load_key,
    remember_last_model,
    remember_load_seconds,
)
from chatapp.gui.window.menus import RECENT_KEY, WindowMenus
from chatapp.gui.window.status_bar import BusyIndicator, StatusBar
from chatapp.session import formatting as fmt
from chatapp.session.conversation import Conversation
from chatapp.session.model_jobs import EngineHost, ModelSummary, device_probe_job
from chatapp.session.prompt_style import BASE_MODEL_NOTICE

F = TypeVar("F")


class MainWindow(QMainWindow):
    def __init__(
        self,
        settings: QSettings,
        parent: QWidget | None = None,
        features: Sequence[Callable[[MainWindow], object]] = (),
    ) -> None:
        """`features`: what plugs in (gui/app.py's FEATURES: the comparison, the history,
        the remote server), each called with the finished frame, in order."""
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("chatapp")
        self.settings = settings
        self.model_dir: Path | None = None  # the folder last asked for
        self.onnx_file: str | None = None  # and the graph in it, if one was named
        self._load_key: str | None = None  # the load under way, to remember how long it took
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

        # One worker thread and one owner of the engine for the chat and the comparison view:
        # their jobs queue on the same runner, so they never use the engine at once.
        self.runner = JobRunner("EngineWorkerThread", parent=self)
        # Work that never touches the engine (conversions, reading a folder's graphs, starting
        # the server) runs on its own thread: it never waits behind an answer, nor blocks
        # this one.
        self.tools = JobRunner("ToolWorkerThread", parent=self)
        self.host = EngineHost()
        self.controller = ChatController(self.runner, self.host, self, self.tools)
        self.chat_view = ChatView(self)
        self.side_panel = SidePanel(self)
        self.banner = MessageBanner(self)

        chat_page = QWidget(self)
        chat_layout = QVBoxLayout(chat_page)
        chat_layout.setContentsMargins(8, 8, 4, 8)
        chat_layout.addWidget(self.banner)
        chat_layout.addWidget(self.chat_view, 1)
        self.tabs = QTabWidget(self)
        self.tabs.setObjectName("mainTabs")
        self.tabs.setDocumentMode(True)
        self.tabs.setTabBarAutoHide(True)
        self.tabs.addTab(chat_page, "Chat")

        side_scroll = QScrollArea(self)
        side_scroll.setObjectName("sidePanelScroll")
        side_scroll.setWidget(self.side_panel)
        side_scroll.setWidgetResizable(True)
        side_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        side_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        # Its narrowest, so that a small window keeps a usable chat (view_options.fit_chat).
        side_scroll.setMinimumWidth(self.side_panel.minimumSizeHint().width() + 16)
        self.side_scroll = side_scroll

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.setObjectName("mainSplitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self.tabs)
        self.splitter.addWidget(side_scroll)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 0)
        self.setCentralWidget(self.splitter)

        self.menus = WindowMenus(self)
        # What other features hook into (the history, the remote server) and tests use.
        self.file_menu = self.menus.file_menu
        self.recent_menu = self.menus.recent_menu
        self.new_chat_action = self.menus.new_chat_action
        self.show_chat_action = self.menus.show_chat_action
        self.open_log_action = self.menus.open_log_action
        self.data_places_action = self.menus.data_places_action
        self.view_options = self.menus.view_options
        self.view_options.add_pane(side_scroll, "side")
        self.view_options.add_chat(self.splitter, self.tabs)
        self._build_status_bar()
        self.side_panel.restore(settings)
        probe = self.tools.submit(device_probe_job())
        probe.sig_finished.connect(self.side_panel.set_devices)
        probe.sig_errored.connect(lambda _error: self.side_panel.set_devices([CPU]))  # logged
        self._restore_geometry()
        self._connect()
        self._on_state_changed(self.controller.state)
        self.chat_view.prompt_edit.setFocus()
        for install in features:
            install(self)

    # ---- features (compare, history, remote): what they plug into ------------------------
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
        self._on_state_changed(self.controller.state)

    def system_prompt(self) -> str:
        """The chat's system prompt as typed (the comparison uses it too)."""
        return self.side_panel.system_prompt_edit.toPlainText()

    def notify(self, text: str, timeout_ms: int = 0) -> None:
        """A passing line in the status bar (0: until the next one)."""
        self.statusBar().showMessage(text, timeout_ms)

    def add_status_widget(self, widget: QWidget) -> None:
        """A feature's widget at the left of the status bar's permanent ones."""
        self.statusBar().insertPermanentWidget(0, widget)

    def dismiss_message(
        self, *, warnings_too: bool = False, failures_before: int | None = None
    ) -> int:
        """Hide the banner when it told of a problem or gave a tip (warnings stay, unless
        `warnings_too`: what they said is gone, e.g. a server's). With `failures_before` (what
        this returned when an answer started, now that it succeeded): hide only a failure the
        banner told of then (`until_answer`). Returns the serial of the banner's last message."""
        if failures_before is not None:
            self.banner.dismiss_if_before(failures_before)
        elif self.banner.level in ("error", "info") or (warnings_too and self.banner.level):
            self.banner.dismiss()
        return self.banner.serial

    def show_backend(self, line: str, title: str) -> None:
        """What answers: the status bar's model line and the window title."""
        self.model_label.setText(line)
        self.setWindowTitle(title)

    def show_context(self, used: int, total: int) -> None:
        """The side panel's context bar: tokens the next answer sends, of `total`."""
        self.side_panel.set_context(used, total)

    def chat_options(self) -> GenerationOptions:
        """The sampling, mode and system prompt the side panel holds for the next answer."""
        return self.side_panel.options()

    def loop_mode(self) -> Mode:
        """The loop the side panel asks for (the server of Serve this model defaults to it)."""
        return self.side_panel.mode()

    # ---- building -----------------------------------------------------------------------
    def _build_status_bar(self) -> None:
        bar = StatusBar(self)
        self.setStatusBar(bar)
        self.busy = BusyIndicator(self)
        self.model_label = QLabel("No model", self)
        self.model_label.setObjectName("modelLabel")
        bar.addPermanentWidget(self.busy)
        bar.addPermanentWidget(self.model_label)

    def _connect(self) -> None:
        c, chat, panel = self.controller, self.chat_view, self.side_panel
        chat.sig_new_chat.connect(self.new_chat)  # the answers' flow: gui/chat/feature.py
        c.sig_state_changed.connect(self._on_state_changed)
        c.sig_model_loaded.connect(self._on_model_loaded)
        c.sig_backend_changed.connect(lambda _remote: self._on_state_changed(c.state))
        c.sig_load_failed.connect(self._on_load_failed)
        c.sig_conversation_changed.connect(self._on_conversation_changed)
        self.tabs.currentChanged.connect(self._on_tab_changed)
        panel.sig_mode_changed.connect(self._on_mode_changed)
        panel.sig_device_changed.connect(self._on_engine_setting_changed)
        panel.sig_threads_changed.connect(self._on_engine_setting_changed)

    # ---- models ---------------------------------------------------------------------------
    def open_model(
        self, folder: Path | str, device: str | None = None, onnx_file: str | None = None
    ) -> bool:
        """Load `folder` in the worker (returns at once). `device` overrides the selector once
        (the command line's --device, which may name a device this machine lacks); `onnx_file`
        picks one of the folder's graphs (--onnx-file; None: the folder's default)."""
        folder = Path(folder).expanduser()
        started = self.controller.open_model(
            folder,
            device or self.side_panel.device(),
            self.side_panel.threads(),
            self.side_panel.mode(),
            onnx_file,
        )
        if started:
            self.model_dir = folder
            self.onnx_file = onnx_file
            self._load_key = load_key(folder, onnx_file, device or self.side_panel.device())
            expected = last_load_seconds(self.settings, self._load_key)
            self.busy.start(f"Loading {folder.name}", expected)
        return started

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        if self._load_key is not None and summary.load_seconds > 0:
            remember_load_seconds(self.settings, self._load_key, summary.load_seconds)
        self._load_key = None
        kernels = f" · {summary.kernels}" if summary.kernels else ""
        self.model_label.setText(f"{summary.name} · {summary.device_label}{kernels}")
        self.model_label.setToolTip(summary.description)
        self.setWindowTitle(f"{summary.name} — chatapp")
        self.statusBar().showMessage(f"Loaded {summary.description}", 8000)
        self.side_panel.set_fallback_reason(summary.fallback_reason)
        self.side_panel.set_device_memory(
            summary.device_own_memory,
            summary.device_label,
            summary.kv_bytes_per_token,
            summary.device,
            summary.name,
        )
        if summary.device != summary.requested_device:
            # Show what runs (the CPU after a fallback); the saved choice stays the user's.
            self.side_panel.preselect(device=summary.device)
        self.side_panel.set_context(0, summary.max_context)
        self.side_panel.set_model_sampling(summary.sampling)
        prompt = self.side_panel.sampling_box.prompt
        prompt.set_chat_template(summary.has_chat_template, str(summary.folder))
        remember_recent(self.settings, RECENT_KEY, str(summary.folder))
        # The graph only when one was named: a folder's default depends on the device (its
        # native graph on the CPU, its stock one elsewhere).
        remember_last_model(self.settings, summary.folder, self.onnx_file or "")
        notice = summary.sampling.notice if summary.sampling is not None else None
        if summary.fallback_reason:  # a device that failed: old once an answer succeeds
            self.show_message(summary.fallback_reason, "warning", until_answer=True)
        elif not summary.has_chat_template:
            self.show_message(BASE_MODEL_NOTICE, "info")
        elif notice:
            self.show_message(notice, "info")
        elif self.banner.level in ("error", "info"):
            self.banner.dismiss()  # the problem the banner described is solved

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._load_key = None
        self.statusBar().showMessage("The model could not be loaded.", 8000)
        if self.controller.backend is not None:
            message += f" Still using {self.controller.backend.name}."
        self.show_message(message, "error", until_answer=True)

    def _on_engine_setting_changed(self, _value: object) -> None:
        # Device and threads live in the session: reload the same model (the chat stays).
        # The side panel locks both while an answer streams, so this never lands mid-answer.
        if self.model_dir is not None and self.controller.state in (State.READY, State.NO_MODEL):
            self.open_model(self.model_dir, onnx_file=self.onnx_file)

    @Slot(str)
    def _on_mode_changed(self, mode: str) -> None:
        self.statusBar().showMessage(fmt.next_answer_loop(mode), 8000)

    # ---- chat -----------------------------------------------------------------------------
    @property
    def conversation(self) -> Conversation:
        return self.controller.conversation

    @Slot()
    def new_chat(self) -> None:
        if self.controller.state is State.GENERATING or not self.may_leave_chat("new chat"):
            return
        if self.controller.new_chat():
            self.side_panel.start_answer()
            backend = self.controller.backend
            total = backend.max_context if backend is not None else 0
            self.side_panel.set_context(0, total)

    @Slot(object)
    def _on_conversation_changed(self, conversation: Conversation) -> None:
        self.chat_view.show_messages(conversation.messages)
        self._on_state_changed(self.controller.state)

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

    @Slot(object)
    def _on_state_changed(self, state: State) -> None:
        if any(busy() for busy in self.busy_checks):
            state = State.GENERATING  # the chat waits for the comparison, like for an answer
        ready, generating = state is State.READY, state is State.GENERATING
        busy = state in (State.LOADING, State.CONVERTING)
        self.chat_view.set_actions(
            can_send=ready,
            can_stop=generating,
            can_regenerate=ready and self.conversation.can_regenerate(),
            can_new_chat=not generating,
        )
        self.side_panel.set_generating(generating)
        if not generating:
            self.side_panel.set_loading(busy)
        m = self.menus
        for action in (m.open_folder_action, m.open_gguf_action, m.recent_menu):
            action.setEnabled(not (generating or busy))
        self.new_chat_action.setEnabled(not generating)
        if busy and not self.busy.running:
            self.busy.start("Converting" if state is State.CONVERTING else "Opening")
        elif not busy:
            self.busy.stop()
        self.chat_view.set_hint(
            {
                State.NO_MODEL: "Open a model (File menu) to start.",
                State.LOADING: "Loading the model…",
                State.READY: "Enter sends · Shift+Enter: new line",
                State.GENERATING: "Writing… Esc or Stop ends the answer.",
                State.CONVERTING: "Converting the GGUF file…",
            }[state]
        )

    def show_message(self, text: str, level: str = "error", until_answer: bool = False) -> None:
        """Inline banner over the chat (never a blocking dialog: the app keeps going).
        `until_answer`: it tells of a failure that an answer succeeding later shows is over."""
        self.banner.show_message(text, level, until_answer)

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
        """Save settings and stop the worker thread (closing the window calls this)."""
        if self._shut_down:
            return
        self._shut_down = True
        for hook in self.before_shutdown:
            hook()
        geometry.save(self.settings, self, self.splitter)
        self.controller.shutdown()  # both runners

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self._shut_down and not self.may_leave_chat("close"):
            event.ignore()  # the window stays, with its messages
            return
        self.shutdown()
        super().closeEvent(event)


def _open_in_file_manager(folder: Path) -> bool:
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
