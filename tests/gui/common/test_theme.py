"""Colours derived from the palette read in light and dark alike; View > Theme switches the
application and every themed widget follows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from PySide6.QtGui import QColor, QGuiApplication, QPalette

from chatapp.gui.chat.latency_chart import LatencyChart
from chatapp.gui.chat.loop_toggle import LoopToggle
from chatapp.gui.common.banner import MessageBanner
from chatapp.gui.common.theme import (
    GRAPHIC_CONTRAST,
    TEXT_CONTRAST,
    ThemeColors,
    apply_theme,
    colors,
    contrast,
    dark_palette,
    light_palette,
    luminance,
    on_theme,
)


@pytest.fixture
def themed(qapp) -> Iterator[None]:
    yield
    apply_theme("system")  # the next tests see the palette they started with


@pytest.mark.parametrize("palette", [light_palette, dark_palette], ids=["light", "dark"])
def test_derived_colours_contrast_enough(qapp, palette) -> None:
    c = colors(palette())
    for ground in (c.window, c.base):
        assert contrast(c.muted, ground) >= TEXT_CONTRAST
        assert contrast(c.warning, ground) >= TEXT_CONTRAST
    assert contrast(c.accent, c.accent_text) >= TEXT_CONTRAST
    assert contrast(c.base_text, c.base) >= TEXT_CONTRAST
    assert contrast(c.user, c.base) >= TEXT_CONTRAST
    assert contrast(c.assistant, c.base) >= TEXT_CONTRAST
    assert contrast(c.border, c.window) >= GRAPHIC_CONTRAST
    for line in (*c.loops.values(), *c.parts.values(), c.chart_line):
        assert contrast(line, c.base) >= GRAPHIC_CONTRAST
    for banner in c.banners.values():
        assert contrast(banner.text, banner.background) >= TEXT_CONTRAST


def test_dark_palette_is_dark_and_light_is_light(qapp) -> None:
    assert colors(dark_palette()).dark and luminance(colors(dark_palette()).base) < 0.05
    assert not colors(light_palette()).dark


def test_theme_switch_reaches_themed_widgets(qapp, themed) -> None:
    seen: list[ThemeColors] = []
    toggle = LoopToggle()
    on_theme(toggle, seen.append)
    apply_theme("dark")
    window = QGuiApplication.palette().color(QPalette.ColorRole.Window)
    assert seen[-1].dark and window.lightness() < 80
    apply_theme("light")
    assert not seen[-1].dark
    toggle.deleteLater()


def _dominant(widget) -> QColor:
    image = widget.grab().toImage()
    counts = Counter(
        image.pixel(x, y) for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)
    )
    return QColor.fromRgb(counts.most_common(1)[0][0])


def test_unselected_segment_and_charts_are_dark_in_dark_mode(qtbot, themed) -> None:
    apply_theme("dark")
    toggle = LoopToggle()
    qtbot.addWidget(toggle)
    toggle.set_mode("naive")  # IO-Binding is the unselected segment
    toggle.resize(240, 32)
    toggle.show()
    c = colors()
    background = _dominant(toggle.iobinding_button)
    assert luminance(background) < 0.1  # not the near-white box of issue 16
    assert contrast(toggle.iobinding_button.palette().buttonText().color(), background) >= 4.5
    assert contrast(c.base_text, background) >= TEXT_CONTRAST
    chart = LatencyChart()
    qtbot.addWidget(chart)
    assert chart.chart().backgroundBrush().color() == c.base
    chart.resize(300, 160)
    assert luminance(_dominant(chart)) < 0.1
    apply_theme("light")
    assert luminance(chart.chart().backgroundBrush().color()) > 0.8


def test_banner_follows_the_theme(qtbot, themed) -> None:
    banner = MessageBanner()
    qtbot.addWidget(banner)
    banner.show_message("Something failed", "error")
    apply_theme("dark")
    dark = colors().banners["error"]
    assert dark.background.name() in banner.styleSheet()
    apply_theme("light")
    assert colors().banners["error"].background.name() in banner.styleSheet()
    assert dark.background.name() not in banner.styleSheet()


def test_a_desktop_palette_change_is_followed(qapp, themed) -> None:
    from PySide6.QtWidgets import QApplication, QWidget

    owner = QWidget()
    seen: list[ThemeColors] = []
    on_theme(owner, seen.append)
    before = QPalette(QApplication.palette())
    QApplication.setPalette(dark_palette())  # what the platform does when the desktop goes dark
    qapp.processEvents()
    assert seen[-1].dark
    QApplication.setPalette(before)
    qapp.processEvents()
    assert seen[-1].dark == colors(before).dark
    owner.deleteLater()


def test_preset_buttons_read_in_dark_mode(qtbot, themed) -> None:
    from chatapp.gui.chat.sampling_box import SamplingBox

    apply_theme("dark")
    box = SamplingBox()
    qtbot.addWidget(box)
    box.resize(320, 400)
    box.show()
    c = colors()
    unpressed = box.preset_buttons["creative"]
    assert not unpressed.isChecked() and box.preset_buttons["precise"].isChecked()
    assert luminance(_dominant(unpressed)) < 0.1
    assert _dominant(box.preset_buttons["precise"]) == c.accent


def test_set_text_color_again_changes_the_colour_and_follows_the_theme(qtbot, themed) -> None:
    from PySide6.QtWidgets import QLabel

    from chatapp.gui.common.theme import set_text_color

    label = QLabel("status")
    qtbot.addWidget(label)
    set_text_color(label, lambda c: c.muted)
    set_text_color(label, lambda c: c.error)  # a failure after a note: the same label
    assert label.palette().windowText().color() == colors().error
    apply_theme("dark")
    assert label.palette().windowText().color() == colors().error
    assert contrast(colors().error, colors().window) >= TEXT_CONTRAST


def test_warning_label_starts_hidden_and_follows_the_theme(qtbot, themed) -> None:
    from PySide6.QtWidgets import QWidget

    from chatapp.gui.common.theme import warning_label

    parent = QWidget()
    qtbot.addWidget(parent)
    label = warning_label(parent, "someNote")
    assert label.objectName() == "someNote" and label.parent() is parent
    assert label.isHidden() and label.wordWrap()
    assert label.palette().windowText().color() == colors().warning
    apply_theme("dark")
    assert label.palette().windowText().color() == colors().warning
