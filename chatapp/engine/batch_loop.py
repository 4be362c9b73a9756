"""The batch's one loop: several answers on the slots of a `SlotBatch` (engine/slots.py), on the
thread that calls it (the engine service's, session/engine_service.py; a benchmark's job).

Each answer is a task: a generator that runs on its slot until it must wait and then yields a
`Turn` (engine/loops.py; a generation's `turns()`, engine/generation.py, wrapped by whoever
delivers its events): STEP where its token waits for the batched step, WAIT where it waits for
room in the KV budget. One pass (`run_pass`):
1. admits waiting tasks into free slots, oldest first (each takes its slot, then each runs to
   its first turn: its prompt is prefilled there, between two steps, when its reservation
   fits, copying what a slot admitted before it holds of it);
2. resumes those waiting for room, oldest first (one may now fit, and prefill);
3. runs one batched step of every handed-in token (`SlotBatch.run_pending`: reservations grow
   there, oldest first, pre-empting younger sequences where the budget is full);
4. resumes those whose token ran: each samples its next token, delivers it and hands in the
   next, or ends; an ended task's slot is released (and a task is retired where it raises).
A stopped answer (its client left) ends at its next resumption. No thread, no lock: the caller
runs passes while `busy`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from chatapp.engine.loops import STEP, WAIT, Turn
from chatapp.engine.slots import SlotBatch, SlotLoop

log = logging.getLogger(__name__)
Task = Generator[Turn, None, None]


@dataclass
class _Running:
    loop: SlotLoop
    task: Task
    turn: Turn | None = None


class BatchLoop:
    """The tasks answered on `batch`'s slots, and the passes that run them (module docstring)."""

    def __init__(self, batch: SlotBatch) -> None:
        self.batch = batch
        self._waiting: deque[tuple[Callable[[SlotLoop], Task], Sequence[int]]] = deque()
        self._running: list[_Running] = []  # in arrival order

    def add(self, start: Callable[[SlotLoop], Task], prompt: Sequence[int] = ()) -> None:
        """Queue a task: `start(slot)` makes it once a slot is free (the one whose cache
        shares most with `prompt`, else the emptiest: `SlotBatch.acquire`)."""
        self._waiting.append((start, prompt))

    @property
    def busy(self) -> bool:
        """Tasks waiting or running."""
        return bool(self._waiting or self._running)

    def run_until_done(self) -> None:
        """Passes until every task has ended (a benchmark's clients)."""
        while self.busy:
            self.run_pass()

    def run_pass(self) -> bool:
        """One pass (module docstring). False where nothing moved: every task waits for room
        that only another's end can give (the caller may wait a little before the next)."""
        moved = False
        admitted = []
        while self._waiting:  # each takes its slot first: one ending at once keeps its own
            loop = self.batch.acquire(self._waiting[0][1])
            if loop is None:
                break
            start, _ = self._waiting.popleft()
            admitted.append(_Running(loop, start(loop)))
        self._running += admitted
        for running in admitted:
            self._resume(running)
            moved = True
        for running in list(self._running):
            if running.turn is WAIT:
                self._resume(running)
                moved = moved or running.turn is not WAIT
        moved = self.batch.run_pending() or moved
        for running in list(self._running):
            if running.turn is STEP:
                self._resume(running)
                moved = True
        return moved

    def _resume(self, running: _Running) -> None:
        try:
            running.turn = next(running.task)
        except StopIteration:
            self._retire(running)
        except Exception:  # the task's own fault: the others go on
            log.exception("an answer on slot %d failed", running.loop.index)
            self._retire(running)

    def _retire(self, running: _Running) -> None:
        self._running.remove(running)
        running.turn = None
        self.batch.release(running.loop)
