"""Without the user asking the hub, the app opens no network connection: the window starts,
loads a model, answers a chat and shows File > Models and the Get models dialog (before a
search) with every internet socket's connect failing and counted."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from chatapp.gui.models.hub_dialog import GetModelsDialog
from chatapp.gui.models.library import ModelsDialog
from tests.gui.conftest import WindowFactory, greedy, send_and_wait, set_sampling

INTERNET = (socket.AF_INET, socket.AF_INET6)


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every name looked up and every internet socket connected, each refused as offline."""
    attempts: list[Any] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in INTERNET:
            attempts.append(address)
            raise OSError("offline (test)")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in INTERNET:
            attempts.append(address)
            return 101  # ENETUNREACH
        return real_connect_ex(self, address)

    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (None, "localhost", "127.0.0.1", "::1"):  # a name looked up: the network
            attempts.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "offline (test)")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)  # the real hub, were anything to ask it
    return attempts


def test_start_chat_and_the_models_dialogs_open_no_connection(
    qtbot,
    make_window: WindowFactory,
    tiny_model_dir: Path,
    connects: list[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "hello")
    window.menus.models_action.trigger()
    models = window.findChild(ModelsDialog)
    assert isinstance(models, ModelsDialog)
    models.close()
    window.menus.get_models_action.trigger()
    dialog = window.findChild(GetModelsDialog)
    assert isinstance(dialog, GetModelsDialog)
    dialog.close()
    assert connects == []
    # The check itself sees a connection: asking the hub is one (refused: one line).
    dialog = GetModelsDialog(tmp_path / "data" / "models")
    dialog.search_edit.setText("SmolLM2")
    dialog.start_search()
    qtbot.waitUntil(lambda: "could not reach" in dialog.message_label.text(), timeout=10_000)
    assert connects
    dialog.deleteLater()
