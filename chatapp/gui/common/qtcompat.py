"""Work-arounds for the Qt binding in use.

PySide6 6.12.0 returns `True` from `SignalInstance.emit()` without taking a reference to it.
Every emit from Python therefore drops one reference to `True`; on Python < 3.12 (where `True`
is not immortal) a streaming app reaches zero after a few thousand emits and the interpreter
aborts with "Fatal Python error: bool_dealloc". Signals that Qt emits from C++ are not
affected. Every emit in chatapp.gui goes through `emit()` below, which gives the reference
back when (and only when) a probe at import shows that this binding drops it.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from PySide6.QtCore import QObject, Signal, SignalInstance

_incref = ctypes.pythonapi.Py_IncRef
_incref.argtypes = [ctypes.py_object]
_incref.restype = None


class _Probe(QObject):
    sig_probe = Signal()


def _emit_drops_a_reference(trials: int = 64) -> bool:
    if sys.version_info >= (3, 12):
        return False  # True is immortal there: the missing reference is harmless
    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(trials):
        probe.sig_probe.emit()
    return before - sys.getrefcount(True) >= trials // 2


EMIT_DROPS_A_REFERENCE = _emit_drops_a_reference()


def emit(signal: SignalInstance, *args: Any) -> None:
    """`signal.emit(*args)`, safe on every PySide6 version."""
    # The stubs say emit() returns None; 6.12.0 returns True (without a reference to it).
    result: object = signal.emit(*args)  # type: ignore[func-returns-value]
    if EMIT_DROPS_A_REFERENCE and result is not None:
        _incref(result)
