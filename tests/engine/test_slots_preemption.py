"""Reservations that grow, and recompute pre-emption: a sequence reserves its prompt and a piece
of its answer, grows piece by piece, and where the budget is full the most recently arrived one
is pre-empted (its KV dropped), waits at the head of the queue, and computes its prompt and its
tokens again. Each answer stays its solo answer bit for bit (a native graph at the fast
precision): the solo references are computed here, at run time, with the engine's own loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.errors import SlotStopped
from chatapp.engine.loops import Step
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotBatch, SlotLoop
from tests.engine.test_slots import native_dir  # noqa: F401 (a fixture)

CONTEXT = 64
WAIT_S = 120  # the whole scenario runs in a few seconds: past this, the batch is stuck
GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0)
SEEDED = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)


def _settings(base: SamplingSettings, n: int, seed: int | None) -> SamplingSettings:
    return SamplingSettings(
        temperature=base.temperature,
        top_k=base.top_k,
        top_p=base.top_p,
        repetition_penalty=base.repetition_penalty,
        seed=seed,
        max_new_tokens=n,
    )


def _solo(engine: Engine, prompt: list[int], settings: SamplingSettings) -> RunStats:
    engine.reset()
    return engine.generate_ids(prompt, settings, ignore_eos=True).run()


def _together(
    engine: Engine, batch: SlotBatch, prompts: list[list[int]], settings: list[SamplingSettings]
) -> list[RunStats]:
    """Every prompt on its own thread and slot; fails (rather than hangs) past WAIT_S."""
    results: list[RunStats | None] = [None] * len(prompts)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            loop = batch.acquire(prompts[k])
            assert loop is not None
            try:
                gen = engine.generate_ids(prompts[k], settings[k], ignore_eos=True, loop=loop)
                results[k] = gen.run()
            finally:
                batch.release(loop)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(len(prompts))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + WAIT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), "a sequence never finished: the batch is stuck"
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def first_steps_as_one(batch: SlotBatch, count: int) -> None:
    """Each slot's first decode step waits until `count` slots have reached theirs (60 s at
    most, then it fails), and the step then waits for all of them: it runs as one of `count`
    rows."""
    together = threading.Barrier(count, timeout=60)
    original, seen = batch.step, set()

    def step(index: int, token: int) -> Step | None:
        if index not in seen:
            seen.add(index)
            batch.expect_step(batch.loops[index])
            together.wait()
        return original(index, token)

    batch.step = step  # type: ignore[method-assign]


def admitted_together(batch: SlotBatch, count: int) -> None:
    """No sequence goes past its admission until `count` are admitted (60 s at most, then it
    fails): they then hold their first reservations at once, so that the first to grow finds
    the budget full, however the threads are scheduled. (Prompts that share a prefix would
    wait for each other's prefill before their admission: give them none.)"""
    together = threading.Barrier(count, timeout=60)
    original, seen = batch.reserve, set()

    def reserve(loop: SlotLoop, positions: int, should_stop: Callable[[], bool]) -> bool:
        admitted = original(loop, positions, should_stop)
        if loop.index not in seen:
            seen.add(loop.index)
            together.wait()
        return admitted

    batch.reserve = reserve  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def native_engine(native_dir: Path) -> Engine:  # noqa: F811
    return Engine(native_dir, threads=1, max_context=CONTEXT, precision="fast")


@pytest.mark.parametrize("base", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_pre_empted_sequences_get_their_solo_answers_bit_for_bit(
    native_engine: Engine, base: SamplingSettings
) -> None:
    """Four sequences of 4 + 40 positions in a 64-position budget: all four start (prompt and a
    piece of 8 fit), and all want to grow at once: the youngest are pre-empted, again and
    again, and each answer is still its solo one, tokens and log-probs."""
    engine = native_engine
    prompts = [[7 + i, 8, 9, 10] for i in range(4)]  # no shared prefix to wait for
    settings = [_settings(base, 40, seed=11 + k) for k in range(4)]
    references = [_solo(engine, p, s) for p, s in zip(prompts, settings, strict=True)]
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 4, grow=8)
    admitted_together(batch, 4)  # 4 x (4 + 8) = 48 of 64: the first to grow pre-empts
    answers = _together(engine, batch, prompts, settings)
    assert batch.preemptions > 0 and batch.recomputed > 0
    assert batch.rows > batch.steps  # steps carried several sequences
    for answer, reference in zip(answers, references, strict=True):
        assert answer.token_ids == reference.token_ids
        assert answer.logprobs == reference.logprobs
    assert batch.held == batch.cached_positions <= CONTEXT and batch.busy == 0


def test_four_sequences_without_a_limit_are_batched_in_one_context(
    native_engine: Engine,
) -> None:
    """A token limit of a whole context (what the server takes when a request names none):
    four sequences still start together in one context's budget, and their first steps run as
    one (each waits there for the others; with whole-context reservations only one would ever
    start, and the wait would time out)."""
    engine = native_engine
    prompts = [[20 + i, 21, 22] for i in range(4)]
    settings = [_settings(GREEDY, CONTEXT, None) for _ in prompts]
    references = [_solo(engine, p, s) for p, s in zip(prompts, settings, strict=True)]
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 4)
    assert batch.grow == 8  # 64 / (2 x 4)
    first_steps_as_one(batch, 4)
    answers = _together(engine, batch, prompts, settings)
    assert batch.widest == 4 and batch.rows > batch.steps
    for answer, reference in zip(answers, references, strict=True):
        assert answer.token_ids == reference.token_ids  # to the end of the context, pre-empted


