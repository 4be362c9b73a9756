"""The transcript's colours, taken from the widget's palette so that a light, a dark or a
high-contrast theme (the desktop's, or View > Theme) stays readable.

Roles the palette names come from it directly (text, links, the placeholder text's muted
grey); the few hues it has no role for (the assistant's name, strings in code, a warning) are
picked per palette: a fixed hue at a lightness that contrasts with the palette's base colour.
`tests/gui/chat/test_colors.py` checks every colour's contrast on both light and dark palettes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtGui import QColor, QPalette

from chatapp.gui.common.theme import contrast


@dataclass(frozen=True)
class TranscriptColors:
    text: QColor
    base: QColor
    muted: QColor  # figures, token counts, action links
    not_sent: QColor  # messages the context no longer holds
    user: QColor  # "You"
    assistant: QColor  # "Assistant"
    warning: QColor  # "not saved", the context cut
    code_background: QColor
    link: QColor
    # Pygments token kinds (the first part of a token type: Keyword, Name.Function, ...).
    syntax: dict[str, QColor] = field(default_factory=dict)

    @property
    def dark(self) -> bool:
        return self.base.lightnessF() < 0.5


def mix(a: QColor, b: QColor, amount: float) -> QColor:
    """`a` moved `amount` (0..1) of the way to `b`."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * amount,
        a.greenF() + (b.greenF() - a.greenF()) * amount,
        a.blueF() + (b.blueF() - a.blueF()) * amount,
    )


def tone(hue: int, base: QColor, saturation: float = 0.65) -> QColor:
    """A colour of `hue` (degrees) light on a dark base, dark on a light one."""
    dark_base = base.lightnessF() < 0.5
    return QColor.fromHslF(hue / 360, saturation, 0.72 if dark_base else 0.32)


def readable(color: QColor, background: QColor, minimum: float = 4.5) -> QColor:
    """`color`, moved towards the text colour of its background until it reads on it."""
    target = QColor("white") if background.lightnessF() < 0.5 else QColor("black")
    for step in range(11):
        candidate = mix(color, target, step / 10)
        if contrast(candidate, background) >= minimum:
            return candidate
    return target


def colors_for(palette: QPalette) -> TranscriptColors:
    base = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Text)
    code_background = mix(base, text, 0.07)
    muted = readable(mix(text, base, 0.45), base, 3.0)
    link = readable(palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Link), base)

    def syntax_color(color: QColor) -> QColor:
        return readable(color, code_background)

    syntax = {
        "Keyword": syntax_color(link),
        "Name.Builtin": syntax_color(tone(185, base)),
        "Name.Function": syntax_color(tone(265, base)),
        "Name.Class": syntax_color(tone(265, base)),
        "Name.Decorator": syntax_color(tone(300, base)),
        "Literal.String": syntax_color(tone(120, base)),
        "Literal.Number": syntax_color(tone(25, base)),
        "Comment": readable(mix(text, base, 0.45), code_background, 3.0),
        "Operator.Word": syntax_color(link),
        "Generic.Deleted": syntax_color(tone(0, base)),
        "Generic.Inserted": syntax_color(tone(120, base)),
        "Generic.Heading": syntax_color(link),
    }
    return TranscriptColors(
        text=text,
        base=base,
        muted=muted,
        not_sent=readable(mix(text, base, 0.6), base, 2.2),
        user=readable(link, base),
        assistant=readable(tone(130, base), base),
        warning=readable(tone(32, base, 0.9), base),
        code_background=code_background,
        link=link,
        syntax=syntax,
    )
