"""A whole message, however long, in a window of its own ("Show all" on an elided message).

A QPlainTextEdit lays out only the lines on screen, so 4 Mi characters in 50 000 lines open in
a fraction of a second; one line of a million characters would still be laid out whole (its
cost grows with the square of its length), so lines longer than `DISPLAY_LINE_CHARS` are shown
in pieces. Copy always copies the message exactly as it is.
"""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontDatabase, QGuiApplication, QTextOption
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

DISPLAY_LINE_CHARS = 4_000


def display_text(text: str) -> tuple[str, bool]:
    """`text` with over-long lines split for display; True if any was split."""
    if len(text) <= DISPLAY_LINE_CHARS or all(
        len(line) <= DISPLAY_LINE_CHARS for line in text.split("\n")
    ):
        return text, False
    pieces = []
    for line in text.split("\n"):
        while len(line) > DISPLAY_LINE_CHARS:
            pieces.append(line[:DISPLAY_LINE_CHARS])
            line = line[DISPLAY_LINE_CHARS:]
        pieces.append(line)
    return "\n".join(pieces), True


class MessageViewer(QDialog):
    def __init__(self, title: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageViewer")
        self.setWindowTitle(title)
        self.text = text
        shown, split = display_text(text)
        self.edit = QPlainTextEdit(self)
        self.edit.setObjectName("messageViewerText")
        self.edit.setReadOnly(True)
        self.edit.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.edit.document().setUndoRedoEnabled(False)
        fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.edit.setFont(QFont(fixed))
        self.edit.setPlainText(shown)
        note = f"{len(text):,} characters".replace(",", " ")
        if split:
            note += (
                f"; lines longer than {DISPLAY_LINE_CHARS:,} characters are shown in pieces, "
                "Copy copies the message exactly"
            ).replace(",", " ")
        self.note = QLabel(note + ".", self)
        self.note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.copy_button = QPushButton("Copy", self)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self.copy)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.note)
        layout.addWidget(buttons)
        self.resize(760, 560)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text)
