"""Transcript colours come from the palette and read on light and dark bases alike."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QPalette

from chatapp.gui.chat.colors import colors_for, contrast


def palette(base: str, text: str, link: str) -> QPalette:
    p = QPalette()
    p.setColor(QPalette.ColorRole.Base, QColor(base))
    p.setColor(QPalette.ColorRole.Text, QColor(text))
    p.setColor(QPalette.ColorRole.Link, QColor(link))
    return p


@pytest.mark.parametrize(
    ("base", "text", "link"),
    [
        ("#ffffff", "#000000", "#0000ff"),
        ("#1e1e1e", "#e0e0e0", "#2a5db0"),
        ("#000", "#fff", "#00f"),
    ],
)
def test_every_colour_reads_on_its_background(base: str, text: str, link: str) -> None:
    c = colors_for(palette(base, text, link))
    assert c.dark == (QColor(base).lightnessF() < 0.5)
    for colour in (c.user, c.assistant, c.warning, c.link):
        assert contrast(colour, c.base) >= 4.5
    assert contrast(c.muted, c.base) >= 3.0
    for name, colour in c.syntax.items():
        assert contrast(colour, c.code_background) >= (3.0 if name == "Comment" else 4.5), name
    assert c.code_background != c.base  # code stands out, a little


def test_the_transcript_follows_a_palette_change(qtbot) -> None:
    from chatapp.gui.chat.transcript import TranscriptView
    from chatapp.session.conversation import ChatMessage

    view = TranscriptView()
    qtbot.addWidget(view)
    view.show_messages([ChatMessage("assistant", "```python\nx = 1\n```")])
    light = view.colors
    view.setPalette(palette("#101010", "#eeeeee", "#88aaff"))
    assert view.colors.dark and not light.dark
    block = view.document().findBlock(view.document().find("x = 1").selectionStart())
    assert block.blockFormat().background().color() == view.colors.code_background
