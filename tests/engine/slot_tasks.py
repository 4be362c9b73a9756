"""Sequences on the slots of a batch, run as the server runs them: tasks of the batch's one loop
(engine/batch_loop.py), on the test's thread."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chatapp.engine.batch_loop import BatchLoop, Task
from chatapp.engine.engine import Engine
from chatapp.engine.errors import SlotStopped
from chatapp.engine.generation import Generation
from chatapp.engine.loops import STEP, Turn
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotBatch, SlotLoop

MAX_PASSES = 100_000  # a broken loop fails instead of spinning


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


@dataclass
class Client:
    """One sequence: its answer on the slot the loop gives it."""

    prompt: list[int]
    settings: SamplingSettings
    should_stop: Callable[[], bool] | None = None
    on_token: Callable[[int], None] = lambda _i: None
    stats: RunStats | None = None
    slot: int | None = None
    error: BaseException | None = None
    stopped: bool = False  # ended by SlotStopped (told to stop while pre-empted)

    def task(self, engine: Engine, loop: SlotLoop) -> Task:
        self.slot = loop.index
        try:
            gen = engine.generate_ids(
                self.prompt, self.settings, None, self.should_stop, True, loop=loop
            )
            self.stats = gen.stats
            for item in gen.turns():
                if isinstance(item, Turn):
                    yield item
                else:
                    self.on_token(item.index)
        except SlotStopped:
            self.stopped = True
        except Exception as exc:  # raised by `run` on the test's thread
            self.error = exc


def add(tasks: BatchLoop, engine: Engine, client: Client) -> None:
    tasks.add(lambda loop: client.task(engine, loop), client.prompt)


def run(tasks: BatchLoop, clients: list[Client]) -> None:
    """Passes until every task has ended; the first client's failure is raised."""
    passes = 0
    while tasks.busy:
        tasks.run_pass()
        passes += 1
        assert passes < MAX_PASSES, "the batch's loop never finished"
    for client in clients:
        if client.error is not None:
            raise client.error


def together(engine: Engine, batch: SlotBatch, clients: list[Client]) -> list[RunStats]:
    """Every client as a task of one loop over `batch`; their figures, in order."""
    tasks = BatchLoop(batch)
    for client in clients:
        add(tasks, engine, client)
    run(tasks, clients)
    return [c.stats for c in clients if c.stats is not None]


def drive(gen: Generation, batch: SlotBatch) -> RunStats:
    """One generation on a slot taken by hand, alone: each of its steps is a batched step of
    one row; it must never wait for room (nothing else would give it)."""
    for item in gen.turns():
        if isinstance(item, Turn):
            assert item is STEP, "a sequence alone waited for room"
            batch.run_pending()
    return gen.stats
