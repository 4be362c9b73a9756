"""Serve this model's question before it starts: which port (8000 unless the user chose another,
remembered for next time; 0 takes any free one), with the address clients will use."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.common.theme import muted
from chatapp.gui.remote.serving import DEFAULT_PORT

PORT_KEY = "serving/port"


def remembered_port(settings: QSettings, default: int = DEFAULT_PORT) -> int:
    """The port the user last served on, or `default`."""
    try:
        port = int(settings.value(PORT_KEY, default))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
    return port if 0 <= port <= 65535 else default


def remember_port(settings: QSettings, port: int) -> None:
    settings.setValue(PORT_KEY, port)


class ServeDialog(QDialog):
    """Port and address; "Start serving" accepts, Cancel or Esc leaves serving off."""

    def __init__(self, parent: QWidget | None, port: int, host: str) -> None:
        super().__init__(parent)
        self.setObjectName("serveDialog")
        self.setWindowTitle("Serve this model")
        self.host = host
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Programs on this machine can use the loaded model through an OpenAI-compatible "
            "API; their requests take turns with the chat.",
            self,
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.port_spin = QSpinBox(self)
        self.port_spin.setObjectName("servePortSpin")
        self.port_spin.setRange(0, 65535)
        self.port_spin.setSpecialValueText("any free port")
        self.port_spin.setValue(port)
        self.port_spin.setToolTip(
            "The TCP port the server listens on (8000 by default; 0: any free port). If "
            "another program uses it, you are told and can choose another."
        )
        form.addRow("Port", self.port_spin)
        layout.addLayout(form)
        self.address_label = QLabel("", self)
        self.address_label.setObjectName("serveAddressLabel")
        self.address_label.setWordWrap(True)
        muted(self.address_label)
        layout.addWidget(self.address_label)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.start_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.start_button.setText("Start serving")
        self.start_button.setObjectName("startServingButton")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.port_spin.valueChanged.connect(self._on_port_changed)
        self._on_port_changed(port)
        self.setMaximumWidth(480)

    def port(self) -> int:
        return self.port_spin.value()

    @Slot(int)
    def _on_port_changed(self, port: int) -> None:
        where = f"http://{self.host}:{port}/v1" if port else f"http://{self.host}:<free port>/v1"
        self.address_label.setText(f"Clients use {where} (shown in the status bar once it runs).")
