"""The chat controller: owns the Conversation, submits the chat's jobs, keeps one state.

Views never talk to the worker. They call the controller (send, stop, regenerate, open a
model) and listen to its signals. The history (chatapp/gui/history) listens to
`sig_conversation_changed` and shows stored conversations with `set_conversation`.

The jobs (chatapp/session/chat_jobs.py, model_jobs.py) run on the window's JobRunner and use
the window's one EngineHost; the comparison view submits its jobs to the same runner.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.engine.errors import DeviceFailure
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.session.chat_jobs import (
    AnswerResult,
    GenerateRequest,
    StatsSnapshot,
    TokenBatch,
    TokenItem,
    answer_figures,
    failure_stats,
    generate_job,
    measure_context_job,
)
from chatapp.session.context import ContextReport, ContextRequest
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.model_jobs import (
    ConvertPlan,
    ConvertRequest,
    EngineHost,
    LoadRequest,
    ModelSummary,
    Progress,
    convert_job,
    cpu_fallback_job,
    load_job,
)
from chatapp.session.remote_jobs import (
    ConnectRequest,
    RemoteSummary,
    connect_job,
    disconnect_job,
)


class State(Enum):
    NO_MODEL = "no-model"
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    CONVERTING = "converting"


@dataclass(frozen=True)
class GenerationOptions:
    """Everything the side panel decides for one answer, captured when it is requested."""

    settings: SamplingSettings
    mode: Mode
    system_prompt: str = ""
    json_schema: str | None = None  # the "JSON answer" option (chat_jobs.GenerateRequest)


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
    # The chat's backend changed: a RemoteSummary (connected to a server), or None (back to
    # the local model). A failed connection comes as sig_load_failed.
    sig_backend_changed = Signal(object)

    def __init__(
        self,
        runner: JobRunner | None = None,
        host: EngineHost | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.runner = runner or JobRunner("ChatWorkerThread", parent=self)
        self.host = host or EngineHost()
        self.conversation = Conversation()
        self.model: ModelSummary | None = None  # the local model
        self.remote: RemoteSummary | None = None  # the server answering instead, if any
        self.state = State.NO_MODEL
        self.streaming_text = ""
        self._answer: JobHandle | None = None
        self._conversion: JobHandle | None = None
        self._state_before_conversion = State.NO_MODEL
        self.context: ContextReport | None = None
        self._context_id = 0  # the job whose report describes the conversation shown
        # Messages an answer request replaced (regenerate, or resend of an unchanged question):
        # put back if the new answer fails before writing anything.
        self._replaced: list[ChatMessage] | None = None

    @property
    def backend(self) -> ModelSummary | RemoteSummary | None:
        """What answers the chat: the connected server, else the local model."""
        return self.remote if self.remote is not None else self.model

    @property
    def busy(self) -> bool:
        return self.state in (State.LOADING, State.GENERATING, State.CONVERTING)

    def _set_state(self, state: State) -> None:
        if state is not self.state:
            self.state = state
            emit(self.sig_state_changed, state)

    # ---- model ----------------------------------------------------------------------------
    def open_model(
        self,
        folder: Path | str,
        device: str = "cpu",
        threads: int | None = None,
        mode: str = "",
        onnx_file: str | None = None,
    ) -> bool:
        """Ask the worker to load a model; answers with sig_model_loaded or sig_load_failed."""
        if self.state in (State.GENERATING, State.CONVERTING, State.LOADING):
            return False
        request = LoadRequest(
            Path(folder), device, threads, Mode(mode or Mode.IOBINDING), onnx_file
        )
        self._set_state(State.LOADING)
        handle = self.runner.submit(load_job(self.host, request))
        handle.sig_finished.connect(self._on_model_loaded)
        handle.sig_errored.connect(self._on_load_failed)
        return True

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        self.model = summary
        _exempt_long_lived_objects()
        self._set_state(State.READY)
        emit(self.sig_model_loaded, summary)
        if self.remote is not None:
            self._set_remote(None)  # opening a local model ended the connection (load_job)

    @Slot(object)
    def _on_load_failed(self, error: JobError) -> None:
        # A failed load (or connection) keeps the previous backend.
        self._set_state(State.READY if self.backend is not None else State.NO_MODEL)
        emit(self.sig_load_failed, error.message)

    # ---- remote server (session/remote_jobs.py) --------------------------------------------
    def connect_remote(self, request: ConnectRequest) -> bool:
        """Chat with a server from the next answer on; answers with sig_backend_changed or
        sig_load_failed."""
        if self.busy:
            return False
        self._set_state(State.LOADING)
        handle = self.runner.submit(connect_job(self.host, request))
        handle.sig_finished.connect(self._on_connected)
        handle.sig_errored.connect(self._on_load_failed)
        return True

    def disconnect_remote(self) -> bool:
        """Back to the local model."""
        if self.remote is None or self.busy:
            return False
        self._set_remote(None)
        self.runner.submit(disconnect_job(self.host))  # before any next answer
        self._set_state(State.READY if self.model is not None else State.NO_MODEL)
        return True

    @Slot(object)
    def _on_connected(self, summary: RemoteSummary) -> None:
        self._set_remote(summary)
        self._set_state(State.READY)

    def _set_remote(self, summary: RemoteSummary | None) -> None:
        self.remote = summary
        self._forget_context()  # the transcript's token counts were the local model's
        emit(self.sig_backend_changed, summary)

    # ---- chat -----------------------------------------------------------------------------
    def send(self, text: str, options: GenerationOptions) -> bool:
        text = text.strip()
        if not text or self.state is not State.READY:
            return False
        self.conversation.add_user(text)
        self._request(options)
        return True

    def regenerate(self, options: GenerationOptions) -> bool:
        if self.state is not State.READY or not self.conversation.can_regenerate():
            return False
        if self.conversation.messages[-1].role == "assistant":
            self._replaced = [self.conversation.messages.pop()]
        # else: a question without an answer (restored after a crash): answer it now
        self._request(options)
        return True

    def edit(self, index: int, text: str, options: GenerationOptions) -> bool:
        """Give user message `index` the text `text` and answer it again: every later message
        goes. With unchanged text this regenerates from that question."""
        text = text.strip()
        messages = self.conversation.messages
        if (
            not text
            or self.state is not State.READY
            or not 0 <= index < len(messages)
            or messages[index].role != "user"
        ):
            return False
        later = messages[index + 1 :]
        del messages[index + 1 :]
        if messages[index].content == text:
            self._replaced = later or None
        else:
            messages[index].content = text
        self._request(options)
        return True

    def select_version(self, index: int, version: int) -> bool:
        """Show version `version` of answer `index` (Regenerate keeps the earlier answers);
        the chat then goes on from that one: it is what the model sees."""
        messages = self.conversation.messages
        if self.state is State.GENERATING or not 0 <= index < len(messages):
            return False
        if not messages[index].select(version):
            return False
        emit(self.sig_conversation_changed, self.conversation)
        return True

    def measure_context(self, options: GenerationOptions) -> bool:
        """Ask the worker what of this conversation the next answer would send (sig_context)."""
        if self.state is not State.READY or not self.conversation.messages:
            return False
        request = ContextRequest(
            tuple(self.conversation.engine_messages(options.system_prompt)),
            options.settings.max_new_tokens,
        )
        handle = self.runner.submit(measure_context_job(self.host, request))
        self._context_id = handle.request_id
        handle.sig_finished.connect(self._on_context)  # errors: the log has them
        return True

    @Slot(object)
    def _on_context(self, report: ContextReport | None) -> None:
        if report is not None and report.request_id == self._context_id:
            self.context = report
            emit(self.sig_context, report)

    def _forget_context(self) -> None:
        self._context_id = 0
        if self.context is not None:
            self.context = None
            emit(self.sig_context, None)

    def stop(self) -> None:
        if self.state is State.GENERATING and self._answer is not None:
            self._answer.stop()

    def new_chat(self) -> bool:
        if self.state is State.GENERATING:
            return False
        self.conversation.clear()
        self._forget_context()
        emit(self.sig_conversation_changed, self.conversation)
        return True

    def set_conversation(self, conversation: Conversation) -> bool:
        """Show another conversation (one the history list opened)."""
        if self.state is State.GENERATING:
            return False
        self.conversation = conversation
        self._forget_context()
        emit(self.sig_conversation_changed, conversation)
        return True

    def _request(self, options: GenerationOptions) -> None:
        self.streaming_text = ""
        self._set_state(State.GENERATING)
        # The request first: the worker starts on the prompt while this thread redraws the
        # transcript and saves the question (sig_answer_started); its tokens queue up meanwhile.
        request = GenerateRequest(
            tuple(self.conversation.engine_messages(options.system_prompt)),
            options.settings,
            options.mode,
            options.json_schema,
        )
        handle = self._answer = self.runner.submit(generate_job(self.host, request))
        self._context_id = handle.request_id
        handle.sig_yielded.connect(self._on_yielded)
        handle.sig_finished.connect(self._on_finished)
        handle.sig_errored.connect(self._on_error)
        emit(self.sig_answer_started, options)

    @Slot(object)
    def _on_yielded(self, batch: YieldedBatch) -> None:
        if self._answer is None or batch.request_id != self._answer.request_id:
            return
        tokens = [item for item in batch.items if isinstance(item, TokenItem)]
        for item in batch.items:
            if isinstance(item, ContextReport):
                self._on_context(item)
            elif isinstance(item, WarmUpProgress):
                emit(self.sig_warm_up, item)
        if tokens:
            delta = TokenBatch.join(batch.request_id, tokens)
            self.streaming_text += delta.text
            emit(self.sig_answer_delta, delta)
        if isinstance(batch.snapshot, StatsSnapshot):
            emit(self.sig_stats, batch.snapshot)

    @Slot(object)
    def _on_finished(self, result: AnswerResult) -> None:
        request_id = self._answer.request_id if self._answer is not None else 0
        self._answer = None
        replaced, self._replaced = self._replaced, None
        # The final figures (a chatapp server sends its own with the last chunk).
        emit(self.sig_stats, StatsSnapshot.of(request_id, result.stats))
        # A new answer to the same question keeps the one(s) it replaces as other versions.
        message = self.conversation.add_answer(
            result.text, answer_figures(result.stats), replaced[0] if replaced else None
        )
        self.streaming_text = ""
        self._set_state(State.READY)
        emit(self.sig_answer_finished, message)
        emit(self.sig_conversation_changed, self.conversation)

    @Slot(object)
    def _on_error(self, error: JobError) -> None:
        self._answer = None
        restored = ""
        replaced, self._replaced = self._replaced, None
        stats = failure_stats(error.partial)
        if stats is not None and stats.generated_tokens > 0:
            # Keep what was written before the fault, marked as failed (the answer it was to
            # replace stays one of its versions).
            self.conversation.add_answer(
                self.streaming_text,
                answer_figures(stats, "error"),
                replaced[0] if replaced else None,
            )
        elif replaced is not None:
            # A regenerate that wrote nothing: the answer it was to replace comes back.
            self.conversation.messages.extend(replaced)
        else:
            # Nothing was answered: give the prompt back so the user can edit and resend it.
            restored = self.conversation.pop_pending_user() or ""
        self.streaming_text = ""
        self._set_state(State.READY if self.backend is not None else State.NO_MODEL)
        emit(self.sig_answer_failed, error.message, restored)
        emit(self.sig_conversation_changed, self.conversation)
        if issubclass(error.kind, DeviceFailure):
            # The same model on the CPU, queued before any next answer.
            fallback = cpu_fallback_job(self.host, f"{error.detail} Running on the CPU.")
            handle = self.runner.submit(fallback)
            handle.sig_finished.connect(self._on_model_loaded)
            handle.sig_errored.connect(self._on_load_failed)

    # ---- conversion -----------------------------------------------------------------------
    def convert_gguf(self, gguf: Path, out_dir: Path) -> bool:
        if self.busy:
            return False
        self._state_before_conversion = self.state
        self._set_state(State.CONVERTING)
        handle = self._conversion = self.runner.submit(
            convert_job(ConvertRequest(Path(gguf), Path(out_dir)))
        )
        handle.sig_yielded.connect(self._on_convert_progress)
        handle.sig_finished.connect(self._on_converted)
        handle.sig_errored.connect(lambda error: self._on_convert_failed(error.message))
        handle.sig_aborted.connect(self._on_convert_failed)
        return True

    def cancel_conversion(self) -> None:
        if self._conversion is not None:
            self._conversion.stop()

    @Slot(object)
    def _on_convert_progress(self, batch: YieldedBatch) -> None:
        for plan in (item for item in batch.items if isinstance(item, ConvertPlan)):
            emit(self.sig_convert_planned, plan.line)
        progress = [item for item in batch.items if isinstance(item, Progress)]
        if progress:
            emit(self.sig_convert_progress, progress[-1].fraction, progress[-1].message)

    @Slot(object)
    def _on_converted(self, folder: Path) -> None:
        self._conversion = None
        self._set_state(self._state_before_conversion)
        emit(self.sig_converted, folder)

    @Slot(str)
    def _on_convert_failed(self, message: str) -> None:
        self._conversion = None
        self._set_state(self._state_before_conversion)
        emit(self.sig_convert_failed, message)

    # ---- shutdown -------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop every job and the thread; safe to call twice. True once the thread ended."""
        ended = self.runner.shutdown()
        self.host.engine = None  # the thread is over: free the session from here
        return ended


def _exempt_long_lived_objects() -> None:
    """A full garbage collection walks every object the app keeps (~100k: Qt wrappers, the
    tokenizer, the engine) and holds the GIL for 60-170 ms, freezing the window if it falls in
    the middle of an answer. Collect once now, at load time, then leave those objects out of
    later collections. What the previous load exempted is put back first, so that a model
    replaced since then can still be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
