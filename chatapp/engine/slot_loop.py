"""One slot of a `SlotBatch` (engine/slots.py): the IO-Binding loop over its row of the
batch's KV buffers. Its decode steps go through the batch's step; its prompts run alone. Where
the batch pre-empted it (its KV dropped so that older sequences could grow), its next run first
waits for room and computes the dropped positions again (`_resume`), so that the generation
driving it never sees the pre-emption: on a native graph at the fast precision those positions
get the bits they had (tests/engine/test_invariance.py), so the answer does not change."""
# A SlotStopped (engine/errors.py) ends a generation told to stop while it waited to resume.

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.errors import SlotStopped
from chatapp.engine.kv_strategy import SharedBufferKv
from chatapp.engine.loops import IOBindingLoop, Step
from chatapp.engine.model_folder.model import ModelInfo


class Batch(Protocol):
    """What a slot uses of its `SlotBatch` (engine/slots.py, which imports this module)."""

    session: ort.InferenceSession
    info: ModelInfo
    device: Device
    max_context: int
    kv: dict[str, np.ndarray]
    grow: int
    preempted: list[bool]
    recomputed: int
    run_lock: threading.Lock
    _cond: threading.Condition

    def await_prefill(
        self, loop: SlotLoop, prompt: Sequence[int], should_stop: Callable[[], bool]
    ) -> None: ...
    def share_prefix(self, loop: SlotLoop, prompt: Sequence[int]) -> int: ...
    def reserve(self, loop: SlotLoop, positions: int, should_stop: Callable[[], bool]) -> bool: ...
    def readmit(self, loop: SlotLoop, tokens: Sequence[int], positions: int) -> bool: ...
    def make_room(self, loop: SlotLoop, count: int) -> bool: ...
    def filled(self, loop: SlotLoop) -> None: ...
    def step(self, index: int, token: int) -> Step | None: ...


class SlotLoop(IOBindingLoop):
    """One slot: the IO-Binding loop over its row of the batch's KV buffers."""

    def __init__(self, batch: Batch, index: int) -> None:
        self.batch = batch
        self.index = index
        rows = {  # contiguous
            name: ort.OrtValue.ortvalue_from_numpy(kv[index : index + 1])
            for name, kv in batch.kv.items()
        }
        kv = SharedBufferKv(batch.info, batch.device, batch.max_context, buffers=rows)
        super().__init__(batch.session, batch.info, batch.device, kv)
        # Pre-empted: the tokens whose KV was dropped, computed again before its next run.
        self.resume: list[int] | None = None
        self.should_stop: Callable[[], bool] = lambda: False
        self.first_reservation = 0  # what its admission reserved
        self.limit = batch.max_context  # the most positions it may ever hold

    def admit(
        self, prompt: Sequence[int], new_tokens: int, should_stop: Callable[[], bool]
    ) -> bool:
        self.should_stop = should_stop
        self.limit = min(len(prompt) + new_tokens, self.max_context)
        # A prefix another slot is prefilling now (the other choices of an `n` request, or
        # clients on one system prompt arriving together) is waited for and copied.
        self.batch.await_prefill(self, prompt, should_stop)
        # The prefix first: the budget may then drop the idle cache it came from.
        self.batch.share_prefix(self, prompt)
        # The prompt and a first piece of the answer; more is reserved as it comes.
        self.first_reservation = len(prompt) + min(new_tokens, self.batch.grow)
        return self.batch.reserve(self, self.first_reservation, should_stop)

    def prepare(self, prompt: Sequence[int]) -> int:
        # Under the batch's lock, so that no other slot copies from this one mid-change.
        with self.batch._cond:
            return super().prepare(prompt)

    def rollback(self, count: int) -> None:
        with self.batch._cond:  # never beside a pre-emption, which reads `cached`
            if self.resume is not None and count > 0:
                del self.resume[len(self.resume) - count :]
                count = max(0, len(self.cached) - len(self.resume))
            super().rollback(count)

    def tokens_that_fit(self, new_tokens: int) -> int:
        with self.batch._cond:
            held = max(len(self.cached), len(self.resume or ()))
        return self.kv.tokens_that_fit(held, new_tokens)

    def _run(self, ids: list[int], wanted: list[int] | None) -> Step:
        batch = self.batch
        if len(ids) == 1 and wanted is None:  # a decode step: taken with the other slots'
            while True:
                self._resume(ids)
                step = batch.step(self.index, ids[0])  # None: pre-empted meanwhile
                if step is not None:
                    return step
        while True:  # a prompt (or drafted tokens): alone, between two steps
            self._resume(ids)
            if not batch.make_room(self, len(ids)):
                continue
            with batch.run_lock:
                if batch.preempted[self.index]:
                    continue
                step = super()._run(ids, wanted)
            batch.filled(self)
            return step

    def _resume(self, ids: list[int]) -> None:
        """If the batch pre-empted this slot (its KV dropped to give the budget to older
        sequences): wait at the head of the queue for room again, then compute the dropped
        positions again (the same bits as before: engine/slots.py's docstring), so that the
        run of `ids` goes on as if nothing had happened."""
        batch = self.batch
        while True:
            with batch._cond:
                if not batch.preempted[self.index]:
                    self.resume = None
                    return
                tokens = list(self.resume or ())
            need = len(tokens) + len(ids)
            want = max(self.first_reservation, min(self.limit, need + batch.grow), need)
            if not batch.readmit(self, [*tokens, ids[0]], want):
                raise SlotStopped("stopped while waiting to resume after a pre-emption")
            reuse = self.prepare([*tokens, ids[0]])
            piece = self.kv.piece_tokens(self.prefill_chunk) or len(tokens)
            for start in range(reuse, len(tokens), piece):
                with batch.run_lock:
                    if batch.preempted[self.index]:
                        break  # pre-empted again: wait again
                    part = tokens[start : start + piece]
                    super()._run(part, None)
                    batch.recomputed += len(part)
