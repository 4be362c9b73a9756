"""SlotThreads (`chatapp serve --parallel N`): N threads, each answering on its own slot."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.engine import Engine
from chatapp.session.slot_threads import SlotThreads

WAIT_S = 60.0


def test_closing_runs_what_was_queued_and_refuses_what_comes_after(
    varied_model_dir: Path,
) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=64)
    answered: list[int] = []
    refused: list[int] = []
    slots_used: set[int] = set()

    def answer(request: int, slot: object) -> None:
        answered.append(request)
        slots_used.add(id(slot))

    pool: SlotThreads[int] = SlotThreads(engine.slots(2), answer, refused.append)
    for r in range(5):
        pool.submit(r)
    pool.close(WAIT_S)
    pool.submit(99)
    assert sorted(answered) == [0, 1, 2, 3, 4] and refused == [99]
    assert engine.slots(2).busy == 0  # every slot given back
