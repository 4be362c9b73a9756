"""The side panel's four boxes as sections that fold (gui/common/collapsible.py), each with a
one-line summary while folded, which ones are open remembered between runs.

Why: with the live figures, the loop and device, the sampling and the system prompt all open,
the panel is about 1,300 px tall; a 1366x768 screen shows about 660 of it, so it scrolled, and
scrolled by itself as notes came and went during an answer. By default the figures and the loop
are open (they fit 1366x768 with the others' headers) and the sampling and system prompt fold to
a line that says what the next answer uses. Opening a section folds others, from the bottom up,
while the panel would not fit its pane; the one just opened stays, so the choice is the
person's. A pane too short for even one section still scrolls (an 800x500 screen).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from PySide6.QtCore import QEvent, QObject, QSettings, QTimer, SignalInstance, Slot
from PySide6.QtWidgets import QComboBox, QGroupBox, QVBoxLayout, QWidget

from chatapp.engine.modes import Mode
from chatapp.engine.sampling import PRESET_LABELS
from chatapp.gui.chat.live_figures import LiveFigures
from chatapp.gui.chat.sampling_box import SamplingBox
from chatapp.gui.chat.system_prompt_box import SystemPromptBox
from chatapp.gui.common.collapsible import Section
from chatapp.gui.common.settings import string_list
from chatapp.session import formatting as fmt


class SidePanel(Protocol):
    """What the sections read of the side panel (side_panel.py imports this module)."""

    figures_box: LiveFigures
    sampling_box: SamplingBox
    system_prompt_box: SystemPromptBox
    precision_selector: QComboBox
    device_selector: QComboBox

    def mode(self) -> Mode: ...

    def precision_applies(self) -> bool: ...

    def save_now(self) -> None: ...


SECTION_NAMES = ("figures", "loop", "sampling", "system")
FOLDED_KEY = "panel/folded"  # the sections folded, and "notes" for the figures' notes
FOLDED_AT_FIRST = ("sampling", "system", "notes")


class PanelSections:
    """The panel's sections by name ("figures", "loop", "sampling", "system")."""

    def __init__(
        self,
        widget: QWidget,
        panel: SidePanel,
        boxes: Sequence[QGroupBox],
        changes: Sequence[SignalInstance],
    ) -> None:
        """`widget`: the panel, whose layout gets the sections; `panel`: what they read of it;
        `changes`: the panel's signals after which a summary may read otherwise."""
        self.widget = widget
        self.panel = panel
        self._sections: dict[str, Section] = {}
        layout = widget.layout()
        assert isinstance(layout, QVBoxLayout)
        for name, box in zip(SECTION_NAMES, boxes, strict=True):
            section = Section(box.title(), box, name, widget)
            box.setTitle("")  # the header says it, and folds it
            box.setFlat(True)
            layout.addWidget(section)
            self._sections[name] = section
            section.sig_toggled.connect(lambda open_, n=name: self._on_toggled(n, open_))
        # Summaries follow what they summarise; many changes in a row are one refresh.
        self._pending = QTimer(widget)  # dies with the panel
        self._pending.setSingleShot(True)
        self._pending.setInterval(0)
        self._pending.timeout.connect(self.refresh)
        for signal in (
            *changes,
            panel.sampling_box.sig_changed,
            panel.sampling_box.prompt.choice_combo.currentIndexChanged,
            panel.precision_selector.currentIndexChanged,
            panel.device_selector.currentIndexChanged,
            panel.system_prompt_box.edit.textChanged,
            *(b.toggled for b in panel.sampling_box.preset_buttons.values()),
        ):
            signal.connect(self.schedule)
        for name in FOLDED_AT_FIRST:
            self.set_open(name, False)
        self.refresh()

    def __getitem__(self, name: str) -> Section:
        return self._sections[name]

    def __iter__(self) -> Iterator[Section]:
        return iter(self._sections.values())

    def set_open(self, name: str, open_: bool) -> None:
        if name == "notes":
            self.panel.figures_box.notes_section.set_open(open_)
        else:
            self._sections[name].set_open(open_)

    def is_open(self, name: str) -> bool:
        if name == "notes":
            return self.panel.figures_box.notes_section.is_open()
        return self._sections[name].is_open()

    # ---- remembered -------------------------------------------------------------------------
    def restore(self, settings: QSettings) -> None:
        if settings.value(FOLDED_KEY) is None:
            return  # first start: FOLDED_AT_FIRST
        folded = set(string_list(settings, FOLDED_KEY))  # checked: names, a few, short
        for name in (*SECTION_NAMES, "notes"):
            self.set_open(name, name not in folded)
        self.refresh()

    def save(self, settings: QSettings) -> None:
        folded = [n for n in (*SECTION_NAMES, "notes") if not self.is_open(n)]
        # A list of one or none reads back as a string or None from an ini file: "" keeps
        # "none folded" apart from "never saved".
        settings.setValue(FOLDED_KEY, folded or "")

    def watch(self, box: QWidget) -> None:
        """`box` (a server's figures, the serving box) shows now and then among the sections:
        as it shows, the open sections fold from the bottom up until the panel fits."""
        box.installEventFilter(_FitWhenShown(self, box))

    # ---- fitting the pane ---------------------------------------------------------------------
    def _on_toggled(self, name: str, open_: bool) -> None:
        if open_:
            self.fit(keep=name)
        self.refresh()
        self.panel.save_now()

    def fit(self, keep: str | None = None) -> None:
        """Fold open sections, from the bottom up, but `keep`, while the panel is taller than
        the pane that shows it."""
        viewport = self.widget.parentWidget()
        if viewport is None:
            return
        for name in reversed(SECTION_NAMES):
            if self._needed_height() <= viewport.height():
                return
            if name != keep and self.is_open(name):
                self.set_open(name, False)

    def _needed_height(self) -> int:
        layout = self.widget.layout()
        if layout is None:
            return 0
        layout.activate()
        width = self.widget.width()
        if layout.hasHeightForWidth():
            return layout.totalHeightForWidth(width)
        return layout.totalMinimumSize().height()

    # ---- summaries ----------------------------------------------------------------------------
    @Slot()
    def schedule(self) -> None:
        self._pending.start()

    @Slot()
    def refresh(self) -> None:
        panel = self.panel
        self["figures"].set_summary(_figures_summary(panel))
        loop = [fmt.mode_label(panel.mode().value), panel.device_selector.currentText()]
        if panel.precision_applies():  # named while an answer locks it too
            loop.append(panel.precision_selector.currentText())
        self["loop"].set_summary(" · ".join(loop))
        box = panel.sampling_box
        pressed = box.pressed_preset()
        sampling = [
            PRESET_LABELS[pressed] if pressed else "custom values",
            f"up to {box.max_tokens_spin.value()} tokens",
            box.prompt.choice_combo.currentText(),
        ]
        if tools := box.tools.tools():
            sampling.append("1 tool" if len(tools) == 1 else f"{len(tools)} tools")
        self["sampling"].set_summary(" · ".join(sampling))
        self["system"].set_summary(_system_summary(panel))


class _FitWhenShown(QObject):
    def __init__(self, sections: PanelSections, box: QWidget) -> None:
        super().__init__(box)
        self._sections = sections

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Show:
            QTimer.singleShot(0, self._sections.fit)  # once the panel has laid it out
        return False


def _figures_summary(panel: SidePanel) -> str:
    box = panel.figures_box
    context = f"context {box.context_value.text()}"
    fig = box.figures
    if fig is None:
        return context
    return f"{fmt.rate(fig.tokens_per_s)} tok/s · TTFT {fmt.millis(fig.ttft_s)} ms · {context}"


def _system_summary(panel: SidePanel) -> str:
    text = panel.system_prompt_box.text().strip()
    if text:
        return text.splitlines()[0]
    box = panel.system_prompt_box
    if not box.model_default:
        return "none"
    # Counted in Context used: said even while folded (it was counted and never shown).
    return f"the model's own, {box.model_default_tokens} tokens: \u201c{box.model_default}\u201d"
