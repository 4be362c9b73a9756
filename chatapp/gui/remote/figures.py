"""The side panel from a backend's card: what it measures, and why not the rest.

A connected backend (a server) hands the window its `BackendCard` (engine/backend.py). Each
figure of the panel is shown, explained or greyed as the card says: time to first token,
tokens/s and perplexity (when log-probs come) as the card explains them; what the backend
never reports (a server's host↔device bytes, its prompt perplexity) greyed with the card's
reason, never shown as 0; what an answer came without (no log-probs, no usage) greyed with
the card's word on why. Facts the card has no value for (a server's loop, device, threads)
are named in one note. A backend that reports its own figures of each answer (a chatapp
server: its loop, device, transfers, TTFT and speed) gets a box of rows, labelled as its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QObject, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.backend import BackendCard
from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.side_panel import FIGURES, SidePanel
from chatapp.gui.common.theme import muted
from chatapp.session import formatting as fmt
from chatapp.session.formatting import REMOTE
from chatapp.session.loop_notes import LoadedDevice
from chatapp.units import fmt_bytes

NOT_AVAILABLE = "n/a"
# A figure of the panel in words (the note on what the card does not report).
FIGURE_WORDS = {
    "ttft": "time to first token",
    "tokens_per_second": "tokens/s",
    "perplexity": "perplexity",
    "prompt_perplexity": "prompt perplexity",
    "transfer": "host↔device bytes",
    "context": "the context used",
}
# The panel's figures a client cannot measure that a chatapp server reports of each answer
# (SERVER_ROWS): its box shows them, so the note does not call them unreported.
OWN_FIGURES = frozenset({"prompt_perplexity", "transfer"})
# The AnswerFigures field whose absence a card's `missing` words explain.
ANSWER_FIELDS = {
    "ttft": "ttft_s",
    "tokens_per_second": "tokens_per_s",
    "perplexity": "perplexity",
    "prompt_perplexity": "prompt_perplexity",
    "context": "prompt_tokens",
}
SERVER_PROMPT_PERPLEXITY_TIP = (
    "Reported by the server (chatapp serve) for the last answer: how surprised its model was "
    "by the prompt, measured there."
)
# (caption, key in the server's `chatapp` field, how it reads)
SERVER_ROWS: tuple[tuple[str, str, Any], ...] = (
    ("Loop", "loop", fmt.mode_label),
    ("Device", "device_label", str),
    ("Tokens/s", "tokens_per_s", fmt.rate),
    ("TTFT (ms)", "ttft_s", fmt.millis),
    ("Host↔device per token", "h2d_bytes_per_token", None),  # with d2h: see _server_value
    ("Prompt perplexity", "prompt_perplexity", fmt.perplexity),
    ("Queue wait (ms)", "queue_wait_s", fmt.millis),
)


def unreported_sentence(card: BackendCard) -> str:
    """What the card has no value for, in words: its facts without one (the loop, the
    device...), then the figures it never reports."""
    facts = [_word(f.label) for f in card.facts if f.value is None]
    # A chatapp server reports these with each answer (the rows under the note).
    own = OWN_FIGURES if card.own_figures else frozenset()
    figures = [
        FIGURE_WORDS.get(m.key, m.key) for m in card.measures if not m.reported and m.key not in own
    ]
    return ", ".join(facts + figures)


def _word(label: str) -> str:
    """A fact's label inside a sentence ("Device" -> "device"; "KV bytes" stays)."""
    return label if label[:2].isupper() else label.lower()


def loop_reason(card: BackendCard) -> str:
    """Why the loop, device and threads are not chosen here (the card's words, else its
    loop as the backend describes it)."""
    loop = card.fact("Loop")
    where = card.runs_on[:1].upper() + card.runs_on[1:]
    return loop.absent or (
        f"{where} runs its own {loop.value} loop on its own device and threads: not chosen "
        "from here."
    )


def measured_note(card: BackendCard) -> str:
    """The box's note (its label above names the model and where it runs)."""
    ttft = card.measure("ttft").how
    lines = []
    told = [
        f"{_word(f.label)} {f.value}"
        for f in card.facts
        if f.value is not None and f.label not in ("Server", "Context")
    ]
    if told:
        lines.append(f"It describes: {', '.join(told)}.")
    if ttft:
        lines.append(f"TTFT here: {ttft}.")
    missing = unreported_sentence(card)
    if missing:
        lines.append(f"Not reported by it: {missing}.")
    return " ".join(lines)


