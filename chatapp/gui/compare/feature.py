"""The comparison as a feature of the window: its tab (View > Compare loops), when it may run,
and the chat held while it runs. It plugs in through what MainWindow declares (`add_view`,
`busy_checks`, `before_shutdown`, `refresh_controls`, `add_feature`) and reads the chat only
through its controller's signals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Slot
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QSizePolicy

from chatapp.engine.backend import BackendCard
from chatapp.gui.chat.controller import State
from chatapp.gui.chat.feature import chat_of
from chatapp.gui.compare.view import CompareView
from chatapp.store.compare_results import default_results_path

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow

# Shown in the comparison's status line while what answers runs a loop of its own (a
# server's card says where it runs).
COMPARE_UNAVAILABLE = (
    "The comparison is not available while {}: it runs both loops of a model on this "
    "machine, and that backend shows neither. Disconnect (File menu) to compare."
)


def compare_unavailable(card: BackendCard) -> str:
    return COMPARE_UNAVAILABLE.format(f"answers come from {card.runs_on}")


class CompareFeature(QObject):
    """Owns the CompareView; `window.feature(CompareFeature)` finds it."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.chat = chat_of(window).controller
        # The last results come back after a restart (the data folder keeps them).
        self.view = CompareView(window.runner, window.host, window, default_results_path())
        self.view.system_prompt = chat_of(window).system_prompt
        # Its controls must not widen the chat page (a small screen keeps both side panes):
        # the comparison gets the whole window when shown.
        self.view.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.tab, self.action = window.add_view(
            self.view, "Compare loops", "C&ompare loops", QKeySequence("Ctrl+2"), whole_width=True
        )
        self._local_status = self.view.status.text()
        window.busy_checks.append(lambda: self.view.running)
        window.before_shutdown.append(self.view.stop)  # a running comparison ends after its step
        self.view.sig_running.connect(lambda _running: window.refresh_controls())
        self.chat.backend_session.events.state_changed.connect(self._update)
        self.chat.backend_session.events.backend_changed.connect(self._on_backend_changed)
        self._update()

    def show(self) -> None:
        self.action.trigger()

    @Slot()
    def _update(self, _state: object = None) -> None:
        # The comparison runs both loops of a model: only where the loop is chosen here.
        chooses = self.chat.backend_session.capabilities.chooses_loop
        self.view.set_available(self.chat.backend_session.state is State.READY and chooses)

    @Slot(object)
    def _on_backend_changed(self, card: BackendCard | None) -> None:
        chooses = card is None or card.capabilities.chooses_loop
        status = self._local_status if card is None or chooses else compare_unavailable(card)
        self.view.status.setText(status)
        self._update()


def install_compare(window: MainWindow) -> CompareFeature:
    feature = CompareFeature(window)
    window.add_feature(feature)
    return feature
