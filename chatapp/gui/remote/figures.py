"""The side panel while a remote server answers: what a client measures, what it cannot.

Time to first token, tokens/s, the latency chart and perplexity (when the server sends
log-probs) are measured here as tokens arrive and stay in the panel. What only the server can
know (`chatapp.remote.engine.UNAVAILABLE`: the loop, the device and its threads, host↔device
bytes, prompt perplexity, the run / host split) is greyed with a word on why, never shown as
0. A chatapp server's own figures of the last answer (its loop, device, transfers, its own
TTFT and speed) get a box of their own, labelled as the server's.
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

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.side_panel import FIGURES, SidePanel
from chatapp.gui.common.theme import muted
from chatapp.remote.engine import UNAVAILABLE
from chatapp.session import formatting as fmt
from chatapp.session.formatting import REMOTE
from chatapp.session.loop_notes import LoadedDevice
from chatapp.session.remote_jobs import RemoteSummary
from chatapp.units import fmt_bytes

NOT_AVAILABLE = "n/a"
UNAVAILABLE_WORDS = {
    "loop": "the loop",
    "device": "the device and its threads",
    "transfer": "host↔device bytes",
    "prompt_perplexity": "prompt perplexity",
    "run/host split": "the run / host split",
}
MEASURED_HERE = (
    "Measured here as the tokens arrive: TTFT includes the network both ways and the "
    "server's queue and prefill. Not measurable from a client: {}."
)
PROMPT_PERPLEXITY_TIP = (
    "Not available from a remote server: it needs the log-probs of the prompt, which the "
    "OpenAI API does not return."
)
SERVER_PROMPT_PERPLEXITY_TIP = (
    "Reported by the server (chatapp serve) for the last answer: how surprised its model was "
    "by the prompt, measured there."
)
TRANSFER_TIP = (
    "Not available from a remote server: host↔device bytes are counted inside the engine, on "
    "the server."
)
LOOP_TIP = (
    "The server runs its own loop on its own device and threads: not chosen or seen from here."
)
NO_LOGPROBS_TIP = "The server sent no log-probs, so perplexity is not available."
NO_USAGE_TIP = "The server sent no token counts (usage), so the context used is not known."
REMOTE_TIPS = {
    "ttft": "Request sent → first token received: network, the server's queue, its prefill",
    "speed": "Tokens after the first / the time they took to arrive, measured here",
}
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


def unavailable_sentence() -> str:
    return ", ".join(UNAVAILABLE_WORDS.get(key, key) for key in UNAVAILABLE)


class RemoteFigures(QObject):
    """Switches the side panel between local and remote figures, through the panel's own
    methods (gui/chat/side_panel.py): its box goes where the panel offers one."""

    def __init__(self, panel: SidePanel) -> None:
        super().__init__(panel)
        self.panel = panel
        self.remote: RemoteSummary | None = None
        self._server_figures: Mapping[str, Any] | None = None  # the last answer's, if sent
        self.box = self._build_box(panel)
        panel.add_backend_box(self.box)
        self.box.hide()
        self.loop_note = _note(LOOP_TIP, panel)
        self.loop_note.setObjectName("remoteLoopNote")
        self.loop_note.hide()
        panel.add_loop_note(self.loop_note)
        self._loop_title = panel.loop_title()
        self._local_tips = {key: panel.figure_tip(key) for key in FIGURES}
        self._local_device = panel.loaded()
        panel.sig_figures_shown.connect(self._on_figures_shown)

    def _build_box(self, panel: SidePanel) -> QGroupBox:
        box = QGroupBox("Remote server", panel)
        box.setObjectName("remoteServerBox")
        layout = QVBoxLayout(box)
        self.server_label = _note("", box)
        self.server_label.setObjectName("remoteServerLabel")
        self.server_label.setStyleSheet("")
        self.measured_note = _note(MEASURED_HERE.format(unavailable_sentence()), box)
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
        # The way back, where the remote figures are (File > Disconnect does the same).
        self.disconnect_button = QPushButton("Disconnect: use the local model", box)
        self.disconnect_button.setObjectName("remoteDisconnectButton")
        layout.addWidget(self.disconnect_button)
        return box

    # ---- switching ----------------------------------------------------------------------------
    def set_remote(self, summary: RemoteSummary | None) -> None:
        """Remote figures for `summary`'s server, or (None) the local panel as it was."""
        panel = self.panel
        was_remote, self.remote = self.remote is not None, summary
        remote = summary is not None
        if remote and not was_remote:
            self._local_device = panel.loaded()  # what answers after Disconnect
        if summary is not None:
            panel.set_loaded(
                LoadedDevice(REMOTE, f"the server {summary.server}", False, 0, summary.name)
            )
        elif was_remote:
            panel.set_loaded(self._local_device)
        panel.set_loop_unavailable(LOOP_TIP if remote else None)
        panel.set_loop_title(f"{self._loop_title} (the server's)" if remote else self._loop_title)
        self.loop_note.setVisible(remote)
        self.box.setVisible(remote)
        for key in ("prompt_perplexity", "transfer"):
            panel.set_figure(key, enabled=not remote)
        for key, tip in self._local_tips.items():
            panel.set_figure(key, tip=tip)
        if summary is not None:
            panel.set_figure("ttft", tip=REMOTE_TIPS["ttft"])
            panel.set_figure("tokens_per_second", tip=REMOTE_TIPS["speed"])
            panel.set_figure("prompt_perplexity", tip=PROMPT_PERPLEXITY_TIP)
            panel.set_figure("transfer", tip=TRANSFER_TIP)
            self.server_label.setText(f"<b>{_escape(summary.name)}</b> at {summary.server}")
            self.server_caption.setText(
                "Reported by the server (chatapp serve) for the last answer:"
                if summary.is_chatapp
                else "This server reports no figures of its own (chatapp serve does)."
            )
            self.server_rows.setVisible(summary.is_chatapp)
            self.show_server(None)
            panel.start_answer()  # the local model's last figures no longer apply
            panel.set_context(0, summary.max_context)
        else:
            for key in ("perplexity", "context"):
                panel.set_figure(key, enabled=True)
            # Until the next local answer.
            panel.set_figure("transfer", text=fmt.MISSING)
            panel.set_figure("context", text=fmt.MISSING)
            panel.start_answer()

    def show_server(self, figures: Mapping[str, Any] | None) -> None:
        """A chatapp server's own figures of the last answer (None: not yet)."""
        for _caption, key, reader in SERVER_ROWS:
            label = self.server_values[key]
            label.setText(_server_value(figures, key, reader))
        self._server_figures = figures
        if self.remote is not None:
            self._show_prompt_perplexity()

    def _show_prompt_perplexity(self) -> None:
        """What a chatapp server reported, where it did (the panel never reads n/a beside
        the server's own figure); else why a client cannot know it."""
        reported = _server_value(self._server_figures, "prompt_perplexity", fmt.perplexity)
        if reported == fmt.MISSING:
            self.panel.set_figure(
                "prompt_perplexity", text=NOT_AVAILABLE, tip=PROMPT_PERPLEXITY_TIP, enabled=False
            )
        else:
            self.panel.set_figure(
                "prompt_perplexity", text=reported, tip=SERVER_PROMPT_PERPLEXITY_TIP, enabled=True
            )

    # ---- after every update of the panel's figures --------------------------------------------
    @Slot(object)
    def _on_figures_shown(self, figures: AnswerFigures | None) -> None:
        if self.remote is None:
            return
        panel = self.panel
        # The live figures write each answer's tooltips: a client's words go over them.
        self._show_prompt_perplexity()
        panel.set_figure("transfer", text=NOT_AVAILABLE, tip=TRANSFER_TIP)
        answered = figures is not None and (figures.generated_tokens or 0) > 0
        no_logprobs = answered and figures is not None and figures.perplexity is None
        panel.set_figure(
            "perplexity",
            enabled=not no_logprobs,
            tip=NO_LOGPROBS_TIP if no_logprobs else self._local_tips["perplexity"],
            text=NOT_AVAILABLE if no_logprobs else None,
        )
        no_usage = answered and figures is not None and figures.prompt_tokens is None
        panel.set_figure("context", enabled=not no_usage)
        if no_usage:
            panel.set_figure("context", text=NOT_AVAILABLE, tip=NO_USAGE_TIP)


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