class BackendFigures(QObject):
    """Renders a card on the side panel through the panel's own methods
    (gui/chat/side_panel.py); its box goes where the panel offers one. `set_card(None)`: the
    local model's panel as it was."""

    def __init__(self, panel: SidePanel) -> None:
        super().__init__(panel)
        self.panel = panel
        self.card: BackendCard | None = None
        self._server_figures: Mapping[str, Any] | None = None  # the last answer's, if sent
        self.box = self._build_box(panel)
        panel.add_backend_box(self.box)
        self.box.hide()
        self.loop_note = _note("", panel)
        self.loop_note.setObjectName("remoteLoopNote")
        self.loop_note.hide()
        panel.add_loop_note(self.loop_note)
        self._loop_title = panel.loop_title()
        self._local_tips = {key: panel.figure_tip(key) for key in FIGURES}
        self._local_device = panel.loaded()
        panel.sig_figures_shown.connect(self._on_figures_shown)

    def _build_box(self, panel: SidePanel) -> QGroupBox:
        box = QGroupBox("Answers from", panel)
        box.setObjectName("remoteServerBox")
        layout = QVBoxLayout(box)
        self.server_label = _note("", box)
        self.server_label.setObjectName("remoteServerLabel")
        self.server_label.setStyleSheet("")
        self.measured_note = _note("", box)
        self.measured_note.setObjectName("remoteMeasuredNote")
        self.server_caption = _note("", box)
        self.server_caption.setObjectName("serverFiguresCaption")
        self.server_rows = QWidget(box)
        form = QFormLayout(self.server_rows)
        form.setContentsMargins(0, 0, 0, 0)
        self.server_values: dict[str, QLabel] = {}
        for caption, key, _reader in SERVER_ROWS:
            value = QLabel(fmt.MISSING, self.server_rows)
            value.setObjectName(f"server_{key}")
            value.setAccessibleName(f"Server: {caption}")
            self.server_values[key] = value
            form.addRow(caption, value)
        for widget in (self.server_label, self.measured_note, self.server_caption):
            layout.addWidget(widget)
        layout.addWidget(self.server_rows)
        # The way back, where the backend's figures are (File > Disconnect does the same).
        self.disconnect_button = QPushButton("Disconnect: use the local model", box)
        self.disconnect_button.setObjectName("remoteDisconnectButton")
        layout.addWidget(self.disconnect_button)
        return box

    # ---- switching ----------------------------------------------------------------------------
    def set_card(self, card: BackendCard | None) -> None:
        """The panel as `card` says, or (None) the local panel as it was."""
        panel = self.panel
        had, self.card = self.card, card
        if card is None:
            self._restore(had is not None and had.server is not None)
            return
        was_server = had is not None and had.server is not None
        if not was_server:
            self._local_device = panel.loaded()  # what answers after Disconnect
        where = card.server or card.runs_on
        if card.server is not None:  # the device line names where it runs
            panel.set_loaded(LoadedDevice(REMOTE, f"the server {where}", False, 0, card.name))
        elif was_server:
            panel.set_loaded(self._local_device)
        chooses = card.capabilities.chooses_loop
        reason = loop_reason(card)
        panel.set_loop_unavailable(None if chooses else reason)
        # Short enough for the side panel's width, where "... (the server's)" was cut.
        panel.set_loop_title(self._loop_title if chooses else "The server's loop and device")
        self.loop_note.setText(reason)
        self.loop_note.setVisible(not chooses)
        self.box.setVisible(card.server is not None)
        for key in FIGURES:
            measure = card.measure(key)
            tip = measure.absent or measure.how or self._local_tips[key]
            panel.set_figure(key, tip=tip, enabled=measure.reported)
        self.server_label.setText(f"<b>{_escape(card.name)}</b> at {_escape(where)}")
        self.measured_note.setText(measured_note(card))
        self.server_caption.setText(
            "Reported by the server (chatapp serve) for the last answer:"
            if card.own_figures
            else "This server reports no figures of its own (chatapp serve does)."
        )
        self.server_rows.setVisible(card.own_figures)
        self.show_server(None)
        panel.start_answer()  # the local model's last figures no longer apply
        panel.set_context(0, card.max_context)

    def _restore(self, was_card: bool) -> None:
        panel = self.panel
        if was_card:
            panel.set_loaded(self._local_device)
        panel.set_loop_unavailable(None)
        panel.set_loop_title(self._loop_title)
        self.loop_note.setVisible(False)
        self.box.setVisible(False)
        for key, tip in self._local_tips.items():
            panel.set_figure(key, tip=tip, enabled=True)
        # Until the next local answer.
        panel.set_figure("transfer", text=fmt.MISSING)
        panel.set_figure("context", text=fmt.MISSING)
        panel.start_answer()

    def show_server(self, figures: Mapping[str, Any] | None) -> None:
        """The backend's own figures of the last answer (None: not yet)."""
        for _caption, key, reader in SERVER_ROWS:
            label = self.server_values[key]
            label.setText(_server_value(figures, key, reader))
        self._server_figures = figures
        if self.card is not None:
            self._show_prompt_perplexity(self.card)

    def _show_prompt_perplexity(self, card: BackendCard) -> None:
        """What a chatapp server reported, where it did (the panel never reads n/a beside
        the server's own figure); else the card's reason it is not reported."""
        measure = card.measure("prompt_perplexity")
        if measure.reported:
            return
        reported = _server_value(self._server_figures, "prompt_perplexity", fmt.perplexity)
        if reported == fmt.MISSING:
            self.panel.set_figure(
                "prompt_perplexity", text=NOT_AVAILABLE, tip=measure.absent, enabled=False
            )
        else:
            self.panel.set_figure(
                "prompt_perplexity", text=reported, tip=SERVER_PROMPT_PERPLEXITY_TIP, enabled=True
            )

    # ---- after every update of the panel's figures --------------------------------------------
    @Slot(object)
    def _on_figures_shown(self, figures: AnswerFigures | None) -> None:
        card = self.card
        if card is None:
            return
        panel = self.panel
        # The live figures write each answer's tooltips: the card's words go over them.
        answered = figures is not None and (figures.generated_tokens or 0) > 0
        for key in FIGURES:
            measure = card.measure(key)
            if not measure.reported:
                if key == "prompt_perplexity":
                    self._show_prompt_perplexity(card)
                else:
                    panel.set_figure(key, text=NOT_AVAILABLE, tip=measure.absent, enabled=False)
                continue
            field = ANSWER_FIELDS.get(key)
            lacks = (
                answered
                and figures is not None
                and field is not None
                and getattr(figures, field) is None
            )
            if measure.missing and lacks:
                panel.set_figure(key, text=NOT_AVAILABLE, tip=measure.missing, enabled=False)
            else:
                # The card's words, else the ones the live figures just wrote (the panel's
                # own where a last answer's "missing" words were left).
                stale = bool(measure.missing) and panel.figure_tip(key) == measure.missing
                tip = measure.how or (self._local_tips[key] if stale else None)
                panel.set_figure(key, tip=tip, enabled=True)


def _server_value(figures: Mapping[str, Any] | None, key: str, reader: Any) -> str:
    if not figures:
        return fmt.MISSING
    if key == "h2d_bytes_per_token":
        h2d, d2h = figures.get("h2d_bytes_per_token"), figures.get("d2h_bytes_per_token")
        numbers = [v for v in (h2d, d2h) if isinstance(v, int | float)]
        return fmt_bytes(sum(numbers)) if numbers else fmt.MISSING
    value = figures.get(key)
    if value is None:
        return fmt.MISSING
    try:
        return str(reader(value))
    except (TypeError, ValueError, OverflowError):
        return fmt.MISSING


class _Note(QLabel):
    """A wrapped grey note that keeps the height its lines need at its width: in the scrolled
    side panel the layout otherwise gives it its one-width guess and clips the lines."""

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        needed = self.heightForWidth(self.width())
        if needed > 0 and needed != self.minimumHeight():
            self.setMinimumHeight(needed)


def _note(text: str, parent: QWidget) -> QLabel:
    label = _Note(text, parent)
    label.setWordWrap(True)
    muted(label)
    # Long text wraps to the panel rather than widening it (as the panel's own notes do).
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
