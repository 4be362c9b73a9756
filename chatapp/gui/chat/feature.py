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
from chatapp.session import prompt_style as ps
from chatapp.session.chat_jobs import StatsSnapshot, TokenBatch
from chatapp.session.chat_settings import ChatSettings
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.model_jobs import ModelSummary

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
        view.sig_continue.connect(self._on_continue)
        c.sig_state_changed.connect(self._show_continue)
        c.sig_conversation_changed.connect(self._show_continue)
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
        # Which model a chat was with: a chat is never continued unnoticed by another one.
        self._shown: Conversation | None = None
        c.sig_model_loaded.connect(self._on_model_loaded)
        # Text continuation is told where the text is typed, not only once in the banner.
        self._chat_placeholder = view.prompt_edit.placeholderText()
        self._empty_chat = view.transcript.placeholderText()
        self.panel.sampling_box.prompt.sig_changed.connect(self._show_prompt_choice)
        c.sig_model_loaded.connect(self._show_prompt_choice)
        c.sig_conversation_changed.connect(self._show_prompt_choice)
        c.sig_conversation_changed.connect(self._on_conversation_changed)

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

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        conv = self.chat.conversation
        was = conv.model
        if not conv.messages or was is None or was == summary.name:
            return
        self.window.new_chat()  # asks first when the chat is not saved
        if self.chat.conversation.messages:
            self.window.show_message(model_switch_text(was, summary.name, started=False), "info")
        else:
            self.window.show_message(model_switch_text(was, summary.name, started=True), "info")

    @Slot(object)
    def _on_conversation_changed(self, conversation: Conversation) -> None:
        if conversation is self._shown:
            return
        self._shown = conversation  # another chat is shown (opened from the list, or new)
        settings = conversation.settings
        if settings is not None and settings.known:  # a chat from before: the window's stay
            self._restore(settings)
        model = self.chat.model
        was = conversation.model or (settings.model if settings is not None else None)
        if self.chat.remote is None and model is not None and was and was != model.name:
            self.window.show_message(reopened_text(was, model.name, model.max_context), "info")

    def _restore(self, settings: ChatSettings) -> None:
        """A chat opened again gets its sampling, prompt style, stops and system prompt back."""
        box = self.panel.sampling_box
        if settings.sampling is not None:
            box.set_chat_values(settings.sampling)
        if settings.choice is not None:
            box.prompt.set_state(settings.choice, settings.user_stops)
        prompt_box = self.panel.system_prompt_box
        if prompt_box.text() != settings.system_prompt:
            prompt_box.set_text(settings.system_prompt)
            prompt_box.flush()

    @Slot()
    @Slot(object)
    def _show_prompt_choice(self, _what: object = None) -> None:
        continuing = self.panel.sampling_box.prompt.choice() == ps.CONTINUE
        placeholder = ps.CONTINUE_PLACEHOLDER if continuing else self._chat_placeholder
        self.view.prompt_edit.setPlaceholderText(placeholder)
        empty = ps.CONTINUE_EMPTY_CHAT if continuing else self._empty_chat
        self.view.transcript.setPlaceholderText(empty)

    @Slot()
    def _on_continue(self) -> None:
        self.chat.continue_answer(self.window.chat_options())

    @Slot(object)
    def _show_continue(self, _what: object = None) -> None:
        """Continue is offered under an answer the token limit cut, while nothing runs."""
        idle = not any(busy() for busy in self.window.busy_checks)  # e.g. a comparison runs
        self.view.continue_button.setVisible(idle and self.chat.can_continue())

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


def model_switch_text(was: str, now: str, started: bool) -> str:
    if started:
        return (
            f"{now} is loaded, so a new chat starts; your chat with {was} stays in the "
            "conversation list."
        )
    return f"This chat was with {was}; its next answer comes from {now}."


def reopened_text(was: str, now: str, context: int) -> str:
    return (
        f"This chat was with {was}. Its next answer comes from {now}, and it is counted "
        f"against that model's context ({context} tokens)."
    )


def install_chat(window: MainWindow) -> ChatFeature:
    feature = ChatFeature(window)
    window.add_feature(feature)
    return feature
