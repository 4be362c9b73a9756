"""The chat controller: the Qt face of the chat's state machine (session/chat_session.py).

`ChatSession` (no Qt) owns the Conversation, the backend and the state, and submits the chat's
jobs; this adapter gives it the window's JobRunners and turns what it tells into signals.
Views never talk to the worker. They call the controller (send, stop, regenerate, open a
model) and listen to its signals. The history (chatapp/gui/history) listens to
`sig_conversation_changed` and shows stored conversations with `set_conversation`.

Answers, loads and connections run on the window's engine runner (the comparison view submits
its jobs to the same one); conversions on the tool runner, so they never wait behind an answer.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from chatapp.engine.backend import BackendCard, Capabilities
from chatapp.engine.guards import DEFAULT_PRECISION
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.workers import JobRunner
from chatapp.session.chat_jobs import StatsSnapshot, TokenBatch
from chatapp.session.chat_session import ChatObserver, ChatSession, State
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.context import ContextReport
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.model_jobs import EngineHost, ModelSummary
from chatapp.session.remote_jobs import ConnectRequest

__all__ = ["ChatController", "GenerationOptions", "State"]


class ChatController(QObject):
    sig_state_changed = Signal(object)  # State
    sig_model_loaded = Signal(object)  # ModelSummary
    sig_load_failed = Signal(str)
    sig_answer_started = Signal(object)  # GenerationOptions
    sig_answer_delta = Signal(object)  # TokenBatch
    sig_stats = Signal(object)  # StatsSnapshot
    sig_warm_up = Signal(object)  # WarmUpProgress: the device's first runs, before the answer
    sig_answer_finished = Signal(object)  # ChatMessage (the stored answer)
    sig_answer_failed = Signal(str, str)  # message, prompt text given back to the input box
    sig_conversation_changed = Signal(object)  # Conversation: the hook for the history
    # What the model sees of the conversation (ContextReport), or None when it is not known
    # (another conversation was opened): after every answer request, and on measure_context().
    sig_context = Signal(object)
    sig_convert_progress = Signal(float, str)
    sig_convert_planned = Signal(str)  # what the conversion will take (disk, memory)
    sig_converted = Signal(object)  # Path
    sig_convert_failed = Signal(str)
    # The chat's backend changed: the BackendCard of one connected (a server), or None (back
    # to the local model). A failed connection comes as sig_load_failed.
    sig_backend_changed = Signal(object)

    def __init__(
        self,
        runner: JobRunner | None = None,
        host: EngineHost | None = None,
        parent: QObject | None = None,
        tools: JobRunner | None = None,
    ) -> None:
        super().__init__(parent)
        self.runner = runner or JobRunner("ChatWorkerThread", parent=self)
        self.tools = tools or self.runner  # conversions: off the engine's queue when given
        self.session = ChatSession(self.runner.watch, host, self.tools.watch)
        self.session.subscribe(_Signals(self))

    # ---- the session's state, read (and the conversation set) through the adapter ----------
    @property
    def host(self) -> EngineHost:
        return self.session.host

    @property
    def state(self) -> State:
        return self.session.state

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @conversation.setter
    def conversation(self, conversation: Conversation) -> None:
        self.session.conversation = conversation

    @property
    def model(self) -> ModelSummary | None:
        return self.session.model

    @property
    def remote(self) -> BackendCard | None:
        """The card of the backend answering instead of the local model (a server's)."""
        return self.session.remote

    @property
    def backend(self) -> ModelSummary | BackendCard | None:
        return self.session.backend

    @property
    def capabilities(self) -> Capabilities:
        return self.session.capabilities

    @property
    def busy(self) -> bool:
        return self.session.busy

    @property
    def streaming_text(self) -> str:
        return self.session.streaming_text

    @property
    def context(self) -> ContextReport | None:
        return self.session.context

    # ---- requests (session/chat_session.py says what each does) -----------------------------
    def open_model(
        self,
        folder: Path | str,
        device: str = "cpu",
        threads: int | None = None,
        mode: str = "",
        onnx_file: str | None = None,
        precision: str = DEFAULT_PRECISION,
    ) -> bool:
        return self.session.open_model(folder, device, threads, mode, onnx_file, precision)

    def connect_remote(self, request: ConnectRequest) -> bool:
        return self.session.connect_remote(request)

    def disconnect_remote(self) -> bool:
        return self.session.disconnect_remote()

    def send(self, text: str, options: GenerationOptions) -> bool:
        return self.session.send(text, options)

    def regenerate(self, options: GenerationOptions) -> bool:
        return self.session.regenerate(options)

    def reply_as_tool(self, text: str, options: GenerationOptions) -> bool:
        return self.session.reply_as_tool(text, options)

    def edit(self, index: int, text: str, options: GenerationOptions) -> bool:
        return self.session.edit(index, text, options)

    def can_continue(self) -> bool:
        return self.session.can_continue()

    def continue_answer(self, options: GenerationOptions) -> bool:
        return self.session.continue_answer(options)

    def select_version(self, index: int, version: int) -> bool:
        return self.session.select_version(index, version)

    def measure_context(self, options: GenerationOptions) -> bool:
        return self.session.measure_context(options)

    def stop(self) -> None:
        self.session.stop()

    def new_chat(self) -> bool:
        return self.session.new_chat()

    def set_conversation(self, conversation: Conversation) -> bool:
        return self.session.set_conversation(conversation)

    def convert_gguf(
        self, gguf: Path, out_dir: Path, graph: str = "auto", attention: str = "gqa"
    ) -> bool:
        return self.session.convert_gguf(gguf, out_dir, graph, attention)

    def cancel_conversion(self) -> None:
        self.session.cancel_conversion()

    # ---- shutdown -------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop every job and the threads; safe to call twice. True once they ended."""
        ended = self.runner.shutdown()
        ended = self.tools.shutdown() and ended
        self.host.engine = None  # the thread is over: free the session from here
        return ended


class _Signals(ChatObserver):
    """The session's events as the controller's signals (on the GUI thread, where the
    runners call the session back)."""

    def __init__(self, controller: ChatController) -> None:
        self.c = controller

    def state_changed(self, state: State) -> None:
        emit(self.c.sig_state_changed, state)

    def model_loaded(self, summary: ModelSummary) -> None:
        emit(self.c.sig_model_loaded, summary)

    def load_failed(self, message: str) -> None:
        emit(self.c.sig_load_failed, message)

    def answer_started(self, options: GenerationOptions) -> None:
        emit(self.c.sig_answer_started, options)

    def answer_delta(self, batch: TokenBatch) -> None:
        emit(self.c.sig_answer_delta, batch)

    def stats(self, snapshot: StatsSnapshot) -> None:
        emit(self.c.sig_stats, snapshot)

    def warm_up(self, progress: WarmUpProgress) -> None:
        emit(self.c.sig_warm_up, progress)

    def answer_finished(self, message: ChatMessage) -> None:
        emit(self.c.sig_answer_finished, message)

    def answer_failed(self, message: str, restored_prompt: str) -> None:
        emit(self.c.sig_answer_failed, message, restored_prompt)

    def conversation_changed(self, conversation: Conversation) -> None:
        emit(self.c.sig_conversation_changed, conversation)

    def context(self, report: ContextReport | None) -> None:
        emit(self.c.sig_context, report)

    def convert_progress(self, fraction: float, message: str) -> None:
        emit(self.c.sig_convert_progress, fraction, message)

    def convert_planned(self, line: str) -> None:
        emit(self.c.sig_convert_planned, line)

    def converted(self, folder: Path) -> None:
        emit(self.c.sig_converted, folder)

    def convert_failed(self, message: str) -> None:
        emit(self.c.sig_convert_failed, message)

    def backend_changed(self, card: BackendCard | None) -> None:
        emit(self.c.sig_backend_changed, card)
