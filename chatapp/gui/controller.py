"""The chat controller: owns the Conversation and the worker thread, and keeps one state.

Views never talk to the worker. They call the controller (send, stop, regenerate, open a
model) and listen to its signals. A history store can be plugged in later by listening to
`sig_conversation_changed` and calling `set_conversation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.conversation import AnswerFigures, Conversation
from chatapp.gui.qtcompat import emit
from chatapp.gui.worker import (
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
    sig_convert_progress = Signal(float, str)
    sig_converted = Signal(object)  # Path
    sig_convert_failed = Signal(str)

    # Requests to the worker: queued, because the worker lives in its own thread.
    sig_load_requested = Signal(object)
    sig_generate_requested = Signal(object)
    sig_convert_requested = Signal(object)

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
        self._worker_thread = WorkerThread(worker)
        w = self._worker_thread.worker
        self.sig_load_requested.connect(w.load)
        self.sig_generate_requested.connect(w.generate)
        self.sig_convert_requested.connect(w.convert)
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
        self, folder: Path | str, device: str = "cpu", threads: int | None = None, mode: str = ""
    ) -> bool:
        """Ask the worker to load a model; answers with sig_model_loaded or sig_load_failed."""
        if self.state in (State.GENERATING, State.CONVERTING, State.LOADING):
            return False
        self._pending_load = LoadRequest(Path(folder), device, threads, mode or "iobinding")
        self._set_state(State.LOADING)
        emit(self.sig_load_requested, self._pending_load)
        return True

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        self.model = summary
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
        self.conversation.drop_last_answer()
        self._request(options)
        return True

    def stop(self) -> None:
        if self.state is State.GENERATING:
            self.worker.request_stop(self._active_id)

    def new_chat(self) -> bool:
        if self.state is State.GENERATING:
            return False
        self.conversation.clear()
        emit(self.sig_conversation_changed, self.conversation)
        return True

    def set_conversation(self, conversation: Conversation) -> bool:
        """Show another conversation (for the history list of a later issue)."""
        if self.state is State.GENERATING:
            return False
        self.conversation = conversation
        emit(self.sig_conversation_changed, conversation)
        return True

    def _request(self, options: GenerationOptions) -> None:
        self._request_id += 1
        self._active_id = self._request_id
        self.streaming_text = ""
        self._set_state(State.GENERATING)
        emit(self.sig_answer_started, options)
        emit(
            self.sig_generate_requested,
            GenerateRequest(
                self._active_id,
                tuple(self.conversation.engine_messages(options.system_prompt)),
                options.settings,
                options.mode,
            ),
        )

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
        if failure.stats is not None and failure.stats.generated_tokens > 0:
            # Keep what was written before the fault, marked as failed.
            self.conversation.add_answer(
                self.streaming_text, AnswerFigures.from_stats(failure.stats, "error")
            )
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
