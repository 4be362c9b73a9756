"""View > Plain vs speculative as a feature of the window: its tab, when it may run (a local
model loaded and idle), and the chat held while it runs; as the comparison plugs in
(gui/compare/feature.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Slot
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QSizePolicy

from chatapp.gui.chat.controller import State
from chatapp.gui.chat.feature import chat_of
from chatapp.gui.compare.speculative_view import SpeculativeView

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow


class SpeculativeFeature(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.chat = chat_of(window).controller
        self.view = SpeculativeView(window.runner, window.host, window)
        self.view.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.tab, self.action = window.add_view(
            self.view,
            "Plain vs speculative",
            "&Plain vs speculative",
            QKeySequence("Ctrl+3"),
            whole_width=True,
        )
        window.busy_checks.append(lambda: self.view.running)
        window.before_shutdown.append(self.view.stop)
        self.view.sig_running.connect(lambda _running: window.refresh_controls())
        self.chat.backend_session.events.state_changed.connect(self._update)
        self.chat.backend_session.events.backend_changed.connect(self._update)
        self._update()

    @Slot()
    def _update(self, _state: object = None) -> None:
        # Both answers run on this machine's model, with its loop chosen here.
        model, chooses = (
            self.chat.backend_session.model,
            self.chat.backend_session.capabilities.chooses_loop,
        )
        self.view.set_available(
            self.chat.backend_session.state is State.READY and chooses,
            model.speculation_refusal if model is not None and chooses else None,
        )


def install_speculative(window: MainWindow) -> SpeculativeFeature:
    feature = SpeculativeFeature(window)
    window.add_feature(feature)
    return feature