def test_one_sequence_alone_grows_to_a_whole_context(native_engine: Engine) -> None:
    engine = native_engine
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 2, grow=8)
    prompt = [3, 4, 5]
    [answer] = _together(engine, batch, [prompt], [_settings(GREEDY, CONTEXT, None)])
    assert len(answer.token_ids) == CONTEXT - len(prompt)  # to the end of the context
    assert batch.preemptions == 0
    assert answer.token_ids == _solo(engine, prompt, _settings(GREEDY, CONTEXT, None)).token_ids


def test_a_sequence_that_stops_while_pre_empted_ends_and_frees_its_slot(
    native_engine: Engine,
) -> None:
    """The oldest holds the budget; a younger one is pre-empted and told to stop while it
    waits: it ends with SlotStopped, and the oldest finishes."""
    engine = native_engine
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 2, grow=8)
    stop = threading.Event()
    outcome: list[object] = []

    def young() -> None:
        loop = batch.acquire()
        assert loop is not None
        try:
            gen = engine.generate_ids(
                [50, 51, 52], _settings(GREEDY, CONTEXT, None), None, stop.is_set, True, loop=loop
            )
            gen.run()
            outcome.append(gen.stats.finish_reason)
        except SlotStopped:
            outcome.append("stopped")
        finally:
            batch.release(loop)

    old_loop = batch.acquire()
    assert old_loop is not None
    old = engine.generate_ids(
        [3, 4, 5], _settings(GREEDY, CONTEXT - 10, None), ignore_eos=True, loop=old_loop
    )
    tokens = iter(old)
    next(tokens)  # the oldest is admitted first
    thread = threading.Thread(target=young, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    for _ in tokens:
        if batch.preemptions and not stop.is_set():
            stop.set()
        assert time.monotonic() < deadline
    batch.release(old_loop)
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert batch.preemptions >= 1
    assert outcome in (["stopped"], ["stop"])
    assert batch.busy == 0


def test_drafted_tokens_grow_and_roll_back_through_pre_emptions(native_engine: Engine) -> None:
    """Speculative decoding on the slots (serve --speculative): a verifying run of several
    tokens grows its reservation alone, drafts not kept roll back, pre-emptions come between;
    the answers are still the solo ones, tokens and log-probs."""
    engine = native_engine
    prompts = [[5 + i, 6, 7, 5 + i, 6, 7, 9] for i in range(4)]  # repeats: drafts to verify
    settings = [_settings(GREEDY, 30, None) for _ in prompts]
    references = [_solo(engine, p, s) for p, s in zip(prompts, settings, strict=True)]
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 4, grow=8)
    admitted_together(batch, 4)  # 4 x (7 + 8) = 60 of 64: the first to grow pre-empts
    engine.speculative = True
    try:
        answers = _together(engine, batch, prompts, settings)
    finally:
        engine.speculative = False
    assert any(answer.drafted for answer in answers)  # verifying runs happened
    assert batch.preemptions > 0
    for answer, reference in zip(answers, references, strict=True):
        assert answer.token_ids == reference.token_ids
        assert answer.logprobs == reference.logprobs
