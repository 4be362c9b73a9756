"""The chat as a feature of the window: what the prompt box asks (send, regenerate, stop,
another version of an answer) goes to the controller, and what the controller tells of an
answer (started, tokens, figures, finished, failed) goes to the transcript and the side panel.
It plugs in like the others, through what MainWindow declares (`chat_view` and `side_panel`
are the chat's own widgets, in the frame's layout); the window keeps the chat's state shown
in its controls, loading and new chats."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Slot

from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.controller import State
from chatapp.gui.chat.regenerate_note import VARIED_PRESET, same_answer
from chatapp.session import formatting as fmt
from chatapp.session.chat_jobs import StatsSnapshot, TokenBatch
from chatapp.session.conversation import ChatMessage

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow


class ChatFeature(QObject):
    """`window.feature(ChatFeature)` finds it."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self._banner_at_start = 0  # the banner's serial when the answer started
        c, view = window.controller, window.chat_view
        self.chat, self.view, self.panel = c, view, window.side_panel
        view.sig_send.connect(self._on_send)
        view.sig_stop.connect(c.stop)
        view.sig_regenerate.connect(self._on_regenerate)
        view.regenerate_note.sig_regenerate.connect(self._regenerate_varied)
        view.sig_copied.connect(self._on_copied)
        # Transcript: versions of an answer, copied code, where a hovered link goes.
        view.sig_version_requested.connect(c.select_version)
        view.sig_code_copied.connect(lambda: window.notify("Copied the code.", 3000))
        view.sig_status.connect(lambda text: window.notify(text, 8000))
        c.sig_answer_started.connect(self._on_answer_started)
        c.sig_answer_delta.connect(self._on_answer_delta)
        c.sig_stats.connect(self._on_stats)
        c.sig_warm_up.connect(self._on_warm_up)
        c.sig_answer_finished.connect(self._on_answer_finished)
        c.sig_answer_failed.connect(self._on_answer_failed)

    @Slot(str)
    def _on_send(self, text: str) -> None:
        if self.chat.send(text, self.window.chat_options()):
            self.view.set_prompt_text("")
            self.view.prompt_edit.setFocus()  # after a click on Send, keep typing
        elif self.chat.state is State.NO_MODEL:
            self.window.show_message(
                "No model is loaded: open a model folder from the File menu.", "info"
            )

    @Slot()
    def _on_regenerate(self) -> None:
        options = self.window.chat_options()
        if self.chat.regenerate(options):
            # Greedy or a fixed seed writes the same text again: say why, offer a way out.
            preset = self.panel.sampling_box.preset()
            self.view.regenerate_note.offer(same_answer(options.settings, preset))

    @Slot(str)
    def _regenerate_varied(self, fix: str) -> None:
        box = self.panel.sampling_box
        if fix == "seed":
            box.seed_spin.setValue(-1)  # random
        else:
            box.use_preset(VARIED_PRESET)
        self._on_regenerate()

    @Slot(int)
    def _on_copied(self, index: int) -> None:
        self.window.notify(f"Copied message {index + 1} to the clipboard.", 3000)

    @Slot(object)
    def _on_answer_started(self, _options: object) -> None:
        # A failure the banner tells of now (a device that failed) is over once this answer
        # succeeds; what is shown while it runs, and notices, stay.
        self._banner_at_start = self.window.dismiss_message()
        self.view.show_messages(self.chat.conversation.messages)
        self.view.begin_answer()
        self.panel.begin_answer()

    @Slot(object)
    def _on_answer_delta(self, batch: TokenBatch) -> None:
        self.view.append_answer(batch.text)
        self.panel.add_latencies(batch.first_index, batch.latencies_s)

    @Slot(object)
    def _on_stats(self, snapshot: StatsSnapshot) -> None:
        self.panel.show_stats(snapshot.figures)

    @Slot(object)
    def _on_warm_up(self, progress: WarmUpProgress) -> None:
        self.panel.show_warm_up(progress)
        self.view.set_hint(
            "Writing… Esc or Stop ends the answer."
            if progress.finished
            else "Preparing the device… (first answer only)"
        )

    @Slot(object)
    def _on_answer_finished(self, message: ChatMessage) -> None:
        self.panel.finish_answer(message.figures)
        if message.figures is None or message.figures.finish_reason != "error":
            self.window.dismiss_message(failures_before=self._banner_at_start)
        if message.figures is not None:
            self.window.notify(fmt.figures_line(message.figures, tokens=False), 10000)

    @Slot(str, str)
    def _on_answer_failed(self, message: str, restored_prompt: str) -> None:
        if restored_prompt and not self.view.prompt_text().strip():
            self.view.set_prompt_text(restored_prompt)
        self.panel.finish_answer(None)
        self.window.show_message(message, "error", until_answer=True)


def install_chat(window: MainWindow) -> ChatFeature:
    feature = ChatFeature(window)
    window.add_feature(feature)
    return feature
