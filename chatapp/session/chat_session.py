"""The chat's state machine without Qt: one Conversation, one backend, one state.

`ChatSession` owns what the chat is (the conversation, the local model, the remote server
answering instead, the state) and asks for work through a `Submit` (running.py): answers,
loads, connections and context measures go to the engine's worker; conversions go to a
second one (`submit_tool`), so they never wait behind an answer. What happens comes back to
the observers (`ChatObserver`, plain method calls on the thread that submitted), which the
window's ChatController turns into Qt signals (gui/chat/controller.py).

State: NO_MODEL -> LOADING -> READY <-> GENERATING; CONVERTING from READY or NO_MODEL and back
to where it came from. Nothing is asked of a worker while a request of the same kind is under
way (`busy`), so the observers see every state change in order.
"""

from __future__ import annotations

import gc
from enum import Enum
from pathlib import Path

from chatapp.engine.backend import BackendCard, Capabilities
from chatapp.engine.engine import LOCAL_CAPABILITIES
from chatapp.engine.errors import DeviceFailure
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.guards import DEFAULT_PRECISION
from chatapp.engine.modes import Mode
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.session.chat_jobs import (
    AnswerResult,
    StatsSnapshot,
    TokenBatch,
    TokenItem,
    failed_figures,
    failure_stats,
    measure_context_job,
    measured_request,
    window_job,
)
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.context import ContextReport
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.jobs import JobError
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
    named_figures,
)
from chatapp.session.remote_jobs import ConnectRequest, connect_job, disconnect_job
from chatapp.session.running import JobWatcher, RunningJob, Submit, YieldedBatch


class State(Enum):
    NO_MODEL = "no-model"
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    CONVERTING = "converting"


class ChatObserver:
    """What a ChatSession tells; override what you listen to (the rest does nothing)."""

    def state_changed(self, state: State) -> None: ...
    def model_loaded(self, summary: ModelSummary) -> None: ...
    def load_failed(self, message: str) -> None: ...  # a load or a connection
    def answer_started(self, options: GenerationOptions) -> None: ...
    def answer_delta(self, batch: TokenBatch) -> None: ...
    def stats(self, snapshot: StatsSnapshot) -> None: ...
    # The device's first runs before an answer (engine/warm_up.py), not counted in its figures.
    def warm_up(self, progress: WarmUpProgress) -> None: ...
    def answer_finished(self, message: ChatMessage) -> None: ...
    def answer_failed(self, message: str, restored_prompt: str) -> None: ...
    def conversation_changed(self, conversation: Conversation) -> None: ...
    # What the model sees of the conversation, or None when it is not known (another
    # conversation, another backend): after every answer request, and on measure_context().
    def context(self, report: ContextReport | None) -> None: ...
    def convert_progress(self, fraction: float, message: str) -> None: ...
    def convert_planned(self, line: str) -> None: ...
    def converted(self, folder: Path) -> None: ...
    def convert_failed(self, message: str) -> None: ...
    # The card of a backend connected instead of the local model (a server), or None (back
    # to the local model).
    def backend_changed(self, card: BackendCard | None) -> None: ...


