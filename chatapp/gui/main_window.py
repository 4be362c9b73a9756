"""The main window: composes the chat view, the side panel and the menus around one controller.

Layout: a horizontal splitter [conversation list | tabs (Chat, Compare loops) | side panel].
The history adds the conversation list (chatapp/gui/history/ui.py); the comparison's tab takes
the whole width while it is shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QCloseEvent, QDesktopServices
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from chatapp.datadir import models_dir
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.controller import ChatController, State
from chatapp.gui.chat.regenerate_note import VARIED_PRESET, same_answer
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.chat.view import ChatView
from chatapp.gui.common import geometry
from chatapp.gui.common.banner import MessageBanner
from chatapp.gui.common.progress import ConversionProgressDialog
from chatapp.gui.common.settings import remember_recent
from chatapp.gui.common.workers import JobRunner
from chatapp.gui.compare.view import CompareView
from chatapp.gui.menus import RECENT_KEY, WindowMenus
from chatapp.gui.model_library import (
    ModelsDialog,
    last_load_seconds,
    load_key,
    remember_last_model,
    remember_load_seconds,
)
from chatapp.gui.status_bar import BusyIndicator, StatusBar
from chatapp.gui.variant_picker import VariantPicker, has_choice
from chatapp.session import formatting as fmt
from chatapp.session.chat_jobs import StatsSnapshot, TokenBatch
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.model_jobs import EngineHost, ModelSummary


class MainWindow(QMainWindow):
    def __init__(
        self,
        settings: QSettings,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("chatapp")
        self.settings = settings
        self.model_dir: Path | None = None  # the folder last asked for
        self.onnx_file: str | None = None  # and the graph in it, if one was named
        self._load_key: str | None = None  # the load under way, to remember how long it took
        self._shut_down = False
        # Called first when the window shuts down, while the worker still runs (the server of
        # "Serve this model" stops there: its requests are jobs on the worker).
        self.before_shutdown: list[Callable[[], None]] = []
        self.conversation_list: QWidget | None = None  # the history's, once installed
        # Shows a folder in the file manager; tests replace it.
        self.open_folder: Callable[[Path], bool] = _open_in_file_manager
        # Asked before the chat shown is replaced by an empty one; the history installs a
        # check for unsaved messages (gui/history/unsaved.py).
        self.may_leave_chat: Callable[[str], bool] = lambda _why: True

        # One worker thread and one owner of the engine for the chat and the comparison view:
        # their jobs queue on the same runner, so they never use the engine at once.
        self.runner = JobRunner("EngineWorkerThread", parent=self)
        self.host = EngineHost()
        self.controller = ChatController(self.runner, self.host, self)
        self.convert_progress = ConversionProgressDialog(
            self,
            "convertProgressDialog",
            "Open GGUF",
            "Converting for ONNX Runtime: {message}…\n{left}",
            self.controller.cancel_conversion,
        )
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
        self.compare_view = CompareView(self.runner, self.host, self)
        self.compare_view.system_prompt = lambda: self.side_panel.system_prompt_edit.toPlainText()
        self.compare_tab = self.add_view(self.compare_view, "Compare loops")
        # Its controls must not widen the chat page (a small screen keeps both side panes):
        # the comparison gets the whole window when shown.
        self.compare_view.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

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
        self.compare_action = self.menus.compare_action
        self.show_chat_action = self.menus.show_chat_action
        self.open_log_action = self.menus.open_log_action
        self.data_places_action = self.menus.data_places_action
        self.view_options = self.menus.view_options
        self._build_status_bar()
        self.side_panel.restore(settings)
        self._restore_geometry()
        self._connect()
        self._on_state_changed(self.controller.state)
        self.chat_view.prompt_edit.setFocus()

    # ---- composition hooks (the history's list, the comparison's tab) -----------------------
    def set_conversation_list(self, widget: QWidget) -> None:
        """Put a conversation list on the left (history issue)."""
        self.conversation_list = widget
        self.splitter.insertWidget(0, widget)
        for index, stretch in enumerate((0, 1, 0)):
            self.splitter.setStretchFactor(index, stretch)
        self._restore_splitter()  # a saved layout with the list in it, or the default
        self.show_panes()

    def add_view(self, widget: QWidget, title: str) -> int:
        """Add a tab next to the chat (e.g. "Compare loops"); the tab bar then appears."""
        return self.tabs.addTab(widget, title)

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
        chat.sig_send.connect(self._on_send)
        chat.sig_stop.connect(c.stop)
        chat.sig_regenerate.connect(self._on_regenerate)
        chat.regenerate_note.sig_regenerate.connect(self._regenerate_varied)
        chat.sig_new_chat.connect(self.new_chat)
        chat.sig_copied.connect(self._on_copied)
        # Transcript: versions of an answer, copied code, where a hovered link goes.
        chat.sig_version_requested.connect(c.select_version)
        chat.sig_code_copied.connect(lambda: self.statusBar().showMessage("Copied the code.", 3000))
        chat.sig_status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        c.sig_state_changed.connect(self._on_state_changed)
        c.sig_model_loaded.connect(self._on_model_loaded)
        c.sig_backend_changed.connect(lambda _remote: self._on_state_changed(c.state))
        c.sig_load_failed.connect(self._on_load_failed)
        c.sig_answer_started.connect(self._on_answer_started)
        c.sig_answer_delta.connect(self._on_answer_delta)
        c.sig_stats.connect(self._on_stats)
        c.sig_warm_up.connect(self._on_warm_up)
        c.sig_answer_finished.connect(self._on_answer_finished)
        c.sig_answer_failed.connect(self._on_answer_failed)
        c.sig_conversation_changed.connect(self._on_conversation_changed)
        c.sig_convert_progress.connect(self._on_convert_progress)
        c.sig_convert_planned.connect(self.convert_progress.set_note)
        c.sig_converted.connect(self._on_converted)
        c.sig_convert_failed.connect(self._on_convert_failed)
        self.compare_view.sig_running.connect(self._on_compare_running)
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

    def convert_and_open(self, gguf: Path | str, out_dir: Path | str | None = None) -> bool:
        """Convert a GGUF file in the worker (with a progress dialog), then open the result."""
        gguf = Path(gguf).expanduser()
        target = Path(out_dir) if out_dir else models_dir() / _folder_name(gguf)
        if not self.controller.convert_gguf(gguf, target):
            return False
        self.convert_progress.open(f"Converting {gguf.name} for ONNX Runtime…")
        self.statusBar().showMessage(f"Converting {gguf.name}…")
        return True

    @Slot(float, str)
    def _on_convert_progress(self, fraction: float, message: str) -> None:
        if self.convert_progress.dialog is not None:  # not after Cancel or the end
            self.convert_progress.report(fraction, message)

    @Slot(object)
    def _on_converted(self, folder: Path) -> None:
        self.convert_progress.close()
        self.statusBar().showMessage(f"Converted into {folder}", 5000)
        self.open_model(folder)

    @Slot(str)
    def _on_convert_failed(self, message: str) -> None:
        self.convert_progress.close()
        self.show_message(message, "error")

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        if self._load_key is not None and summary.load_seconds > 0:
            remember_load_seconds(self.settings, self._load_key, summary.load_seconds)
        self._load_key = None
        self.model_label.setText(f"{summary.name} · {summary.device_label}")
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
        remember_recent(self.settings, RECENT_KEY, str(summary.folder))
        remember_last_model(self.settings, summary.folder, summary.onnx_file)
        notice = summary.sampling.notice if summary.sampling is not None else None
        if summary.fallback_reason:
            self.show_message(summary.fallback_reason, "warning")
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
        self.show_message(message, "error")

    def _on_engine_setting_changed(self, _value: object) -> None:
        # Device and threads live in the session: reload the same model (the chat stays).
        # The side panel locks both while an answer streams, so this never lands mid-answer.
        if self.model_dir is not None and self.controller.state in (State.READY, State.NO_MODEL):
            self.open_model(self.model_dir, onnx_file=self.onnx_file)

    @Slot(str)
    def _on_mode_changed(self, mode: str) -> None:
        self.statusBar().showMessage(f"The next answer uses the {fmt.mode_label(mode)} loop.", 5000)

    # ---- chat -----------------------------------------------------------------------------
    @property
    def conversation(self) -> Conversation:
        return self.controller.conversation

    @Slot(str)
    def _on_send(self, text: str) -> None:
        if self.controller.send(text, self.side_panel.options()):
            self.chat_view.set_prompt_text("")
            self.chat_view.prompt_edit.setFocus()  # after a click on Send, keep typing
        elif self.controller.state is State.NO_MODEL:
            self.show_message("No model is loaded: open a model folder from the File menu.", "info")

    @Slot()
    def _on_regenerate(self) -> None:
        options = self.side_panel.options()
        if self.controller.regenerate(options):
            # Greedy or a fixed seed writes the same text again: say why, offer a way out.
            preset = self.side_panel.sampling_box.preset()
            self.chat_view.regenerate_note.offer(same_answer(options.settings, preset))

    @Slot(str)
    def _regenerate_varied(self, fix: str) -> None:
        box = self.side_panel.sampling_box
        if fix == "seed":
            box.seed_spin.setValue(-1)  # random
        else:
            box.use_preset(VARIED_PRESET)
        self._on_regenerate()

    @Slot()
    def new_chat(self) -> None:
        if self.controller.state is State.GENERATING or not self.may_leave_chat("new chat"):
            return
        if self.controller.new_chat():
            self.side_panel.start_answer()
            backend = self.controller.backend
            total = backend.max_context if backend is not None else 0
            self.side_panel.set_context(0, total)

    @Slot(int)
    def _on_copied(self, index: int) -> None:
        self.statusBar().showMessage(f"Copied message {index + 1} to the clipboard.", 3000)

    @Slot(object)
    def _on_answer_started(self, _options: object) -> None:
        if self.banner.level in ("error", "info"):
            self.banner.dismiss()
        self.chat_view.show_messages(self.conversation.messages)
        self.chat_view.begin_answer()
        self.side_panel.begin_answer()

    @Slot(object)
    def _on_answer_delta(self, batch: TokenBatch) -> None:
        self.chat_view.append_answer(batch.text)
        self.side_panel.add_latencies(batch.first_index, batch.latencies_s)

    @Slot(object)
    def _on_stats(self, snapshot: StatsSnapshot) -> None:
        self.side_panel.show_stats(snapshot.figures)

    @Slot(object)
    def _on_warm_up(self, progress: WarmUpProgress) -> None:
        self.side_panel.show_warm_up(progress)
        self.chat_view.set_hint(
            "Writing… Esc or Stop ends the answer."
            if progress.finished
            else "Preparing the device… (first answer only)"
        )

    @Slot(object)
    def _on_answer_finished(self, message: ChatMessage) -> None:
        self.side_panel.finish_answer(message.figures)
        if message.figures is not None:
            self.statusBar().showMessage(fmt.figures_line(message.figures, tokens=False), 10000)

    @Slot(str, str)
    def _on_answer_failed(self, message: str, restored_prompt: str) -> None:
        if restored_prompt and not self.chat_view.prompt_text().strip():
            self.chat_view.set_prompt_text(restored_prompt)
        self.side_panel.finish_answer(None)
        self.show_message(message, "error")

    @Slot(object)
    def _on_conversation_changed(self, conversation: Conversation) -> None:
        self.chat_view.show_messages(conversation.messages)
        self._on_state_changed(self.controller.state)

    def show_compare_view(self) -> None:
        self.tabs.setCurrentIndex(self.compare_tab)

    @Slot(int)
    def _on_tab_changed(self, _index: int) -> None:
        self.show_panes()

    def show_panes(self) -> None:
        """The panes beside the chat the View menu asks for; the comparison's charts get the
        whole width."""
        chat = self.tabs.currentIndex() != self.compare_tab
        for i in range(self.splitter.count()):
            widget = self.splitter.widget(i)
            if widget is not None and widget is not self.tabs:
                widget.setVisible(chat and self.view_options.wanted(widget))

    @Slot(bool)
    def _on_compare_running(self, _running: bool) -> None:
        self._on_state_changed(self.controller.state)

    @Slot(object)
    def _on_state_changed(self, state: State) -> None:
        comparing = self.compare_view.running
        # The comparison runs both loops of a local model: not a remote server's.
        self.compare_view.set_available(state is State.READY and self.controller.remote is None)
        if comparing:
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

    def show_message(self, text: str, level: str = "error") -> None:
        """Inline banner over the chat (never a blocking dialog: the app keeps going)."""
        self.banner.show_message(text, level)

    # ---- models (File menu) ---------------------------------------------------------------
    def open_model_folder(self, folder: Path) -> bool:
        """Open `folder`; when it holds several graphs, a picker reads them (off the GUI
        thread) and asks which first. True when the load or the picker started."""
        if not has_choice(folder):
            return self.open_model(folder)
        picker = VariantPicker(self.runner, folder, self)
        picker.sig_chosen.connect(lambda graph: self.open_model(folder, onnx_file=graph))
        picker.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        picker.open()
        return True

    @Slot()
    def show_models_dialog(self) -> ModelsDialog:
        dialog = ModelsDialog(models_dir(), self.model_dir, self)
        dialog.sig_open.connect(self.open_model_folder)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

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
        self.convert_progress.close()
        self.compare_view.stop()  # a running comparison ends after its step
        self.controller.shutdown()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)


def _open_in_file_manager(folder: Path) -> bool:
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


def _folder_name(gguf: Path) -> str:
    """A model folder name from a GGUF file name (safe on every file system)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", gguf.stem).strip("-.") or "model"
