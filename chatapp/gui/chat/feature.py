"""The chat as a feature of the window: it builds and owns the chat's controller, its view
(transcript and prompt box) and its side panel, which the frame places (MainWindow knows this
as a `ChatFace`, gui/window/chat_face.py). What the prompt box asks (send, regenerate, stop,
another version of an answer) goes to the controller, and what the controller tells of an
answer (started, tokens, figures, finished, failed) goes to the transcript and the side panel;
the chat's state sets the window's controls. Loading a model is gui/chat/loading.py.

Other features reach the chat through `chat_of(window)`: its controller, `options()`,
`system_prompt()`, `loop_mode()`, and the declared names of `chat_view` and `side_panel`
(tests/test_architecture.py, CHAT_VIEW_API and SIDE_PANEL_API), never their inner widgets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Slot

from chatapp.datadir import models_dir
from chatapp.engine.devices import CPU
from chatapp.engine.modes import Mode
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.controller import ChatController, GenerationOptions, State
from chatapp.gui.chat.loading import ModelLoading
from chatapp.gui.chat.regenerate_note import VARIED_PRESET, same_answer
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.chat.view import ChatView
from chatapp.session import formatting as fmt
from chatapp.session import prompt_style as ps
from chatapp.session.chat_jobs import StatsSnapshot, TokenBatch
from chatapp.session.chat_settings import ChatSettings
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.model_jobs import ModelSummary, device_probe_job
from chatapp.store.model_library import library_folder

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow

HINTS = {
    State.NO_MODEL: "Open a model (File menu) to start.",
    State.LOADING: "Loading the model…",
    State.READY: "Enter sends · Shift+Enter: new line",
    State.GENERATING: "Writing… Esc or Stop ends the answer.",
    State.CONVERTING: "Converting the GGUF file…",
}


class ChatFeature(QObject):
    """`chat_of(window)` (or `window.feature(ChatFeature)`) finds it."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self._banner_at_start = 0  # the banner's serial when the answer started
        self.controller = c = ChatController(window.runner, window.host, window, window.tools)
        self.chat_view = view = ChatView(window)
        self.side_panel = panel = SidePanel(window)
        panel.restore(window.settings)
        probe = window.tools.submit(device_probe_job())
        probe.sig_finished.connect(panel.set_devices)
        probe.sig_errored.connect(lambda _error: panel.set_devices([CPU]))  # logged
        view.sig_new_chat.connect(self.new_chat)
        c.backend_session.events.state_changed.connect(self._on_state_changed)
        self.loading = ModelLoading(window, c, panel)
        c.backend_session.events.backend_changed.connect(
            lambda _remote: self._on_state_changed(c.backend_session.state)
        )
        c.chat.events.conversation_changed.connect(self._on_shown_conversation)
        view.sig_send.connect(self._on_send)
        view.sig_stop.connect(c.chat.stop)
        view.sig_regenerate.connect(self._on_regenerate)
        view.tool_reply.sig_reply.connect(self._on_tool_reply)
        view.sig_continue.connect(self._on_continue)
        c.backend_session.events.state_changed.connect(self._show_continue)
        c.chat.events.conversation_changed.connect(self._show_continue)
        view.regenerate_note.sig_regenerate.connect(self._regenerate_varied)
        view.sig_copied.connect(self._on_copied)
        # Transcript: versions of an answer, copied code, where a hovered link goes.
        view.sig_version_requested.connect(c.chat.select_version)
        view.sig_code_copied.connect(lambda: window.notify("Copied the code.", 3000))
        view.sig_status.connect(lambda text: window.notify(text, 8000))
        c.chat.events.answer_started.connect(self._on_answer_started)
        c.chat.events.answer_delta.connect(self._on_answer_delta)
        c.chat.events.stats.connect(self._on_stats)
        c.chat.events.warm_up.connect(self._on_warm_up)
        c.chat.events.answer_finished.connect(self._on_answer_finished)
        c.chat.events.answer_failed.connect(self._on_answer_failed)
        # Which model a chat was with: a chat is never continued unnoticed by another one.
        self._shown: Conversation | None = None
        self._shown_id: int | None = None  # its stored id, and whether it had messages: a
        self._shown_had_messages = False  # chat cleared for a new one is another chat
        self._loaded_folder: str | None = None  # the model whose defaults the panel shows
        c.backend_session.events.model_loaded.connect(self._on_model_loaded)
        # Text continuation is told where the text is typed, not only once in the banner.
        self._chat_placeholder = view.prompt_edit.placeholderText()
        self._empty_chat = view.transcript.placeholderText()
        panel.sampling_box.prompt.sig_changed.connect(self._show_prompt_choice)
        tools = panel.sampling_box.tools
        tools.sig_refused.connect(lambda text: window.show_message(text, cause="tools"))
        # Tools loaded (or cleared) later: the refusal is old.
        tools.sig_changed.connect(lambda: window.dismiss_message(cause="tools"))
        tools.sig_changed.connect(self._show_must_call)
        c.backend_session.events.model_loaded.connect(self._show_prompt_choice)
        # The chat's own settings first, then what follows from its prompt choice.
        c.chat.events.conversation_changed.connect(self._on_conversation_changed)
        c.chat.events.conversation_changed.connect(self._show_prompt_choice)

    # ---- what other features and the frame use ----------------------------------------------
    @property
    def conversation(self) -> Conversation:
        return self.controller.chat.conversation

    @property
    def model_dir(self) -> Path | None:
        """The model folder last asked for."""
        return self.loading.model_dir

    def open_model(
        self, folder: Path | str, device: str | None = None, onnx_file: str | None = None
    ) -> bool:
        """Load `folder` in the worker (returns at once); see ModelLoading.open_model."""
        return self.loading.open_model(folder, device, onnx_file)

    def options(self) -> GenerationOptions:
        """The sampling, mode and system prompt the side panel holds for the next answer."""
        return self.side_panel.options()

    def system_prompt(self) -> str:
        """The chat's system prompt as typed (the comparison uses it too)."""
        return self.side_panel.system_prompt_box.text()

    def loop_mode(self) -> Mode:
        """The loop the side panel asks for (the server of Serve this model defaults to it)."""
        return self.side_panel.mode()

    def device(self) -> str:
        """The device the side panel asks for."""
        return self.side_panel.device()

    def preselect(self, mode: str | None = None, device: str | None = None) -> None:
        """The command line's loop and device, shown for this run, not saved."""
        self.side_panel.preselect(mode, device)

    def set_hint(self, text: str) -> None:
        """The line under the prompt box (what Enter does, what is under way)."""
        self.chat_view.set_hint(text)

    @Slot()
    def new_chat(self) -> None:
        c = self.controller
        if c.backend_session.state is State.GENERATING or not self.window.may_leave_chat(
            "new chat"
        ):
            return
        if c.chat.new_chat():
            self.side_panel.start_answer()
            total = (
                c.backend_session.backend.max_context
                if c.backend_session.backend is not None
                else 0
            )
            self.side_panel.set_context(0, total)

    def refresh_controls(self) -> None:
        self._on_state_changed(self.controller.backend_session.state)

    def focus(self) -> None:
        self.chat_view.prompt_edit.setFocus()

    def about_rows(self) -> list[tuple[str, str]]:
        c, model = self.controller, self.controller.backend_session.model
        selector = self.side_panel.device_selector  # the devices that started a session here
        labels = [
            str(selector.itemData(i, Qt.ItemDataRole.ToolTipRole)) for i in range(selector.count())
        ]
        rows = [("Devices here", ", ".join(labels))] if labels else []
        if c.backend_session.remote is not None:  # a backend connected instead: its card
            rows.append(("Answers from", c.backend_session.remote.description))
        if model is None:
            return [*rows, ("Model", "none loaded")]
        return [
            *rows,
            ("Model", model.description),
            ("Folder", str(model.folder)),
            ("Device", model.device_label),
            ("Context allocated", str(model.max_context)),
        ]

    def shutdown(self) -> None:
        self.controller.shutdown()  # both runners

    # ---- the chat's state in the window's controls ----------------------------------------
    @Slot(object)
    def _on_state_changed(self, state: State) -> None:
        window = self.window
        if any(busy() for busy in window.busy_checks):
            state = State.GENERATING  # the chat waits for the comparison, like for an answer
        ready, generating = state is State.READY, state is State.GENERATING
        busy = state in (State.LOADING, State.CONVERTING)
        self.chat_view.set_actions(
            can_send=ready,
            can_stop=generating,
            can_regenerate=ready and self.conversation.can_regenerate(),
            can_new_chat=not generating,
        )
        self.side_panel.set_generating(generating)
        if not generating:
            self.side_panel.set_loading(busy)
        m = window.menus
        for action in (m.open_folder_action, m.open_gguf_action, m.recent_menu):
            action.setEnabled(not (generating or busy))
        m.new_chat_action.setEnabled(not generating)
        if busy and not window.busy.running:
            window.busy.start("Converting" if state is State.CONVERTING else "Opening")
        elif not busy:
            window.busy.stop()
        self.chat_view.set_hint(HINTS[state])

    @Slot(object)
    def _on_shown_conversation(self, conversation: Conversation) -> None:
        self.chat_view.show_messages(conversation.messages)
        self._on_state_changed(self.controller.backend_session.state)

    # ---- answers ----------------------------------------------------------------------------
    @Slot(str)
    def _on_send(self, text: str) -> None:
        if self.controller.chat.send(text, self.options()):
            self.chat_view.regenerate_note.offer(None)  # it told of the answer before
            self.chat_view.clear_sent_prompt()
            self.chat_view.prompt_edit.setFocus()  # after a click on Send, keep typing
        elif self.controller.backend_session.state is State.NO_MODEL:
            self.window.show_message(
                "No model is loaded: open a model folder from the File menu.", "info"
            )

    @Slot(str)
    def _on_tool_reply(self, text: str) -> None:
        """The user's text as the pending call's result; the model goes on."""
        if self.controller.chat.reply_as_tool(text, self.options()):
            self.chat_view.tool_reply.edit.clear()

    @Slot()
    def _on_regenerate(self) -> None:
        options = self.options()
        if self.controller.chat.regenerate(options):
            # Greedy or a fixed seed writes the same text again: say why, offer a way out.
            preset = self.side_panel.sampling_box.preset()
            self.chat_view.regenerate_note.offer(same_answer(options.settings, preset))

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        """A chat with messages from another model is left for a new one; a chat that is
        kept keeps its own settings (its sampling and prompt choice, not the model's
        defaults: "Load X" on a reopened chat's banner changes its model, nothing else)."""
        conv = self.controller.chat.conversation
        was = conv.model
        previous, self._loaded_folder = self._loaded_folder, str(summary.folder)
        switch = None
        if conv.messages and was is not None and was != summary.name and previous is None:
            # The window's first model, under the chat a restart reopened: the chat stays, as
            # it was left, and says whose it was (as opening it from the list does).
            self._say_reopened(conv)
        elif conv.messages and was is not None and was != summary.name:
            self.new_chat()  # asks first when the chat is not saved
            started = not self.controller.chat.conversation.messages
            switch = model_switch_text(was, summary.name, started=started)
        settings = self.controller.chat.conversation.settings
        if previous != self._loaded_folder and settings is not None and settings.known:
            self._restore(settings)
        if not summary.has_chat_template and not summary.fallback_reason:
            # Said the moment such a model opens, under the choice the chat now has.
            notice = ps.base_model_notice(self.side_panel.sampling_box.prompt.choice())
            self.window.show_message(notice if switch is None else f"{switch} {notice}", "info")
        elif switch is not None:
            self.window.show_message(switch, "info")

    @Slot(object)
    def _on_conversation_changed(self, conversation: Conversation) -> None:
        cleared = self._shown_had_messages and not conversation.messages
        replaced = self._shown_id is not None and conversation.id != self._shown_id
        same = conversation is self._shown and not cleared and not replaced
        self._shown_id, self._shown_had_messages = conversation.id, bool(conversation.messages)
        if same:
            return
        self._shown = conversation  # another chat is shown (opened from the list, or new)
        self.chat_view.regenerate_note.offer(None)  # it told of another chat's answer
        settings = conversation.settings
        if settings is not None and settings.known:  # a chat from before: the window's stay
            self._restore(settings)
        self._say_reopened(conversation)

    def _say_reopened(self, conversation: Conversation) -> None:
        """A chat from another model shown: whose it was, and a button that loads that one
        when it is in the models folder."""
        settings = conversation.settings
        model = self.controller.backend_session.model
        was = conversation.model or (settings.model if settings is not None else None)
        # Only where the local model answers: a connected backend's chats name its model.
        local = self.controller.backend_session.remote is None
        if local and model is not None and was and was != model.name:
            folder = library_folder(models_dir(), was)
            action = None if folder is None else (f"Load {was}", lambda: self.open_model(folder))
            text = reopened_text(was, model.name, model.max_context)
            self.window.show_message(text, "info", action=action)

    def _restore(self, settings: ChatSettings) -> None:
        """A chat opened again gets its sampling, prompt style, stops and system prompt back."""
        box = self.side_panel.sampling_box
        if settings.sampling is not None:
            box.set_chat_values(settings.sampling)
        if settings.choice is not None:
            box.prompt.set_state(settings.choice, settings.user_stops)
        box.tools.set_state(settings.tools, settings.tool_choice)
        self._show_must_call()
        prompt_box = self.side_panel.system_prompt_box
        if prompt_box.text() != settings.system_prompt:
            prompt_box.set_text(settings.system_prompt)
            prompt_box.flush()

    @Slot()
    @Slot(object)
    def _show_prompt_choice(self, _what: object = None) -> None:
        choice = self.side_panel.sampling_box.prompt.choice()
        continuing = choice == ps.CONTINUE
        banner = self.window.shown_message()
        text, level = banner if banner is not None else ("", "")
        shown = next((n for n in ps.BASE_MODEL_NOTICES if n in text), None)
        if shown is not None:  # the base model's notice follows the choice too
            now = text.replace(shown, ps.base_model_notice(choice))
            if now != text:
                self.window.show_message(now, level)
        placeholder = ps.CONTINUE_PLACEHOLDER if continuing else self._chat_placeholder
        self.chat_view.prompt_edit.setPlaceholderText(placeholder)
        empty = ps.CONTINUE_EMPTY_CHAT if continuing else self._empty_chat
        self.chat_view.transcript.setPlaceholderText(empty)

    @Slot()
    def _show_must_call(self) -> None:
        tools = self.side_panel.sampling_box.tools
        must = bool(tools.tools()) and tools.choice() == "required"
        self.chat_view.tool_reply.set_must_call(must)

    @Slot()
    def _on_continue(self) -> None:
        self.controller.chat.continue_answer(self.options())

    @Slot(object)
    def _show_continue(self, _what: object = None) -> None:
        """Continue is offered under an answer the token limit cut, while nothing runs."""
        idle = not any(busy() for busy in self.window.busy_checks)  # e.g. a comparison runs
        self.chat_view.continue_button.setVisible(idle and self.controller.chat.can_continue())

    @Slot(str)
    def _regenerate_varied(self, fix: str) -> None:
        box = self.side_panel.sampling_box
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
        self.chat_view.show_messages(self.controller.chat.conversation.messages)
        self.chat_view.begin_answer()
        self.side_panel.begin_answer()

    @Slot(object)
    def _on_answer_delta(self, batch: TokenBatch) -> None:
        self.chat_view.append_answer(batch.text)
        self.side_panel.add_latencies(batch.first_index, batch.latencies_s)

    @Slot(object)
    def _on_stats(self, snapshot: StatsSnapshot) -> None:
        self.side_panel.show_stats(snapshot.figures)

    @Slot(object)
    def _on_warm_up(self, progress: WarmUpProgress) -> None:
        self.side_panel.show_warm_up(progress)
        self.chat_view.set_hint(
            "Writing… Esc or Stop ends the answer."
            if progress.finished
            else "Preparing the device… (first answer only)"
        )

    @Slot(object)
    def _on_answer_finished(self, message: ChatMessage) -> None:
        self.chat_view.forget_sent_prompt()
        self.side_panel.finish_answer(message.figures)
        before = message.others[message.version - 1] if message.version > 0 else None
        if before is not None and (message.content, message.tool_calls) != (
            before.content,
            before.tool_calls,
        ):
            self.chat_view.regenerate_note.offer(None)  # not the same answer after all
        if message.figures is None or message.figures.finish_reason != "error":
            self.window.dismiss_message(failures_before=self._banner_at_start)
        if message.figures is not None:
            self.window.notify(fmt.figures_line(message.figures, tokens=False), 10000)

    @Slot(str, str)
    def _on_answer_failed(self, message: str, restored_prompt: str) -> None:
        if restored_prompt:
            self.chat_view.give_back_prompt(restored_prompt)
        self.side_panel.finish_answer(None)
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
    """What MainWindow's `chat` argument is: the chat, built in the frame and registered."""
    feature = ChatFeature(window)
    window.add_feature(feature)
    return feature


def chat_of(window: MainWindow) -> ChatFeature:
    """The window's chat (install_chat built it before any other feature)."""
    chat = window.chat
    assert isinstance(chat, ChatFeature), "the window's chat is built by install_chat"
    return chat