class ChatSession:
    def __init__(
        self, submit: Submit, host: EngineHost | None = None, submit_tool: Submit | None = None
    ) -> None:
        self.submit = submit  # the engine's worker: one job at a time
        self.submit_tool = submit_tool or submit  # work that never touches the engine
        self.host = host or EngineHost()
        self.observers: list[ChatObserver] = []
        self.conversation = Conversation()
        self.model: ModelSummary | None = None  # the local model
        # The card of the backend answering instead (a server's), if any.
        self.remote: BackendCard | None = None
        self.state = State.NO_MODEL
        self.streaming_text = ""
        self.context: ContextReport | None = None
        self._answer: RunningJob | None = None
        self._conversion: RunningJob | None = None
        self._state_before_conversion = State.NO_MODEL
        self._context_id = 0  # the job whose report describes the conversation shown
        # Messages an answer request replaced (regenerate, or resend of an unchanged question):
        # put back if the new answer fails before writing anything.
        self._replaced: list[ChatMessage] | None = None
        self._continued: ChatMessage | None = None  # the answer Continue goes on with

    def subscribe(self, observer: ChatObserver) -> None:
        self.observers.append(observer)

    @property
    def backend(self) -> ModelSummary | BackendCard | None:
        """What answers the chat: the connected backend's card, else the local model."""
        return self.remote if self.remote is not None else self.model

    @property
    def capabilities(self) -> Capabilities:
        """What the backend answering now can do (a model run here: everything)."""
        return self.remote.capabilities if self.remote is not None else LOCAL_CAPABILITIES

    @property
    def busy(self) -> bool:
        return self.state in (State.LOADING, State.GENERATING, State.CONVERTING)

    def _set_state(self, state: State) -> None:
        if state is not self.state:
            self.state = state
            for o in list(self.observers):
                o.state_changed(state)

    def _changed(self) -> None:
        for o in list(self.observers):
            o.conversation_changed(self.conversation)

    # ---- model ----------------------------------------------------------------------------
    def open_model(
        self,
        folder: Path | str,
        device: str = "cpu",
        threads: int | None = None,
        mode: str = "",
        onnx_file: str | None = None,
        precision: str = DEFAULT_PRECISION,
    ) -> bool:
        """Ask the worker to load a model; answers with model_loaded or load_failed."""
        if self.busy:
            return False
        mode_ = Mode(mode or Mode.IOBINDING)
        request = LoadRequest(Path(folder), device, threads, mode_, onnx_file, precision)
        self._set_state(State.LOADING)
        self.submit(load_job(self.host, request), self._load_watcher())
        return True

    def _load_watcher(self) -> JobWatcher:
        return JobWatcher(on_finished=self._on_model_loaded, on_errored=self._on_load_failed)

    def _on_model_loaded(self, summary: ModelSummary) -> None:
        self.model = summary
        _exempt_long_lived_objects()
        self._set_state(State.READY)
        for o in list(self.observers):
            o.model_loaded(summary)
        if self.remote is not None:
            self._set_remote(None)  # opening a local model ended the connection (load_job)

    def _on_load_failed(self, error: JobError) -> None:
        # A failed load (or connection) keeps the previous backend.
        self._set_state(State.READY if self.backend is not None else State.NO_MODEL)
        for o in list(self.observers):
            o.load_failed(error.message)

    # ---- remote server (remote_jobs.py) ----------------------------------------------------
    def connect_remote(self, request: ConnectRequest) -> bool:
        """Chat with a server from the next answer on; answers with backend_changed or
        load_failed."""
        if self.busy:
            return False
        self._set_state(State.LOADING)
        watcher = JobWatcher(on_finished=self._on_connected, on_errored=self._on_load_failed)
        self.submit(connect_job(self.host, request), watcher)
        return True

    def disconnect_remote(self) -> bool:
        """Back to the local model."""
        if self.remote is None or self.busy:
            return False
        self._set_remote(None)
        self.submit(disconnect_job(self.host), JobWatcher())  # before any next answer
        self._set_state(State.READY if self.model is not None else State.NO_MODEL)
        return True

    def _on_connected(self, card: BackendCard) -> None:
        self._set_remote(card)
        self._set_state(State.READY)

    def _set_remote(self, card: BackendCard | None) -> None:
        self.remote = card
        self._forget_context()  # the transcript's token counts were the local model's
        for o in list(self.observers):
            o.backend_changed(card)

    # ---- chat -----------------------------------------------------------------------------
    def send(self, text: str, options: GenerationOptions) -> bool:
        text = text.strip()
        if not text or self.state is not State.READY:
            return False
        self.conversation.add_user(text)
        self._request(options)
        return True

    def reply_as_tool(self, text: str, options: GenerationOptions) -> bool:
        """The user's text as the result of the call the chat waits for; once every call of
        the answer has its result, the model goes on."""
        call = self.conversation.pending_call()
        if call is None or self.state is not State.READY:
            return False
        self.conversation.add_tool_result(call, text)
        if self.conversation.pending_call() is None:
            self._request(options)
        else:
            self._changed()
        return True

    def regenerate(self, options: GenerationOptions) -> bool:
        if self.state is not State.READY or not self.conversation.can_regenerate():
            return False
        if self.conversation.messages[-1].role == "assistant":
            self._replaced = [self.conversation.messages.pop()]
        # else: a question without an answer (restored after a crash): answer it now
        self._request(options)
        return True

    def can_continue(self) -> bool:
        """The last answer stopped at the token limit, and the backend can go on with it."""
        messages = self.conversation.messages
        last = messages[-1] if messages else None
        return (
            self.state is State.READY
            and self.capabilities.continues_answers
            and last is not None
            and last.role == "assistant"
            and last.figures is not None
            and last.figures.finish_reason == "length"
        )

    def continue_answer(self, options: GenerationOptions) -> bool:
        """Go on with the last answer where the token limit cut it: the same answer grows."""
        if not self.can_continue():
            return False
        self._continued = self.conversation.messages[-1]
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
        self._changed()
        return True

    def measure_context(self, options: GenerationOptions) -> bool:
        """Ask the worker what of this conversation the next answer would send (context)."""
        if self.state is not State.READY or not self.conversation.messages:
            return False
        messages = tuple(self.conversation.engine_messages(options.system_prompt))
        request = measured_request(messages, options)  # the tools' text counts
        # Errors: the log has them.
        watcher = JobWatcher(on_finished=self._on_context)
        job = self.submit(measure_context_job(self.host, request), watcher)
        self._context_id = job.request_id
        return True

    def _on_context(self, report: ContextReport | None) -> None:
        if report is not None and report.request_id == self._context_id:
            self.context = report
            for o in list(self.observers):
                o.context(report)

    def _forget_context(self) -> None:
        self._context_id = 0
        if self.context is not None:
            self.context = None
            for o in list(self.observers):
                o.context(None)

    def stop(self) -> None:
        if self.state is State.GENERATING and self._answer is not None:
            self._answer.stop()

    def new_chat(self) -> bool:
        if self.state is State.GENERATING:
            return False
        self.conversation.clear()
        self._forget_context()
        self._changed()
        return True

    def set_conversation(self, conversation: Conversation) -> bool:
        """Show another conversation (one the history list opened)."""
        if self.state is State.GENERATING:
            return False
        self.conversation = conversation
        self._forget_context()
        self._changed()
        return True

    def _request(self, options: GenerationOptions) -> None:
        self.streaming_text = ""
        self._set_state(State.GENERATING)
        # The request first: the worker starts on the prompt while this thread redraws the
        # transcript and saves the question (answer_started); its tokens queue up meanwhile.
        messages = tuple(self.conversation.engine_messages(options.system_prompt))
        asked = window_job(self.host, messages, options, self._continued is not None)
        watcher = JobWatcher(self._on_yielded, self._on_finished, self._on_error)
        job = self._answer = self.submit(asked, watcher)
        self._context_id = job.request_id
        if self._continued is not None:  # shown as it streams on: the answer so far first
            self._replaced = [self.conversation.messages.pop()]
            self.streaming_text = self._continued.content
        for o in list(self.observers):
            o.answer_started(options)
        if self._continued is not None:
            start = TokenBatch(job.request_id, 0, self._continued.content, (), ())
            for o in list(self.observers):
                o.answer_delta(start)

    def _on_yielded(self, batch: YieldedBatch) -> None:
        if self._answer is None or batch.request_id != self._answer.request_id:
            return
        tokens = [item for item in batch.items if isinstance(item, TokenItem)]
        for item in batch.items:
            if isinstance(item, ContextReport):
                self._on_context(item)
            elif isinstance(item, WarmUpProgress):
                for o in list(self.observers):
                    o.warm_up(item)
        if tokens:
            delta = TokenBatch.join(batch.request_id, tokens)
            self.streaming_text += delta.text
            for o in list(self.observers):
                o.answer_delta(delta)
        if isinstance(batch.snapshot, StatsSnapshot):
            for o in list(self.observers):
                o.stats(batch.snapshot)

    def _on_finished(self, result: AnswerResult) -> None:
        self._answer = None
        replaced, self._replaced = self._replaced, None
        final, figures = result.final, self._named(result.figures)  # made on the worker
        for o in list(self.observers):
            o.stats(final)
        continued, self._continued = self._continued, None
        if continued is not None:
            message = self.conversation.add_continued(
                continued, result.text, figures, result.tool_calls
            )
        else:
            # A new answer to the same question keeps the one(s) it replaces as other versions.
            message = self.conversation.add_answer(
                result.text, figures, replaced[0] if replaced else None, result.tool_calls
            )
        self.streaming_text = ""
        self._set_state(State.READY)
        for o in list(self.observers):
            o.answer_finished(message)
        self._changed()

    def _on_error(self, error: JobError) -> None:
        self._answer = None
        restored = ""
        replaced, self._replaced = self._replaced, None
        stats = failure_stats(error.partial)
        continued, self._continued = self._continued, None
        if stats is not None and stats.generated_tokens > 0:
            # Keep what was written before the fault, marked as failed (the answer it was to
            # replace stays one of its versions).
            figures = self._named(failed_figures(stats))
            if continued is not None:
                written = self.streaming_text[len(continued.content) :]
                self.conversation.add_continued(continued, written, figures)
            else:
                self.conversation.add_answer(
                    self.streaming_text, figures, replaced[0] if replaced else None
                )
        elif replaced is not None:
            # A regenerate that wrote nothing: the answer it was to replace comes back.
            self.conversation.messages.extend(replaced)
        else:
            # Nothing was answered: give the prompt back so the user can edit and resend it.
            restored = self.conversation.pop_pending_user() or ""
        self.streaming_text = ""
        self._set_state(State.READY if self.backend is not None else State.NO_MODEL)
        for o in list(self.observers):
            o.answer_failed(error.message, restored)
        self._changed()
        if issubclass(error.kind, DeviceFailure):
            # The same model on the CPU, queued before any next answer.
            fallback = cpu_fallback_job(self.host, error.detail)
            self.submit(fallback, self._load_watcher())

    def _named(self, figures: AnswerFigures) -> AnswerFigures:
        """An answer's figures name the model, variant and precision that wrote it."""
        card, model = self.remote, self.model
        if card is not None:  # the card's: a server names no variant or precision of ours
            precision, variant = card.fact("Precision").value, card.fact("Variant").value
            return named_figures(figures, card.name, precision, variant)
        if model is None:
            return named_figures(figures, None, None)
        return named_figures(figures, model.name, model.precision, model.onnx_file or None)

    # ---- conversion (on the tool worker: it never touches the engine) -----------------------
    def convert_gguf(
        self, gguf: Path, out_dir: Path, graph: str = "auto", attention: str = "gqa"
    ) -> bool:
        """Convert off the engine's worker; `graph` and `attention` as `chatapp convert`'s."""
        if self.busy:
            return False
        self._state_before_conversion = self.state
        self._set_state(State.CONVERTING)
        watcher = JobWatcher(
            self._on_convert_progress,
            self._on_converted,
            lambda error: self._on_convert_failed(error.message),
            self._on_convert_failed,
        )
        job = convert_job(ConvertRequest(Path(gguf), Path(out_dir), graph, attention))
        self._conversion = self.submit_tool(job, watcher)
        return True

    def cancel_conversion(self) -> None:
        if self._conversion is not None:
            self._conversion.stop()

    def _on_convert_progress(self, batch: YieldedBatch) -> None:
        for plan in (item for item in batch.items if isinstance(item, ConvertPlan)):
            for o in list(self.observers):
                o.convert_planned(plan.line)
        progress = [item for item in batch.items if isinstance(item, Progress)]
        if progress:
            for o in list(self.observers):
                o.convert_progress(progress[-1].fraction, progress[-1].message)

    def _on_converted(self, folder: Path) -> None:
        self._conversion = None
        self._set_state(self._state_before_conversion)
        for o in list(self.observers):
            o.converted(folder)

    def _on_convert_failed(self, message: str) -> None:
        self._conversion = None
        self._set_state(self._state_before_conversion)
        for o in list(self.observers):
            o.convert_failed(message)


def _exempt_long_lived_objects() -> None:
    """A full garbage collection walks every object the app keeps (~100k: Qt wrappers, the
    tokenizer, the engine) and holds the GIL for 60-170 ms, freezing the window if it falls in
    the middle of an answer. Collect once now, at load time, then leave those objects out of
    later collections. What the previous load exempted is put back first, so that a model
    replaced since then can still be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
