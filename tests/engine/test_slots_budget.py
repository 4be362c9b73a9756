"""Slots share one KV budget: a sequence reserves positions before its prefill (here given
directly; tests/engine/test_slots_preemption.py: reservations that grow), waits (first come
first served) while the others hold too much, idle caches are dropped first (their pages given
back), and every sequence still gets its solo tokens."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine import model_description
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.mapped_weights import release_owned
from tests.engine.slot_tasks import Client, drive, greedy, together
from tests.engine.test_slots import solo

CONTEXT = 64
PAGE = mmap.PAGESIZE


def test_a_reservation_waits_for_room_first_come_first_served(varied_model_dir: Path) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    batch = engine.slots(3)  # the budget: one context
    first, second, third = batch.acquire(), batch.acquire(), batch.acquire()
    assert first is not None and second is not None and third is not None
    assert batch.reserve(first, CONTEXT - 10)
    assert batch.held == CONTEXT - 10
    assert not batch.reserve(second, 20)  # 54 + 20 > 64: it waits
    assert not batch.reserve(third, 5)  # it would fit, but the second came first
    batch.unqueue(second)  # the second was told to stop while it waited
    assert batch.reserve(third, 5)
    assert batch.reserve(second, 5)  # 54 + 5 + 5 fits
    assert not batch.reserve(second, 30)  # waits for the first to finish
    batch.release(first)
    assert batch.reserve(second, 30) and batch.held == 35


def test_a_reservation_is_at_most_a_context_and_the_budget_at_least_one(
    varied_model_dir: Path,
) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    batch = engine.slots(2, budget=2 * CONTEXT)
    loop = batch.acquire()
    assert loop is not None and batch.reserve(loop, 10 * CONTEXT)
    assert batch.held == CONTEXT
    with pytest.raises(ValueError, match="one whole context"):
        engine.slots(2, budget=CONTEXT - 1)


def test_a_budget_past_memory_is_refused_naming_the_budget(
    varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve --kv-budget larger than a context: the refusal asks for a smaller budget, not a
    smaller context (which fits)."""
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    one_context = engine.info.kv_bytes_per_token() * CONTEXT
    monkeypatch.setattr(model_description, "physical_memory", lambda: 3 * one_context)  # half: 1.5
    with pytest.raises(EngineError, match=rf"KV cache for {2 * CONTEXT} tokens .* budget\.$"):
        engine.slots(2, budget=2 * CONTEXT)
    assert engine.slots(2).budget == CONTEXT  # one context fits


def test_idle_caches_are_dropped_first_and_their_pages_given_back(varied_model_dir: Path) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    batch = engine.slots(3)
    prompt = list(range(3, 30))
    together(engine, batch, [Client(prompt, greedy(8))])
    kept = next(loop for loop in batch.loops if loop.cached)
    assert batch.held == len(kept.cached) == len(prompt) + 7
    # Another sequence's reservation needs the room: the idle cache goes, the busy one stays.
    other = batch.acquire([999])
    assert other is not None and other is not kept
    assert batch.reserve(other, CONTEXT)
    assert kept.cached == [] and batch.held == CONTEXT
    if release_owned(np.ones(3 * PAGE, np.uint8)) > 0:  # madvise runs here
        for kv in batch.kv.values():
            row = kv[kept.index].reshape(-1).view(np.uint8)
            start = -row.ctypes.data % PAGE
            whole = (row.nbytes - start) // PAGE * PAGE
            assert not row[start : start + whole].any()  # the written pages were given back
    batch.release(other)


def test_sequences_beyond_the_budget_wait_and_get_their_solo_tokens(
    varied_model_dir: Path,
) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    prompts = [[7, 8, 9, 10 + i] for i in range(4)]
    references = [solo(engine, p, 20).token_ids for p in prompts]
    batch = engine.slots(4)  # 4 x (4 + 20) = 96 > 64: at most two at once
    peak = 0

    def watch(_index: int) -> None:
        nonlocal peak
        peak = max(peak, batch.held)

    clients = [Client(p, greedy(20), on_token=watch) for p in prompts]
    together(engine, batch, clients)
    assert [c.stats.token_ids if c.stats else None for c in clients] == references
    assert 0 < peak <= CONTEXT


def test_release_owned_gives_back_whole_pages_only() -> None:
    array = np.ones(8 * PAGE + 100, np.uint8)
    released = release_owned(array)
    if released == 0:
        pytest.skip("madvise is not available here")
    start = -array.ctypes.data % PAGE  # the first whole page
    assert released % PAGE == 0 and released >= 7 * PAGE
    assert (array[:start] == 1).all()  # the part of a page before it is kept
    assert not array[start : start + released].any()
    assert (array[start + released :] == 1).all()


def test_two_waiting_slots_do_not_wait_on_each_others_caches(varied_model_dir: Path) -> None:
    """Each slot keeps a cache of 31 and wants 40 of 64: counting the other's old cache,
    neither would ever fit."""
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    batch = engine.slots(2)
    first, second = list(range(3, 30)), list(range(40, 67))
    together(engine, batch, [Client(first, greedy(5))])
    together(engine, batch, [Client(second, greedy(5))])
    a, b = batch.acquire(first), batch.acquire(second)  # each gets its own cache back
    assert a is not None and b is not None and len(a.cached) == len(b.cached) == 31
    # The first to ask fits once the other, waiting too, gives its old cache up.
    assert [batch.reserve(a, 40), batch.reserve(b, 40)] == [True, False]
    batch.release(a)
    assert batch.reserve(b, 40) and batch.held == 40


def test_a_prefix_another_slot_holds_is_copied_not_prefilled(varied_model_dir: Path) -> None:
    """Two requests on one system prompt: the second, on another slot, copies the first's
    positions and prefills only its own part; its tokens are its solo run's."""
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    system = list(range(3, 33))  # 30 shared positions
    first, second = [*system, 40, 41, 42], [*system, 50, 51]
    reference = solo(engine, second, 6).token_ids
    batch = engine.slots(2, budget=2 * CONTEXT)  # room for both: nothing is dropped
    together(engine, batch, [Client(first, greedy(4))])
    holder = next(loop for loop in batch.loops if loop.cached)
    other = batch.acquire()  # the empty slot: the holder's cache stays
    assert other is not None and other is not holder
    stats = drive(engine.generate_ids(second, greedy(6), ignore_eos=True, loop=other), batch)
    batch.release(other)
    assert stats.reused_tokens == len(system) and batch.shared_positions == len(system)
    assert stats.token_ids == reference
    assert holder.cached[: len(system)] == system  # the source keeps its cache


def test_a_slot_keeps_its_own_longer_prefix(varied_model_dir: Path) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=CONTEXT)
    batch = engine.slots(2, budget=2 * CONTEXT)
    prompt = list(range(3, 20))
    together(engine, batch, [Client(prompt, greedy(3))])
    mine = next(loop for loop in batch.loops if loop.cached)
    other = batch.acquire()
    assert other is not None and other is not mine
    drive(engine.generate_ids([*prompt[:5], 60, 61], greedy(3), ignore_eos=True, loop=other), batch)
    batch.release(other)
    assert batch.shared_positions == 5  # the other slot copied the 5 it shares
    shared = batch.shared_positions
    assert mine.cached[:17] == prompt
    assert batch.share_prefix(mine, [*prompt, 70]) == 0 and batch.shared_positions == shared
