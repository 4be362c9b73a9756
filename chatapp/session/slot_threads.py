"""`chatapp serve --parallel N`: N threads answer requests together, each on a slot.

Each thread takes the next waiting request, answers it on its own slot of the engine's
`SlotBatch` (engine/slots.py): prompts are prefilled one at a time, and the decode steps of
every request being answered run as one batched step. `close()` lets the requests queued
before it run, then ends the threads; a request submitted after it is refused at once (the
server is shutting down), as the single-slot worker's JobThread does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from chatapp.engine.chat import STYLE_TEMPLATE
from chatapp.engine.slots import SlotBatch, SlotLoop

if TYPE_CHECKING:
    from chatapp.engine.backend import BackendCard, Capabilities
    from chatapp.engine.chat import ChatTokenizer, Message
    from chatapp.engine.constraints import OutputFormat
    from chatapp.engine.engine import Engine
    from chatapp.engine.generation import Generation
    from chatapp.engine.sampling import SamplingSettings
    from chatapp.engine.warm_up import WarmUpProgress

R = TypeVar("R")


class OnSlot:
    """The engine as session/answer.py's `answer()` sees it (a Backend), every answer on
    one slot."""

    def __init__(self, engine: Engine, slot: SlotLoop) -> None:
        self.engine, self.slot = engine, slot

    @property
    def capabilities(self) -> Capabilities:
        return self.engine.capabilities

    @property
    def max_context(self) -> int:
        return self.engine.max_context

    @property
    def answerer(self) -> str:
        return self.engine.answerer

    @property
    def chat_tokenizer(self) -> ChatTokenizer | None:
        return self.engine.chat_tokenizer

    def needs_warm_up(self, mode: str | None = None) -> bool:
        return self.engine.needs_warm_up(mode)

    def warm_up(self, mode: str | None = None) -> Iterator[WarmUpProgress]:
        return self.engine.warm_up(mode)

    def count_tokens(self, messages: Sequence[Message], style: str = STYLE_TEMPLATE) -> int:
        return self.engine.count_tokens(messages, style)

    def card(self) -> BackendCard:
        return self.engine.card()

    def close(self) -> None:
        """The slot is the batch's: the worker releases them all."""

    def chat(
        self,
        messages: Sequence[Message],
        settings: SamplingSettings,
        mode: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        continue_last: bool = False,
        style: str = STYLE_TEMPLATE,
    ) -> Generation:
        return self.engine.chat(
            messages,
            settings,
            mode,
            should_stop,
            top_logprobs,
            output_format=output_format,
            tools=tools,
            continue_last=continue_last,
            loop=self.slot,
            style=style,
        )

    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        settings: SamplingSettings,
        mode: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        ignore_eos: bool = False,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
    ) -> Generation:
        return self.engine.generate_ids(
            prompt_ids,
            settings,
            mode,
            should_stop,
            ignore_eos,
            top_logprobs,
            output_format,
            loop=self.slot,
        )


class SlotThreads(Generic[R]):
    def __init__(
        self,
        batch: SlotBatch,
        answer: Callable[[R, SlotLoop], None],
        refuse: Callable[[R], None],
    ) -> None:
        self.batch = batch
        self._answer = answer
        self._refuse = refuse
        self._queue: queue.Queue[R | None] = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, name=f"chatapp-slot-{i}", daemon=True)
            for i in range(batch.size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, request: R) -> None:
        with self._lock:
            if not self._closed:
                self._queue.put(request)
                return
        self._refuse(request)

    def close(self, timeout: float | None = None) -> None:
        """Run what is queued, then end the threads (waiting at most `timeout` seconds)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for _ in self._threads:
                    self._queue.put(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)

    def _loop(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            loop = self.batch.acquire()
            assert loop is not None  # as many threads as slots: one is always free here
            try:
                self._answer(request, loop)
            finally:
                self.batch.release(loop)
