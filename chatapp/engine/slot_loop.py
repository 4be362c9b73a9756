"""One slot of a `SlotBatch` (engine/slots.py): the IO-Binding loop over its row of the
batch's KV buffers. A generation on a slot runs as turns (engine/generation.py `turns()`),
resumed by the batch's one loop (engine/batch_loop.py), on one thread: its one-token steps hand
their token to the batch and yield STEP until the batched step has run; its prompts and drafted
tokens run alone, at once (between two batched steps); where it must wait for room in the KV
budget it yields WAIT. Where the batch pre-empted it (its KV dropped so that older sequences
could grow), its next run first waits for room and computes the dropped positions again
(`_resume`), so that the generation never sees the pre-emption: on a native graph at the fast
precision those positions get the bits they had (tests/engine/test_invariance.py), so the
answer does not change."""
# A SlotStopped (engine/errors.py) ends a generation told to stop while it waited to resume.

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Protocol

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.errors import SlotStopped
from chatapp.engine.kv_strategy import SharedBufferKv
from chatapp.engine.loops import STEP, WAIT, IOBindingLoop, Step, Turn, Turns
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

    def share_prefix(self, loop: SlotLoop, prompt: Sequence[int]) -> int: ...
    def reserve(self, loop: SlotLoop, positions: int) -> bool: ...
    def unqueue(self, loop: SlotLoop) -> None: ...
    def make_room(self, loop: SlotLoop, count: int) -> bool: ...
    def hand_in(self, loop: SlotLoop, token: int) -> None: ...


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
        # What the batched step left for this slot's token: its logits, or its failure.
        self.stepped: Step | BaseException | None = None

    def admit(
        self, prompt: Sequence[int], new_tokens: int, should_stop: Callable[[], bool]
    ) -> Generator[Turn, None, bool]:
        self.should_stop = should_stop
        self.limit = min(len(prompt) + new_tokens, self.max_context)
        # The prefix another slot holds (a shared system prompt, the other choices of an `n`
        # request: their prompts ran before this one's, the loop admits one at a time) is
        # copied first: the budget may then drop the idle cache it came from.
        self.batch.share_prefix(self, prompt)
        # The prompt and a first piece of the answer; more is reserved as it comes.
        self.first_reservation = len(prompt) + min(new_tokens, self.batch.grow)
        return (yield from self._wait_for_room(self.first_reservation))

    def rollback(self, count: int) -> None:
        if self.resume is not None and count > 0:  # pre-empted: the tokens to compute shrink
            del self.resume[len(self.resume) - count :]
            count = max(0, len(self.cached) - len(self.resume))
        super().rollback(count)

    def tokens_that_fit(self, new_tokens: int) -> int:
        held = max(len(self.cached), len(self.resume or ()))
        return self.kv.tokens_that_fit(held, new_tokens)

    def forward_turns(self, ids: Sequence[int], rows: Sequence[int] | None = None) -> Turns:
        if len(ids) == 1 and rows is None:  # a decode step: taken with the other slots'
            return (yield from self._step(int(ids[0])))
        yield from self._room(ids[0], len(ids))  # a prompt: alone, between two steps
        return self.forward(ids, rows=rows)

    def verify_turns(self, ids: Sequence[int]) -> Turns:
        yield from self._room(ids[0], len(ids))  # drafted tokens: alone, between two steps
        return self.verify(ids)

    def _step(self, token: int) -> Turns:
        """Hand `token` to the batch and wait for the batched step (again after a
        pre-emption that dropped it from the step)."""
        while True:
            yield from self._resume(token, 1)
            self.kv.check_room(len(self.cached), 1)
            self.stepped = None
            self.batch.hand_in(self, token)
            yield STEP
            stepped, self.stepped = self.stepped, None
            if isinstance(stepped, BaseException):
                raise stepped
            if stepped is not None:
                return stepped

    def _room(self, first: int, count: int) -> Generator[Turn, None, None]:
        """Before a run of `count` tokens alone: grow the reservation where they pass it
        (which may pre-empt this slot itself: then it waits and resumes)."""
        while True:
            yield from self._resume(first, count)
            if self.batch.make_room(self, count):
                return

    def _wait_for_room(self, positions: int) -> Generator[Turn, None, bool]:
        """WAIT until `positions` fit in the budget, first come first served; False where
        the generation was told to stop meanwhile."""
        while not self.batch.reserve(self, positions):
            if self.should_stop():
                self.batch.unqueue(self)
                return False
            yield WAIT
        return True

    def _resume(self, first: int, count: int) -> Generator[Turn, None, None]:
        """If the batch pre-empted this slot (its KV dropped to give the budget to older
        sequences): wait at the head of the queue for room again, then compute the dropped
        positions again (the same bits as before: engine/slots.py's docstring), so that the
        run of `count` tokens from `first` goes on as if nothing had happened."""
        batch = self.batch
        if not batch.preempted[self.index]:
            self.resume = None
            return
        tokens = list(self.resume or ())
        need = len(tokens) + count
        want = max(self.first_reservation, min(self.limit, need + batch.grow), need)
        batch.share_prefix(self, [*tokens, first])
        if not (yield from self._wait_for_room(want)):
            raise SlotStopped("stopped while waiting to resume after a pre-emption")
        reuse = self.prepare([*tokens, first])
        piece = self.kv.piece_tokens(self.prefill_chunk) or len(tokens)
        for start in range(reuse, len(tokens), piece):  # one thread: nothing pre-empts it here
            part = tokens[start : start + piece]
            self._run(part, None)
            batch.recomputed += len(part)
        self.resume = None
