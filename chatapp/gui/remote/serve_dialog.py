"""Serve this model's question before it starts: which port (8000 unless the user chose another,
remembered for next time; 0 takes any free one), with the address clients will use, and how
many requests decode together (`chatapp serve --parallel N`: 1 to 8, 4 unless chosen, remembered
too), with the KV budget they share."""

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

from chatapp.gui.common.settings import read_int
from chatapp.gui.common.theme import muted
from chatapp.gui.remote.serving import DEFAULT_PORT
from chatapp.units import fmt_bytes

PORT_KEY = "serving/port"
SLOTS_KEY = "serving/slots"
MAX_SLOTS = 8
DEFAULT_SLOTS = 4


def remembered_port(settings: QSettings, default: int = DEFAULT_PORT) -> int:
    """The port the user last served on, or `default`."""
    return read_int(settings, PORT_KEY, default, 0, 65535)


def remember_port(settings: QSettings, port: int) -> None:
    settings.setValue(PORT_KEY, port)


def remembered_slots(settings: QSettings) -> int:
    """How many requests the user last chose to decode together (4 unless chosen, as
    `chatapp serve`; a model that cannot batch serves one at a time)."""
    return read_int(settings, SLOTS_KEY, DEFAULT_SLOTS, 1, MAX_SLOTS)


def remember_slots(settings: QSettings, slots: int) -> None:
    settings.setValue(SLOTS_KEY, slots)


class ServeDialog(QDialog):
    """Port and address; "Start serving" accepts, Cancel or Esc leaves serving off."""

    def __init__(
        self,
        parent: QWidget | None,
        port: int,
        host: str,
        slots: int = 1,
        kv_bytes_per_slot: int = 0,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("serveDialog")
        self.setWindowTitle("Serve this model")
        self.host = host
        self.kv_bytes_per_slot = kv_bytes_per_slot  # one whole context's KV cache: the budget
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Programs on this machine can use the loaded model through an OpenAI-compatible "
            "API. One request at once takes turns with the chat; more decode together, "
            "beside it.",
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
        self.slots_spin = QSpinBox(self)
        self.slots_spin.setObjectName("serveSlotsSpin")
        self.slots_spin.setRange(1, MAX_SLOTS)
        self.slots_spin.setValue(slots)
        self.slots_spin.setToolTip(
            "Requests decoded together, each in a slot (chatapp serve --parallel N), all "
            "within one context's worth of KV cache. Above 1 they run on the IO-Binding loop, "
            "on the CPU, with chatapp's own conversion (other models serve one at a time); the "
            "others wait for a free slot."
        )
        form.addRow("Requests at once", self.slots_spin)
        layout.addLayout(form)
        self.memory_label = QLabel("", self)
        self.memory_label.setObjectName("serveMemoryLabel")
        self.memory_label.setWordWrap(True)
        muted(self.memory_label)
        layout.addWidget(self.memory_label)
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
        self.slots_spin.valueChanged.connect(self._on_slots_changed)
        self._on_slots_changed(slots)
        self.setMinimumWidth(420)  # wrapped notes read in a few lines, not a narrow column
        self.setMaximumWidth(480)

    def port(self) -> int:
        return self.port_spin.value()

    def slots(self) -> int:
        return self.slots_spin.value()

    @Slot(int)
    def _on_slots_changed(self, slots: int) -> None:
        """What the slots' KV caches take; whether that fits is checked as serving starts."""
        if slots == 1 or not self.kv_bytes_per_slot:
            self.memory_label.setText("")
            self.memory_label.setVisible(False)
            self.adjustSize()
            return
        self.memory_label.setText(
            f"{slots} slots share one context's KV cache, at most "
            f"{fmt_bytes(self.kv_bytes_per_slot)} besides the chat's: each request reserves its "
            "prompt and a piece of its answer, and more as it goes; when they are full, the "
            "latest request pauses until the others leave room."
        )
        self.memory_label.setVisible(True)
        self.adjustSize()  # the note's lines fit

    @Slot(int)
    def _on_port_changed(self, port: int) -> None:
        where = f"http://{self.host}:{port}/v1" if port else f"http://{self.host}:<free port>/v1"
        self.address_label.setText(f"Clients use {where} (shown in the status bar once it runs).")
