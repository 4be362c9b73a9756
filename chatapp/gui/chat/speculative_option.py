"""The side panel's "Speculative decoding" choice and what it did for the answer shown.

On, the engine drafts tokens from the conversation (engine/speculative.py) and verifies them
several to a forward pass; the answer is the one the plain decode writes, token for token. The
note under the box says, for the answer shown, how many drafted tokens the model kept and how
many tokens each read of the weights gave. Greyed, with the engine's reason, where the rows a
pass computes together would not be the one-token steps' own (exact precision, the stock graph,
a device, No cache) or a remote server answers.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QCheckBox, QVBoxLayout, QWidget

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.live_figures import WrappedNote
from chatapp.gui.common.qtcompat import emit

SPECULATIVE_TIP = (
    "Drafts the next tokens from the conversation (where the answer repeats, rewrites or "
    "quotes it) and checks several of them in one pass over the weights. The answer is the "
    "same, token for token; where drafts stop paying, it stops drafting. Applies from the "
    "next answer; remembered."
)
NOTHING_DRAFTED = "Nothing in this answer was worth drafting: one token a pass."
SETTINGS_KEY = "engine/speculative"


class SpeculativeOption(QWidget):
    sig_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.check = QCheckBox("Speculative decoding", self)
        self.check.setObjectName("speculativeCheck")
        self.check.setChecked(True)
        self.check.setToolTip(SPECULATIVE_TIP)
        self.check.toggled.connect(self._on_toggled)
        layout.addWidget(self.check)
        self.note = WrappedNote("speculativeNote", self)
        self.note.hide()
        layout.addWidget(self.note)
        self._unavailable: str | None = None
        self._locked = False

    def enabled(self) -> bool:
        """Whether the next answer may draft (asked for, and possible here)."""
        return self.check.isChecked()

    def set_enabled(self, on: bool) -> None:
        """Set the choice without announcing it (a restored setting)."""
        self.check.blockSignals(True)
        self.check.setChecked(on)
        self.check.blockSignals(False)

    def set_unavailable(self, reason: str | None) -> None:
        """Grey the choice with why it cannot run here; None: it can."""
        self._unavailable = reason
        self._update()

    def set_locked(self, locked: bool, tip: str) -> None:
        """While an answer streams: it applies to whole answers."""
        self._locked = locked
        self._update(tip if locked else None)

    def show_figures(self, fig: AnswerFigures | None, finished: bool = False) -> None:
        """What drafting did for the answer shown (`finished`: all of it); nothing where it
        did not run."""
        text = ""
        if fig is not None and fig.drafted_tokens is not None:
            summary = fig.speculative_summary
            if summary:
                text = summary[0].upper() + summary[1:] + "."
            elif finished and self._may_draft() and (fig.generated_tokens or 0) > 1:
                text = NOTHING_DRAFTED
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def _may_draft(self) -> bool:
        return self.enabled() and self._unavailable is None

    def _update(self, locked_tip: str | None = None) -> None:
        reason = self._unavailable
        self.check.setEnabled(reason is None and not self._locked)
        if reason is not None:
            self.check.setToolTip(f"Speculative decoding does not run here: {reason}.")
        else:
            self.check.setToolTip(locked_tip or SPECULATIVE_TIP)

    @Slot(bool)
    def _on_toggled(self, on: bool) -> None:
        emit(self.sig_changed, on)
