"""Colours from the palette, and the View > Theme choice (System / Light / Dark).

No widget hard-codes a colour: each asks `colors()` for one derived from the application's
palette (a caption is the text colour mixed toward the background, a warning an amber made
readable on that background), and `on_theme` calls it back whenever the palette changes, be
it the user's choice here or the desktop's. Text gets a WCAG contrast of at least 4.5:1,
disabled text and chart lines 3:1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QSettings, Signal, Slot
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QStyleFactory, QWidget

from chatapp.gui.common.qtcompat import emit

THEMES = ("system", "light", "dark")
THEME_LABELS = {"system": "System", "light": "Light", "dark": "Dark"}
THEME_KEY = "view/theme"
TEXT_CONTRAST = 4.5  # WCAG AA for body text
GRAPHIC_CONTRAST = 3.0  # WCAG AA for large text, disabled text, lines and marks

Role = QPalette.ColorRole
Group = QPalette.ColorGroup

# Hues the derived colours start from; `readable` moves them until they contrast enough.
_AMBER, _RED, _BLUE, _GREEN = (
    QColor("#b45309"),
    QColor("#dc2626"),
    QColor("#2563eb"),
    QColor("#2e7d32"),
)
_LOOP_HUES = {
    "nocache": QColor("#7b5ea7"),
    "naive": QColor("#d1495b"),
    "iobinding": QColor("#00798c"),
}
_PART_HUES = {"run": QColor("#30638e"), "host": QColor("#edae49"), "sample": QColor("#8e8e8e")}


# ---- colour arithmetic --------------------------------------------------------------------
def luminance(color: QColor) -> float:
    """WCAG relative luminance."""

    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    return (
        0.2126 * channel(color.redF())
        + 0.7152 * channel(color.greenF())
        + 0.0722 * channel(color.blueF())
    )


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio, 1 to 21."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def mix(a: QColor, b: QColor, t: float) -> QColor:
    """`a` moved the fraction `t` of the way to `b`."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * t,
        a.greenF() + (b.greenF() - a.greenF()) * t,
        a.blueF() + (b.blueF() - a.blueF()) * t,
    )


def readable(color: QColor, *backgrounds: QColor, minimum: float = TEXT_CONTRAST) -> QColor:
    """`color`, darkened or lightened (toward black on light backgrounds, white on dark
    ones) just enough to reach `minimum` contrast against every background."""
    dark_ground = sum(luminance(b) for b in backgrounds) / len(backgrounds) < 0.18
    target = QColor("#ffffff") if dark_ground else QColor("#000000")
    for step in range(21):
        candidate = mix(color, target, step / 20)
        if all(contrast(candidate, b) >= minimum for b in backgrounds):
            return candidate
    return target


# ---- the colours widgets use ----------------------------------------------------------------
@dataclass(frozen=True)
class Banner:
    background: QColor
    border: QColor
    text: QColor


@dataclass(frozen=True)
class ThemeColors:
    dark: bool
    window: QColor
    text: QColor  # on the window
    base: QColor  # text fields, the transcript, charts
    base_text: QColor
    muted: QColor  # captions, hints, figures under answers: on window and base alike
    disabled: QColor  # disabled text on a button
    border: QColor  # outlines of controls
    accent: QColor  # the checked segment of a switch
    accent_text: QColor
    accent_disabled: QColor
    accent_disabled_text: QColor
    warning: QColor  # text: a device fallback, the context cut
    error: QColor  # text: what failed, in a dialog's status line
    user: QColor  # "You" in the transcript
    assistant: QColor  # "Assistant"
    code_background: QColor
    banners: dict[str, Banner]  # error / warning / info
    chart_grid: QColor
    chart_line: QColor  # axes
    loops: dict[str, QColor]  # one line per loop
    parts: dict[str, QColor]  # run / host / sample areas


_cache: tuple[int, ThemeColors] | None = None


def colors(palette: QPalette | None = None) -> ThemeColors:
    """Everything derived from `palette` (the application's when None; kept until it changes:
    list rows ask for it as they paint)."""
    global _cache
    if palette is not None:
        return _derive(palette)
    app_palette = QGuiApplication.palette()
    key = app_palette.cacheKey()
    if _cache is None or _cache[0] != key:
        _cache = (key, _derive(app_palette))
    return _cache[1]


