"""The wheel over an unfocused spin box scrolls the panel, not the setting."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QDoubleSpinBox, QScrollArea, QVBoxLayout, QWidget

from chatapp.gui.common.wheel import ignore_wheel_unless_focused


def _wheel(widget: QWidget, steps: int = 1) -> None:
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(centre.toPoint())),
        QPoint(0, 0),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def test_wheel_changes_a_spin_box_only_once_focused(qtbot) -> None:
    scroll = QScrollArea()
    inner = QWidget()
    layout = QVBoxLayout(inner)
    spin = QDoubleSpinBox(inner)
    spin.setRange(1.0, 2.0)
    spin.setSingleStep(0.05)
    spin.setValue(1.1)
    layout.addWidget(spin)
    inner.setMinimumHeight(2000)  # something to scroll
    scroll.setWidget(inner)
    qtbot.addWidget(scroll)
    ignore_wheel_unless_focused(spin)
    scroll.resize(200, 200)
    scroll.show()
    qtbot.waitExposed(scroll)
    assert spin.focusPolicy() == Qt.FocusPolicy.StrongFocus
    _wheel(spin, -1)
    assert spin.value() == 1.1  # unchanged: the wheel passed to the scroll area
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    _wheel(spin, 1)
    assert spin.value() > 1.1


def test_the_sampling_spins_are_guarded(qtbot) -> None:
    from chatapp.gui.chat.sampling_box import SamplingBox

    box = SamplingBox()
    qtbot.addWidget(box)
    box.show()
    before = box.repetition_spin.value()
    _wheel(box.repetition_spin, -3)
    assert box.repetition_spin.value() == before
