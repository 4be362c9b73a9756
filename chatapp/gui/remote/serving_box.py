"""The side panel's "Serving over HTTP" box while File > Serve this model runs: the address,
how many of its slots are answering a request now (busy / total, read twice a second from the
slots, engine/slots.py), and how many requests it has answered. Hidden while not serving."""

from __future__ import annotations

from PySide6.QtCore import QTimer, Slot
from PySide6.QtWidgets import QGroupBox, QLabel, QVBoxLayout, QWidget

from chatapp.gui.remote.serving import WindowServer

REFRESH_MS = 500


class ServingBox(QGroupBox):
    def __init__(self, server: WindowServer, parent: QWidget | None = None) -> None:
        super().__init__("Serving over HTTP", parent)
        self.setObjectName("servingBox")
        self.server = server
        layout = QVBoxLayout(self)
        self.address_label = QLabel("", self)
        self.address_label.setObjectName("servingAddressLabel")
        self.address_label.setWordWrap(True)
        self.slots_label = QLabel("", self)
        self.slots_label.setObjectName("servingSlotsLabel")
        self.slots_label.setWordWrap(True)
        layout.addWidget(self.address_label)
        layout.addWidget(self.slots_label)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self.hide()

    @Slot()
    def refresh(self) -> None:
        """Show what the server does now; hidden (and no longer polling) when it stopped."""
        serving = self.server.serving
        if serving is None:
            self._timer.stop()
            self.hide()
            return
        busy, total = self.server.busy_slots()
        count = self.server.answered
        self.address_label.setText(serving.url)
        self.address_label.setToolTip(f"{serving.model}: OpenAI-compatible API")
        together = "decoded together" if total > 1 else "one at a time"
        self.slots_label.setText(
            f"Slots busy: {busy} of {total} ({together}) · "
            f"{count} request{'s' if count != 1 else ''} answered"
        )
        self.slots_label.setToolTip(
            "Requests being answered now, of those the server answers at once "
            "(File > Serve this model over HTTP: Requests at once)"
        )
        self.show()
        if not self._timer.isActive():
            self._timer.start()
