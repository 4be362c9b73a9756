"""A window with the tiny model, and `chatapp serve` (another tiny model) in this process on
127.0.0.1 for it to connect to; helpers that drive File > Connect to server… as a user would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.backend import BackendCard
from chatapp.engine.engine import Engine
from chatapp.gui.main_window import MainWindow
from chatapp.gui.remote.dialog import ConnectDialog
from chatapp.gui.remote.ui import ServerUi
from tests.gui.conftest import WindowFactory
from tests.serving import Served, serving

CONNECT_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def served(varied_model_dir: Path) -> Iterator[Served]:
    """The server the window chats with (the varied model: not the window's own)."""
    with serving(Engine(varied_model_dir, threads=1)) as s:
        yield s


@pytest.fixture
def window(make_window: WindowFactory, tiny_model_dir: Path) -> MainWindow:
    win = make_window(["--model", str(tiny_model_dir)])
    remote_ui(win).server.port = 0  # never the usual 8000 in tests: any free port
    return win


def remote_ui(window: MainWindow) -> ServerUi:
    ui = window.feature(ServerUi)
    assert ui is not None
    return ui


def accept_port(ui: ServerUi) -> None:
    """Serve this model asks for the port first: keep the one offered (0 in these tests)."""
    dialog = ui.serve_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.start_button.click()


def fetch(qtbot, dialog: ConnectDialog, url: str, key: str = "") -> None:
    """Type the address (and key), press Fetch models, wait for the answer."""
    dialog.address.setCurrentText(url)
    dialog.key_edit.setText(key)
    dialog.fetch_button.click()
    qtbot.waitUntil(lambda: dialog.fetch_button.isEnabled(), timeout=CONNECT_TIMEOUT_MS)


def connect(qtbot, window: MainWindow, url: str, key: str = "") -> BackendCard:
    """File > Connect to server…, fetch the models, Connect; returns what is connected."""
    dialog = remote_ui(window).open_connect_dialog()
    fetch(qtbot, dialog, url, key)
    assert dialog.connect_button.isEnabled(), dialog.status.text()
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.backend_changed, timeout=CONNECT_TIMEOUT_MS
    ) as changed:
        dialog.connect_button.click()
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state.value == "ready",
        timeout=CONNECT_TIMEOUT_MS,
    )
    card = changed.args[0]
    assert isinstance(card, BackendCard)
    return card
