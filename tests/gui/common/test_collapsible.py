"""A section folds to its header and says, in one line, what it holds while folded."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from chatapp.gui.common.collapsible import Section


def test_a_section_folds_and_unfolds_with_its_header_and_summarises_when_folded(qtbot) -> None:
    body = QLabel("the settings")
    section = Section("Sampling", body, "sampling")
    qtbot.addWidget(section)
    section.show()
    section.set_summary("Precise · up to 256 tokens · Chat")
    assert section.is_open() and body.isVisible() and not section.summary.isVisible()
    assert section.header.arrowType() == Qt.ArrowType.DownArrow
    with qtbot.waitSignal(section.sig_toggled) as blocker:
        qtbot.mouseClick(section.header, Qt.MouseButton.LeftButton)
    assert blocker.args == [False]
    assert not section.is_open() and not body.isVisible() and section.summary.isVisible()
    assert section.header.arrowType() == Qt.ArrowType.RightArrow
    assert section.summary.toolTip() == "Precise · up to 256 tokens · Chat"
    assert "folded" in section.header.accessibleName()
    # Set from the program (a remembered state): no announcement.
    with qtbot.assertNotEmitted(section.sig_toggled):
        section.set_open(True)
    assert body.isVisible()


def test_a_long_summary_is_cut_with_an_ellipsis_and_never_widens_the_section(qtbot) -> None:
    section = Section("System prompt", QLabel("box"), "system")
    qtbot.addWidget(section)
    section.set_open(False)
    section.resize(200, 40)
    section.show()
    before = section.minimumSizeHint().width()
    section.set_summary("You are a helpful assistant. " * 20)
    assert section.minimumSizeHint().width() == before
    qtbot.waitUntil(lambda: section.summary.text().endswith("…"))
    assert section.summary.full_text().startswith("You are a helpful assistant.")
