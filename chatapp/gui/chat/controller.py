"""The chat controller: owns the Conversation and the worker thread, and keeps one state.

Views never talk to the worker. They call the controller (send, stop, regenerate, open a
model) and listen to its signals. A history store can be plugged in later by listening to
`sig_conversation_changed` and calling `set_conversation`.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.chat.worker import (
    AnswerResult,
    ConvertRequest,
    GenerateRequest,
    GenerationFailure,
    GenerationWorker,
    LoadRequest,
    ModelSummary,
    StatsSnapshot,
    TokenBatch,
    WorkerThread,
)
from chatapp.gui.common.qtcompat import emit
from chatapp.session.context import ContextReport, ContextRequest
from chatapp.session.conversation import AnswerFigures, ChatMessage, Conversation


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
    mode: str
    system_prompt: str = ""


class ChatController(QObject):
    sig_state_changed = Signal(object)  # State
    sig_model_loaded = Signal(object)  # ModelSummary
    sig_load_failed = Signal(str)
    sig_answer_started = Signal(object)  # GenerationOptions
    sig_answer_delta = Signal(object)  # TokenBatch
    sig_stats = Signal(object)  # StatsSnapshot
    sig_answer_finished = Signal(object)  # ChatMessage (the stored answer)
    sig_answer_failed = Signal(str, str)  # message, prompt text given back to the input box
    sig_conversation_changed = Signal(object)  # Conversation: the hook for a history store
    # What the model sees of the conversation (ContextReport), or None when it is not known
    # (another conversation was opened): after every answer request, and on measure_context().
    sig_context = Signal(object)
    sig_convert_progress = Signal(float, str)
    sig_converted = Signal(object)  # Path
    sig_convert_failed = Signal(str)

    # Requests to the worker: queued, because the worker lives in its own thread.
    sig_load_requested = Signal(object)
    sig_generate_requested = Signal(object)
    sig_convert_requested = Signal(object)
    sig_context_requested = Signal(object)

    def __init__(self, worker: GenerationWorker | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.conversation = Conversation()
        self.model: ModelSummary | None = None
        self.state = State.NO_MODEL
        self.streaming_text = ""
        self._request_id = 0
        self._active_id = 0
        self._pending_load: LoadRequest | None = None
        self._state_before_conversion = State.NO_MODEL
        self.context: ContextReport | None = None
        self._context_id = 0  # the request whose report describes the conversation shown
        # Messages an answer request replaced (regenerate, or resend of an unchanged question):
        # put back if the new answer fails before writing anything.
        self._replaced: list[ChatMessage] | None = None
        self._worker_thread = WorkerThread(worker)
        w = self._worker_thread.worker
        self.sig_load_requested.connect(w.load)
        self.sig_generate_requested.connect(w.generate)
        self.sig_convert_requested.connect(w.convert)
        self.sig_context_requested.connect(w.measure_context)
        w.sig_context.connect(self._on_context)
        w.sig_model_loaded.connect(self._on_model_loaded)
        w.sig_load_failed.connect(self._on_load_failed)
        w.sig_token.connect(self._on_token)
        w.sig_stats.connect(self._on_stats)
        w.sig_finished.connect(self._on_finished)
        w.sig_error.connect(self._on_error)
        w.sig_convert_progress.connect(self.sig_convert_progress)
        w.sig_converted.connect(self._on_converted)
        w.sig_convert_failed.connect(self._on_convert_failed)

    @property
    def worker(self) -> GenerationWorker:
        return self._worker_thread.worker

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
        self._pending_load = LoadRequest(
            Path(folder), device, threads, mode or "iobinding", onnx_file
        )
        self._set_state(State.LOADING)
        emit(self.sig_load_requested, self._pending_load)
        return True

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        self.model = summary
        _exempt_long_lived_objects()
        self._set_state(State.READY)
        emit(self.sig_model_loaded, summary)

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        # The worker keeps the previous engine when a new one fails to open.
        self._set_state(State.READY if self.model is not None else State.NO_MODEL)
        emit(self.sig_load_failed, message)

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

    def measure_context(self, options: GenerationOptions) -> bool:
        """Ask the worker what of this conversation the next answer would send (sig_context)."""
        if self.state is not State.READY or not self.conversation.messages:
            return False
        self._request_id += 1
        self._context_id = self._request_id
        emit(
            self.sig_context_requested,
            ContextRequest(
                self._context_id,
                tuple(self.conversation.engine_messages(options.system_prompt)),
                options.settings.max_new_tokens,
            ),
        )
        return True

    @Slot(object)
    def _on_context(self, report: ContextReport) -> None:
        if report.request_id == self._context_id:
            self.context = report
            emit(self.sig_context, report)

    def _forget_context(self) -> None:
        self._context_id = 0
        if self.context is not None:
            self.context = None
            emit(self.sig_context, None)

    def stop(self) -> None:
        if self.state is State.GENERATING:
            self.worker.request_stop(self._active_id)

    def new_chat(self) -> bool:
        if self.state is State.GENERATING:
            return False
        self.conversation.clear()
        self._forget_context()
        emit(self.sig_conversation_changed, self.conversation)
        return True

    def set_conversation(self, conversation: Conversation) -> bool:
        """Show another conversation (for the history list of a later issue)."""
        if self.state is State.GENERATING:
            return False
        self.conversation = conversation
        self._forget_context()
        emit(self.sig_conversation_changed, conversation)
        return True

    def _request(self, options: GenerationOptions) -> None:
        self._request_id += 1
        self._active_id = self._request_id
        self._context_id = self._active_id
        self.streaming_text = ""
        self._set_state(State.GENERATING)
        # The request first: the worker starts on the prompt while this thread redraws the
        # transcript and saves the question (sig_answer_started); its tokens queue up meanwhile.
        emit(
            self.sig_generate_requested,
            GenerateRequest(
                self._active_id,
                tuple(self.conversation.engine_messages(options.system_prompt)),
                options.settings,
                options.mode,
            ),
        )
        emit(self.sig_answer_started, options)

    @Slot(object)
    def _on_token(self, batch: TokenBatch) -> None:
        if batch.request_id != self._active_id:
            return
        self.streaming_text += batch.text
        emit(self.sig_answer_delta, batch)

    @Slot(object)
    def _on_stats(self, snapshot: StatsSnapshot) -> None:
        if snapshot.request_id == self._active_id:
            emit(self.sig_stats, snapshot)

    @Slot(object)
    def _on_finished(self, result: AnswerResult) -> None:
        if result.request_id != self._active_id:
            return
        self._replaced = None
        message = self.conversation.add_answer(result.text, AnswerFigures.from_stats(result.stats))
        self.streaming_text = ""
        self._set_state(State.READY)
        emit(self.sig_answer_finished, message)
        emit(self.sig_conversation_changed, self.conversation)

    @Slot(object)
    def _on_error(self, failure: GenerationFailure) -> None:
        if failure.request_id != self._active_id:
            return
        restored = ""
        replaced, self._replaced = self._replaced, None
        if failure.stats is not None and failure.stats.generated_tokens > 0:
            # Keep what was written before the fault, marked as failed.
            self.conversation.add_answer(
                self.streaming_text, AnswerFigures.from_stats(failure.stats, "error")
            )
        elif replaced is not None:
            # A regenerate that wrote nothing: the answer it was to replace comes back.
            self.conversation.messages.extend(replaced)
        else:
            # Nothing was answered: give the prompt back so the user can edit and resend it.
            restored = self.conversation.pop_pending_user() or ""
        self.streaming_text = ""
        self._set_state(State.READY if self.model is not None else State.NO_MODEL)
        emit(self.sig_answer_failed, failure.message, restored)
        emit(self.sig_conversation_changed, self.conversation)

    # ---- conversion -----------------------------------------------------------------------
    def convert_gguf(self, gguf: Path, out_dir: Path) -> bool:
        if self.busy:
            return False
        self._state_before_conversion = self.state
        self._set_state(State.CONVERTING)
        emit(self.sig_convert_requested, ConvertRequest(Path(gguf), Path(out_dir)))
        return True

    def cancel_conversion(self) -> None:
        self.worker.cancel_conversion()

    @Slot(object)
    def _on_converted(self, folder: Path) -> None:
        self._set_state(self._state_before_conversion)
        emit(self.sig_converted, folder)

    @Slot(str)
    def _on_convert_failed(self, message: str) -> None:
        self._set_state(self._state_before_conversion)
        emit(self.sig_convert_failed, message)

    # ---- shutdown -------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop the answer and the thread; safe to call twice. True once the thread ended."""
        ended = self._worker_thread.stop()
        self.worker.engine = None  # the thread is over: free the session from here
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
