"""Puts the remote backend and the window's server into the main window: File > Connect to
server… / Disconnect from server / Serve this model, the server's address in the status bar,
the side panel's remote figures, and the comparison's "not with a remote server".

The connection itself is a job (session/remote_jobs.py) run by the ChatController, which keeps
one state for whichever backend answers; this module only adds the menus and the views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from PySide6.QtCore import QObject, Slot
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QLabel, QToolButton

from chatapp.engine.backend import BackendCard, BackendError
from chatapp.gui.chat.controller import State
from chatapp.gui.chat.feature import chat_of
from chatapp.gui.common.settings import remember_recent, string_list
from chatapp.gui.remote.dialog import ConnectDialog, key_of, save_key, saved_keys
from chatapp.gui.remote.figures import BackendFigures
from chatapp.gui.remote.serve_dialog import (
    ServeDialog,
    remember_port,
    remember_slots,
    remembered_port,
    remembered_slots,
)
from chatapp.gui.remote.serving import HOST, Serving, WindowServer
from chatapp.gui.remote.serving_box import ServingBox
from chatapp.remote import Timeouts, api_base
from chatapp.session import formatting as fmt
from chatapp.session.chat_jobs import StatsSnapshot
from chatapp.session.model_jobs import ModelSummary
from chatapp.session.remote_jobs import (
    LISTING_TIMEOUTS,
    ConnectRequest,
    list_models_job,
)

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow

RECENT_SERVERS_KEY = "remote/recent"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class ServerUi(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.chat_feature = chat_of(window)
        self.chat = self.chat_feature.controller
        self.figures = BackendFigures(self.chat_feature.side_panel)
        self.server = WindowServer(window.runner, window.host, self, window.tools)
        self._serving_failure: str | None = None  # the banner's, until serving starts
        self.serving_box = ServingBox(self.server)
        self.chat_feature.side_panel.add_backend_box(self.serving_box)
        self.timeouts = Timeouts()  # tests shorten them
        self.listing_timeouts = LISTING_TIMEOUTS
        # API keys by address: this session's, and those the user asked to remember.
        self.keys: dict[str, str] = saved_keys(window.settings)
        self.dialog: ConnectDialog | None = None
        self.serve_dialog: ServeDialog | None = None  # the port asked before serving
        self._build_menu()
        self._build_status()
        self._connect()
        self._update_actions()
        window.before_shutdown.append(self.shutdown)

    def _build_menu(self) -> None:
        w = self.window
        self.connect_action = QAction("Connect to &server…", w)
        self.connect_action.setShortcut(QKeySequence("Ctrl+Shift+K"))
        self.connect_action.setStatusTip("Chat with a model on an OpenAI-compatible server")
        self.connect_action.triggered.connect(self.open_connect_dialog)
        self.disconnect_action = QAction("&Disconnect from server", w)
        self.disconnect_action.setStatusTip("Chat with the local model again")
        self.disconnect_action.triggered.connect(self.disconnect_server)
        self.serve_action = QAction("Ser&ve this model over HTTP", w)
        self.serve_action.setCheckable(True)
        self.serve_action.setStatusTip(
            "An OpenAI-compatible API on 127.0.0.1 for other programs on this machine; "
            "their requests take turns with the chat"
        )
        self.serve_action.toggled.connect(self._on_serve_toggled)
        w.menus.add_file_actions([self.connect_action, self.disconnect_action, self.serve_action])

    def _build_status(self) -> None:
        self.serving_label = QLabel("", self.window)
        self.serving_label.setObjectName("servingLabel")
        self.copy_button = QToolButton(self.window)
        self.copy_button.setObjectName("copyServerUrlButton")
        self.copy_button.setText("Copy URL")
        self.copy_button.setAutoRaise(True)
        self.copy_button.clicked.connect(self.copy_url)
        for widget in (self.serving_label, self.copy_button):
            self.window.add_status_widget(widget)
            widget.hide()
        self.copy_button.setToolTip("Copy the server's base URL for an OpenAI-compatible client")

    def _connect(self) -> None:
        c, s = self.chat, self.server
        c.backend_session.events.backend_changed.connect(self._on_backend_changed)
        self.figures.disconnect_button.clicked.connect(self.disconnect_server)
        c.backend_session.events.state_changed.connect(lambda _state: self._update_actions())
        c.chat.events.stats.connect(self._on_stats)
        c.backend_session.events.model_loaded.connect(self._on_model_loaded)
        s.sig_started.connect(self._on_serving_started)
        s.sig_failed.connect(self._on_serving_failed)
        s.sig_stopped.connect(self._on_serving_stopped)
        s.sig_answered.connect(lambda _n: self._show_serving())

    # ---- connecting ---------------------------------------------------------------------------
    @Slot()
    def open_connect_dialog(self) -> ConnectDialog:
        """Show the dialog (not blocking: tests and the event loop go on); returns it."""
        if self.dialog is not None:
            self.dialog.raise_()
            return self.dialog
        runner, settings = self.window.runner, self.window.settings
        dialog = ConnectDialog(
            lambda request: runner.submit(list_models_job(request, self.listing_timeouts)),
            string_list(settings, RECENT_SERVERS_KEY),
            self.keys,
            self.window,
            saved=set(saved_keys(settings)),
        )
        dialog.accepted.connect(lambda: self.connect_server(dialog.request(), dialog.remember()))
        dialog.finished.connect(self._on_dialog_closed)
        self.dialog = dialog
        dialog.open()
        return dialog

    @Slot(int)
    def _on_dialog_closed(self, _result: int) -> None:
        if self.dialog is not None:
            self.dialog.deleteLater()
            self.dialog = None

    def connect_server(self, request: ConnectRequest, remember: bool | None = None) -> bool:
        """Chat with the server of `request` from the next answer on. `remember`: keep its key
        in the settings file (True), forget a kept one (False), leave them as they are (None)."""
        if self._is_own_server(request.url):
            self.window.show_message(
                "That is this window's own server (Serve this model): the chat would wait for "
                "itself. Connect other programs to it, or chatapp on another machine.",
                "error",
            )
            return False
        request = ConnectRequest(
            request.url, request.api_key, request.model, self.timeouts, self.listing_timeouts
        )
        if not self.chat.backend_session.connect_remote(request):
            self.window.show_message("Wait for the answer to finish, then connect.", "info")
            return False
        if request.api_key:
            self.keys[key_of(request.url)] = request.api_key
        if remember is not None:  # the key was checked: Connect needs the server's model list
            save_key(self.window.settings, request.url, request.api_key if remember else None)
        remember_recent(self.window.settings, RECENT_SERVERS_KEY, request.url)
        self.window.notify(f"Connecting to {request.url}…")
        return True

    @Slot()
    def disconnect_server(self) -> bool:
        return self.chat.backend_session.disconnect_remote()

    def _is_own_server(self, url: str) -> bool:
        serving = self.server.serving
        if serving is None:
            return False
        try:
            parts = urlsplit(api_base(url))
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except (BackendError, ValueError):
            return False
        return parts.hostname in LOOPBACK_NAMES and port == serving.port

    @Slot(object)
    def _on_backend_changed(self, card: BackendCard | None) -> None:
        w = self.window
        self.figures.set_card(card)
        if card is not None:
            where = card.server or card.runs_on
            w.show_backend(f"{card.name} · {where}", f"{card.name} ({where}) — chatapp")
            w.notify(f"Connected: answers come from {card.description}.", 8000)
            if self.chat.chat.conversation.messages:
                # Not "0 / N" over a chat the server has not counted yet: its next answer says.
                self.chat_feature.side_panel.set_figure("context", text=fmt.MISSING)
            if card.notice:
                w.show_message(card.notice, "warning")
            else:
                w.dismiss_message()
        else:
            w.dismiss_message(warnings_too=True)  # what it says was about the server: gone with it
            model = self.chat.backend_session.model
            if model is not None:
                w.show_backend(f"{model.name} · {model.device_label}", f"{model.name} — chatapp")
                w.notify(f"Answers come from {model.name} again.", 8000)
                if self.chat.chat.conversation.messages:  # counted again for the local model
                    self.chat.chat.measure_context(self.chat_feature.options())
                else:
                    self.chat_feature.side_panel.set_context(0, model.max_context)
            else:
                w.show_backend("No model", "chatapp")
        self._update_actions()

    @Slot(object)
    def _on_stats(self, snapshot: StatsSnapshot) -> None:
        if snapshot.server_figures is not None:  # the backend's own (a chatapp server's)
            self.figures.show_server(snapshot.server_figures)

    def _update_actions(self) -> None:
        state = self.chat.backend_session.state
        idle = state in (State.READY, State.NO_MODEL)
        self.connect_action.setEnabled(idle)
        self.disconnect_action.setEnabled(idle and self.chat.backend_session.remote is not None)
        self.figures.disconnect_button.setEnabled(self.disconnect_action.isEnabled())
        self.serve_action.setEnabled(
            self.chat.backend_session.model is not None or self.server.active
        )

    # ---- serving ------------------------------------------------------------------------------
    @Slot(bool)
    def _on_serve_toggled(self, checked: bool) -> None:
        if checked and not self.server.active:
            self._ask_port()
        elif not checked:
            if self.serve_dialog is not None:
                self.serve_dialog.reject()
            self.server.stop()

    def _ask_port(self) -> None:
        """The port first (the last one used, else 8000), in a dialog that does not block."""
        if self.serve_dialog is not None:
            self.serve_dialog.raise_()
            return
        settings, model = self.window.settings, self.chat.backend_session.model
        port = remembered_port(settings, self.server.port)
        kv = model.kv_bytes_per_token * model.max_context if model is not None else 0
        dialog = ServeDialog(self.window, port, HOST, remembered_slots(settings), kv)
        dialog.accepted.connect(lambda: self._serve_on(dialog.port(), dialog.slots()))
        dialog.rejected.connect(lambda: self._set_serve_checked(False))
        dialog.finished.connect(self._on_serve_dialog_finished)
        self.serve_dialog = dialog
        dialog.open()

    @Slot()
    def _on_serve_dialog_finished(self) -> None:
        if self.serve_dialog is not None:
            self.serve_dialog.deleteLater()
            self.serve_dialog = None

    def _serve_on(self, port: int, slots: int = 1) -> None:
        remember_port(self.window.settings, port)
        remember_slots(self.window.settings, slots)
        self.server.port = port
        if not self.server.start(self.chat_feature.loop_mode(), port, slots):
            self._set_serve_checked(False)
        else:
            self.window.notify("Starting the server…")

    @Slot(object)
    def _on_serving_started(self, serving: Serving) -> None:
        banner = self.window.shown_message()
        if banner is not None and banner[0] == self._serving_failure:
            self.window.dismiss_message()  # e.g. a port in use: serving runs elsewhere now
        self._serving_failure = None
        self._show_serving()
        how = (
            f"up to {serving.slots} of their requests decode together, beside the chat"
            if serving.slots > 1
            else "their requests take turns with the chat"
        )
        self.window.notify(
            f"Serving {serving.model} at {serving.url} for programs on this machine; {how}.",
            10000,
        )

    def _show_serving(self) -> None:
        serving = self.server.serving
        if serving is None:
            return
        self.serving_box.refresh()
        count = self.server.answered
        self.serving_label.setText(
            f"Serving at {serving.url} · {count} request{'s' if count != 1 else ''}"
        )
        self.serving_label.setToolTip(
            f"{serving.model}: OpenAI-compatible API (chat/completions, completions, models)"
        )
        self.serving_label.show()
        self.copy_button.show()

    @Slot(str)
    def _on_serving_failed(self, message: str) -> None:
        self._set_serve_checked(False)
        self._serving_failure = message
        self.window.show_message(message, "error")

    @Slot()
    def _on_serving_stopped(self) -> None:
        self._set_serve_checked(False)
        self.serving_label.hide()
        self.copy_button.hide()
        self.serving_box.refresh()
        self.window.notify("Stopped serving.", 5000)

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        """The engine was replaced: serve the new one at the same address."""
        serving = self.server.serving
        if serving is not None:
            self.server.stop()
            self._set_serve_checked(True)
            self.server.start(self.chat_feature.loop_mode(), serving.port, serving.slots)
        self._update_actions()

    def _set_serve_checked(self, checked: bool) -> None:
        self.serve_action.blockSignals(True)
        self.serve_action.setChecked(checked)
        self.serve_action.blockSignals(False)

    @Slot()
    def copy_url(self) -> None:
        serving = self.server.serving
        clipboard = QGuiApplication.clipboard()
        if serving is not None and clipboard is not None:
            clipboard.setText(serving.url)
            self.window.notify(f"Copied {serving.url}", 3000)

    def shutdown(self) -> None:
        """Stop serving before the worker thread ends (the window's before_shutdown)."""
        self.server.stop(wait=True)


def install_remote(window: MainWindow) -> ServerUi:
    ui = ServerUi(window)
    window.add_feature(ui)  # window.feature(ServerUi) finds it
    return ui
