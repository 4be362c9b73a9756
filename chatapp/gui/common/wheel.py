"""Spin boxes, combo boxes and sliders that the mouse wheel changes only once they have the
focus: scrolling a panel must not change the setting that passes under the pointer (the
repetition penalty went to "off" that way). The wheel then scrolls the panel instead."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QWidget


class _WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.Wheel
            and isinstance(watched, QWidget)
            and not watched.hasFocus()
        ):
            # Ignored and filtered: Qt offers the event to the parent (the scroll area) next.
            event.ignore()
            return True
        return False


_guard: _WheelGuard | None = None


def ignore_wheel_unless_focused(*widgets: QWidget) -> None:
    global _guard
    if _guard is None:
        _guard = _WheelGuard()
    for widget in widgets:
        # A click or Tab focuses it; the wheel alone no longer does.
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        widget.installEventFilter(_guard)
