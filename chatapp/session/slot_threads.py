"""`chatapp serve --parallel N`: N threads answer requests together, each on a slot.

Each thread takes the next waiting request, answers it on its own slot of the engine's
`SlotBatch` (engine/slots.py; each slot a context of the shared model:
Engine.slot_context): prompts are prefilled one at a time, and the decode steps of
every request being answered run as one batched step. `close()` lets the requests queued
before it run, then ends the threads; a request submitted after it is refused at once (the
server is shutting down), as the single-slot worker's JobThread does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from chatapp.engine.slots import SlotBatch, SlotLoop

R = TypeVar("R")


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