def _derive(p: QPalette) -> ThemeColors:
    window, text = p.color(Group.Active, Role.Window), p.color(Group.Active, Role.WindowText)
    base, base_text = p.color(Group.Active, Role.Base), p.color(Group.Active, Role.Text)
    button = p.color(Group.Active, Role.Button)
    dark = luminance(window) < 0.18
    muted = readable(mix(text, window, 0.45), window, base)
    accent = p.color(Group.Active, Role.Highlight)
    accent_text = p.color(Group.Active, Role.HighlightedText)
    if contrast(accent, accent_text) < TEXT_CONTRAST:  # move the background, keep its text
        accent = readable(accent, accent_text)
    accent_disabled = mix(accent, window, 0.5)
    banners = {
        level: _banner(window, text, hue, dark)
        for level, hue in (("error", _RED), ("warning", _AMBER), ("info", _BLUE))
    }
    return ThemeColors(
        dark=dark,
        window=window,
        text=text,
        base=base,
        base_text=base_text,
        muted=muted,
        disabled=readable(mix(text, button, 0.55), button, minimum=GRAPHIC_CONTRAST),
        border=readable(mix(text, button, 0.6), window, button, minimum=GRAPHIC_CONTRAST),
        accent=accent,
        accent_text=accent_text,
        accent_disabled=accent_disabled,
        accent_disabled_text=readable(accent_text, accent_disabled, minimum=GRAPHIC_CONTRAST),
        warning=readable(_lift(_AMBER, dark), window, base),
        error=readable(_lift(_RED, dark), window, base),
        user=readable(_lift(_BLUE, dark), base),
        assistant=readable(_lift(_GREEN, dark), base),
        code_background=mix(base, base_text, 0.08 if dark else 0.05),
        banners=banners,
        chart_grid=mix(base, base_text, 0.16),
        chart_line=readable(mix(base, base_text, 0.5), base, minimum=GRAPHIC_CONTRAST),
        loops={
            k: readable(_lift(c, dark), base, minimum=GRAPHIC_CONTRAST)
            for k, c in _LOOP_HUES.items()
        },
        parts={
            k: readable(_lift(c, dark), base, minimum=GRAPHIC_CONTRAST)
            for k, c in _PART_HUES.items()
        },
    )


def _lift(hue: QColor, dark: bool) -> QColor:
    """On a dark ground, start from a lighter shade of the hue."""
    return mix(hue, QColor("#ffffff"), 0.35) if dark else hue


def _banner(window: QColor, text: QColor, hue: QColor, dark: bool) -> Banner:
    background = mix(window, hue, 0.22 if dark else 0.12)
    return Banner(
        background,
        mix(window, hue, 0.55),
        readable(mix(text, hue, 0.5), background),
    )


# ---- palettes -------------------------------------------------------------------------------
def light_palette() -> QPalette:
    """Fusion's light palette with a selection colour white text reads on, and disabled and
    placeholder text that can still be read."""
    style = QStyleFactory.create("Fusion")
    p = style.standardPalette()
    _set(p, Role.Highlight, "#2563eb")
    _set(p, Role.HighlightedText, "#ffffff")
    _set(p, Role.PlaceholderText, "#6b6b6b")
    _set(p, Role.Link, "#1d4ed8")
    for role in (Role.WindowText, Role.Text, Role.ButtonText):
        p.setColor(Group.Disabled, role, QColor("#858585"))
    p.setColor(Group.Disabled, Role.Highlight, QColor("#9aa7c7"))
    return p


def dark_palette() -> QPalette:
    """A Fusion dark palette."""
    p = QPalette()
    for role, value in (
        (Role.Window, "#2b2b2b"),
        (Role.WindowText, "#ececec"),
        (Role.Base, "#1e1e1e"),
        (Role.AlternateBase, "#262626"),
        (Role.ToolTipBase, "#3a3a3a"),
        (Role.ToolTipText, "#ececec"),
        (Role.PlaceholderText, "#9a9a9a"),
        (Role.Text, "#ececec"),
        (Role.Button, "#353535"),
        (Role.ButtonText, "#ececec"),
        (Role.BrightText, "#ff6b6b"),
        (Role.Light, "#4a4a4a"),
        (Role.Midlight, "#3e3e3e"),
        (Role.Mid, "#2f2f2f"),
        (Role.Dark, "#1a1a1a"),
        (Role.Shadow, "#0d0d0d"),
        (Role.Highlight, "#2563eb"),
        (Role.HighlightedText, "#ffffff"),
        (Role.Link, "#7fb0ff"),
        (Role.LinkVisited, "#c4a3ff"),
    ):
        _set(p, role, value)
    for role in (Role.WindowText, Role.Text, Role.ButtonText):
        p.setColor(Group.Disabled, role, QColor("#8c8c8c"))
    p.setColor(Group.Disabled, Role.Highlight, QColor("#3d4a66"))
    p.setColor(Group.Disabled, Role.Base, QColor("#262626"))
    p.setColor(Group.Disabled, Role.Button, QColor("#303030"))
    return p


