"""The emit() work-around keeps `True`'s reference count balanced (PySide6 6.12 drops one
reference per SignalInstance.emit on Python < 3.12; enough emits abort the interpreter)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal

from chatapp.gui.common.qtcompat import emit


class _Sender(QObject):
    sig_value = Signal(object)


def test_emit_keeps_reference_counts_balanced() -> None:
    sender = _Sender()
    received: list[object] = []
    sender.sig_value.connect(received.append)
    before = sys.getrefcount(True)
    for i in range(5000):
        emit(sender.sig_value, i)
    assert len(received) == 5000
    assert abs(sys.getrefcount(True) - before) < 50
