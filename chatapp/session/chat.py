"""The chat without Qt: one Conversation, answered by the backend session.

`Chat` owns what the conversation is and how it goes on: send, regenerate, continue, edit,
versions, tool replies, the context report, and the answer streaming in. It asks the
`BackendSession` (backend_session.py) what answers and for the state, and submits answers and
context measures to the engine's worker through its `Submit` (running.py). What happens comes
back as `ChatEvents` (events.py), on the thread the worker's callbacks arrive on.
"""

from __future__ import annotations

from chatapp.engine.backend import BackendCard, Capabilities
from chatapp.engine.errors import DeviceFailure
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.session.backend_session import BackendSession, State
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
from chatapp.session.events import Event, EventGroup
from chatapp.session.jobs import JobError
from chatapp.session.model_jobs import EngineHost, ModelSummary
from chatapp.session.running import JobWatcher, RunningJob, Submit, YieldedBatch

__all__ = ["Chat", "ChatEvents", "GenerationOptions", "State"]


class ChatEvents(EventGroup):
    def __init__(self) -> None:
        self.answer_started: Event[[GenerationOptions]] = Event("answer_started")
        self.answer_delta: Event[[TokenBatch]] = Event("answer_delta")
        self.stats: Event[[StatsSnapshot]] = Event("stats")
        # The device's first runs before an answer (engine/warm_up.py), not in its figures.
        self.warm_up: Event[[WarmUpProgress]] = Event("warm_up")
        self.answer_finished: Event[[ChatMessage]] = Event("answer_finished")
        # The error's line, and the prompt given back to the input box ("" if none).
        self.answer_failed: Event[[str, str]] = Event("answer_failed")
        self.conversation_changed: Event[[Conversation]] = Event("conversation_changed")
        # What the model sees of the conversation, or None when it is not known (another
        # conversation, another backend): after every answer request, and on measure_context.
        self.context: Event[[ContextReport | None]] = Event("context")


class Chat:
    def __init__(self, backend_session: BackendSession) -> None:
        self.backend_session = backend_session
        self.events = ChatEvents()
        self.conversation = Conversation()
        self.streaming_text = ""  # the answer streaming in, as the conversation will keep it
        self.context: ContextReport | None = None
        self._answer: RunningJob | None = None
        self._context_id = 0  # the job whose report describes the conversation shown
        # Messages an answer request replaced (regenerate, or resend of an unchanged question):
        # put back if the new answer fails before writing anything.
        self._replaced: list[ChatMessage] | None = None
        self._continued: ChatMessage | None = None  # the answer Continue goes on with
        # The transcript's token counts were the previous backend's.
        backend_session.events.backend_changed.connect(self._on_backend_changed)

    # ---- what the backend session says, read here ------------------------------------------
    @property
    def state(self) -> State:
        return self.backend_session.state

    @property
    def backend(self) -> ModelSummary | BackendCard | None:
        return self.backend_session.backend

    @property
    def capabilities(self) -> Capabilities:
        return self.backend_session.capabilities

    def _set_state(self, state: State) -> None:
        self.backend_session.set_state(state)

    def _changed(self) -> None:
        self.events.conversation_changed.emit(self.conversation)

    def _on_backend_changed(self, _card: BackendCard | None) -> None:
        self._forget_context()

    # ---- requests -----------------------------------------------------------------------------
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
        job = self.backend_session.submit(
            measure_context_job(self.backend_session.host, request), watcher
        )
        self._context_id = job.request_id
        return True

    def _on_context(self, report: ContextReport | None) -> None:
        if report is not None and report.request_id == self._context_id:
            self.context = report
            self.events.context.emit(report)

    def _forget_context(self) -> None:
        self._context_id = 0
        if self.context is not None:
            self.context = None
            self.events.context.emit(None)

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
        asked = window_job(
            self.backend_session.host, messages, options, self._continued is not None
        )
        watcher = JobWatcher(self._on_yielded, self._on_finished, self._on_error)
        job = self._answer = self.backend_session.submit(asked, watcher)
        self._context_id = job.request_id
        if self._continued is not None:  # shown as it streams on: the answer so far first
            self._replaced = [self.conversation.messages.pop()]
            self.streaming_text = self._continued.content
        self.events.answer_started.emit(options)
        if self._continued is not None:
            start = TokenBatch(job.request_id, 0, self._continued.content, (), ())
            self.events.answer_delta.emit(start)

    def _on_yielded(self, batch: YieldedBatch) -> None:
        if self._answer is None or batch.request_id != self._answer.request_id:
            return
        tokens = [item for item in batch.items if isinstance(item, TokenItem)]
        for item in batch.items:
            if isinstance(item, ContextReport):
                self._on_context(item)
            elif isinstance(item, WarmUpProgress):
                self.events.warm_up.emit(item)
        if tokens:
            delta = TokenBatch.join(batch.request_id, tokens)
            self.streaming_text += delta.text
            self.events.answer_delta.emit(delta)
        if isinstance(batch.snapshot, StatsSnapshot):
            self.events.stats.emit(batch.snapshot)

    def _on_finished(self, result: AnswerResult) -> None:
        self._answer = None
        replaced, self._replaced = self._replaced, None
        final, figures = (
            result.final,
            self.backend_session.named(result.figures),
        )  # made on the worker
        self.events.stats.emit(final)
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
        self.events.answer_finished.emit(message)
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
            figures = self.backend_session.named(failed_figures(stats))
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
        self.backend_session.settle()
        self.events.answer_failed.emit(error.message, restored)
        self._changed()
        if issubclass(error.kind, DeviceFailure):
            self.backend_session.fall_back_to_cpu(error.detail)


def chat_on(
    submit: Submit, host: EngineHost | None = None, submit_tool: Submit | None = None
) -> Chat:
    """A chat with a backend session of its own on these workers (scripts and tests)."""
    return Chat(BackendSession(submit, host, submit_tool))