def _set(palette: QPalette, role: Role, value: str) -> None:
    palette.setColor(role, QColor(value))


class _SystemLook:
    """The style and palette the application started with: what "System" goes back to."""

    def __init__(self, app: QApplication) -> None:
        self.style = app.style().name()
        self.palette = QPalette(app.palette())


_system: _SystemLook | None = None


def apply_theme(name: str) -> str:
    """Switch the application to theme `name` (an unknown name means System); returns the
    theme applied."""
    global _system
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return "system"
    if _system is None:
        _system = _SystemLook(app)
    name = name if name in THEMES else "system"
    tell = notifier()
    tell.quiet = True  # one notice for the style and the palette together
    try:
        if name == "system":
            app.setStyle(_system.style)
            app.setPalette(_system.palette)
        else:
            app.setStyle("Fusion")
            app.setPalette(dark_palette() if name == "dark" else light_palette())
    finally:
        tell.quiet = False
    tell.changed()
    return name


def saved_theme(settings: QSettings) -> str:
    value = settings.value(THEME_KEY, "system")
    return value if isinstance(value, str) and value in THEMES else "system"


# ---- telling widgets ------------------------------------------------------------------------
class ThemeNotifier(QWidget):
    """Says when the application's palette changed (our theme, or the desktop's).

    A hidden widget, told like every widget when the application palette changes: an event
    filter on the application would see every event of every object in Python (slow, and
    PySide 6.11 crashed in it for widgets only a Python cycle kept alive)."""

    sig_changed = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.quiet = False

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ApplicationPaletteChange and not self.quiet:
            self.changed()
        return super().event(event)

    def changed(self) -> None:
        emit(self.sig_changed)


_notifier: ThemeNotifier | None = None


def notifier() -> ThemeNotifier:
    global _notifier
    if _notifier is None:
        _notifier = ThemeNotifier()
    return _notifier


class _Hook(QObject):
    """Calls `callback(colors())` on every palette change while its owner lives."""

    def __init__(self, owner: QObject, callback: Callable[[ThemeColors], None]) -> None:
        super().__init__(owner)
        self._callback = callback
        notifier().sig_changed.connect(self._run)

    @Slot()
    def _run(self) -> None:
        self._callback(colors())


def on_theme(owner: QObject, callback: Callable[[ThemeColors], None]) -> None:
    """Call `callback` now and after every palette change, for as long as `owner` lives."""
    _Hook(owner, callback)
    callback(colors())


ColorPick = Callable[[ThemeColors], QColor]
_PICK_PROPERTY = "chatappTextColor"


def set_text_color(widget: QWidget, pick: ColorPick) -> None:
    """Give `widget`'s text (a label's, a button's) the colour `pick` chooses, kept up to date.
    Calling it again changes the colour (one theme hook per widget, however many calls)."""
    first = widget.property(_PICK_PROPERTY) is None
    widget.setProperty(_PICK_PROPERTY, True)
    setattr(widget, "_chatapp_pick", pick)  # noqa: B010 - a Qt widget, no such attribute

    def apply(c: ThemeColors) -> None:
        color = getattr(widget, "_chatapp_pick")(c)  # noqa: B009
        palette = widget.palette()
        for role in (Role.WindowText, Role.Text, Role.ButtonText):
            palette.setColor(Group.Active, role, color)
            palette.setColor(Group.Inactive, role, color)
        widget.setPalette(palette)

    if first:
        on_theme(widget, apply)
    else:
        apply(colors())


def muted(widget: QWidget) -> None:
    """A caption or hint: the text colour toward the background, still readable."""
    set_text_color(widget, lambda c: c.muted)


def warning_label(parent: QWidget, object_name: str) -> QLabel:
    """A hidden, wrapping label in the theme's warning colour, for a note shown on demand."""
    label = QLabel("", parent)
    label.setObjectName(object_name)
    label.setWordWrap(True)
    set_text_color(label, lambda c: c.warning)
    label.hide()
    return label
