"""Serve this model asks for the port: 8000 unless the user chose another, remembered; a port in
use is said in one sentence, not replaced by another address. And how many requests decode
together (1 to 8, remembered), with the KV cache they take."""

from __future__ import annotations

import socket

from PySide6.QtCore import QSettings

from chatapp.gui.main_window import MainWindow
from chatapp.gui.remote.serve_dialog import (
    DEFAULT_SLOTS,
    MAX_SLOTS,
    PORT_KEY,
    SLOTS_KEY,
    ServeDialog,
    remember_port,
    remember_slots,
    remembered_port,
    remembered_slots,
)
from chatapp.gui.remote.serving import HOST
from tests.gui.conftest import LOAD_TIMEOUT_MS
from tests.gui.remote.conftest import accept_port, remote_ui


def test_the_port_is_8000_until_the_user_chooses_another(qtbot, tmp_path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert remembered_port(settings) == 8000
    remember_port(settings, 8123)
    assert remembered_port(settings) == 8123
    settings.setValue(PORT_KEY, "not a port")
    assert remembered_port(settings) == 8000
    dialog = ServeDialog(None, 8123, HOST)
    qtbot.addWidget(dialog)
    assert dialog.port() == 8123
    assert "http://127.0.0.1:8123/v1" in dialog.address_label.text()
    dialog.port_spin.setValue(0)
    assert (
        dialog.port_spin.text() == "any free port" and "<free port>" in dialog.address_label.text()
    )


def test_a_port_in_use_is_said_plainly_and_the_choice_remembered(qtbot, window: MainWindow) -> None:
    ui = remote_ui(window)
    taken = socket.socket()
    taken.bind((HOST, 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        ui.serve_action.trigger()
        dialog = ui.serve_dialog
        assert dialog is not None and dialog.port() == 0  # the fixture's: any free port
        dialog.port_spin.setValue(port)
        with qtbot.waitSignal(ui.server.sig_failed, timeout=LOAD_TIMEOUT_MS) as failed:
            dialog.start_button.click()
        message = failed.args[0]
        assert message.startswith(f"Port {port} is in use by another program")
        assert "choose another port" in message and "Traceback" not in message
        assert not ui.serve_action.isChecked() and ui.server.serving is None
        assert remembered_port(window.settings) == port  # offered again next time
        assert window.banner.isVisible() and window.banner.text() == message
    finally:
        taken.close()
    # Cancel leaves serving off.
    ui.serve_action.trigger()
    assert ui.serve_dialog is not None and ui.serve_dialog.port() == port
    ui.serve_dialog.reject()
    assert not ui.serve_action.isChecked() and not ui.server.active
    # And a free port serves.
    remember_port(window.settings, 0)
    with qtbot.waitSignal(ui.server.sig_started, timeout=LOAD_TIMEOUT_MS):
        ui.serve_action.trigger()
        accept_port(ui)
    assert ui.serve_action.isChecked()
    assert not window.banner.isVisible()  # the port in use is not the story any more
    ui.serve_action.trigger()  # off


def test_requests_at_once_are_remembered_and_their_memory_shown(qtbot, tmp_path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert remembered_slots(settings) == DEFAULT_SLOTS == 4  # as chatapp serve
    remember_slots(settings, 2)
    assert remembered_slots(settings) == 2
    for wrong in ("many", 0, MAX_SLOTS + 1):
        settings.setValue(SLOTS_KEY, wrong)
        assert remembered_slots(settings) == DEFAULT_SLOTS
    dialog = ServeDialog(None, 8000, HOST, 1, kv_bytes_per_slot=50_000_000)
    qtbot.addWidget(dialog)
    assert dialog.slots() == 1 and dialog.memory_label.isHidden()  # the chat's own KV only
    dialog.slots_spin.setValue(3)
    assert dialog.slots() == 3 and not dialog.memory_label.isHidden()
    # The slots share one context's KV cache: the budget, whatever their number.
    assert dialog.memory_label.text().startswith("3 slots share one context's KV cache")
    assert "at most 50.0 MB besides the chat's" in dialog.memory_label.text()
    dialog.slots_spin.setValue(6)
    assert "at most 50.0 MB" in dialog.memory_label.text()
    assert dialog.slots_spin.maximum() == MAX_SLOTS == 8
