"""Reservations that grow, and recompute pre-emption: a sequence reserves its prompt and a piece
of its answer, grows piece by piece, and where the budget is full the most recently arrived one
is pre-empted (its KV dropped), waits at the head of the queue, and computes its prompt and its
tokens again. Each answer stays its solo answer bit for bit (a native graph at the fast
precision): the solo references are computed here, at run time, with the engine's own loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine.batch_loop import BatchLoop
from chatapp.engine.engine import Engine
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotBatch
from tests.engine.slot_tasks import Client, add, run
from tests.engine.test_slots import native_dir  # noqa: F401 (a fixture)

CONTEXT = 64
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
    """Every prompt a task of one loop over `batch`: the loop admits them in one pass (each
    holds its first reservation before any grows) and their first steps run as one."""
    clients = [Client(p, s) for p, s in zip(prompts, settings, strict=True)]
    tasks = BatchLoop(batch)
    for client in clients:
        add(tasks, engine, client)
    run(tasks, clients)
    return [c.stats for c in clients if c.stats is not None]


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
    # 4 x (4 + 8) = 48 of 64, admitted in one pass: the first to grow pre-empts.
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
    one (with whole-context reservations only one would ever start)."""
    engine = native_engine
    prompts = [[20 + i, 21, 22] for i in range(4)]
    settings = [_settings(GREEDY, CONTEXT, None) for _ in prompts]
    references = [_solo(engine, p, s) for p, s in zip(prompts, settings, strict=True)]
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 4)
    assert batch.grow == 8  # 64 / (2 x 4)
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
    waits: it ends with SlotStopped (or stopped at a step), and the oldest finishes."""
    engine = native_engine
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 2, grow=8)
    tasks = BatchLoop(batch)
    old = Client([3, 4, 5], _settings(GREEDY, CONTEXT - 10, None))
    young = Client([50, 51, 52], _settings(GREEDY, CONTEXT, None), should_stop=lambda: stop)
    stop = False

    def on_old_token(index: int) -> None:
        nonlocal stop
        if index == 0:
            add(tasks, engine, young)  # after the oldest: it is the younger
        stop = stop or batch.preemptions > 0

    old.on_token = on_old_token
    add(tasks, engine, old)
    run(tasks, [old, young])
    assert batch.preemptions >= 1
    assert young.stopped or (young.stats is not None and young.stats.finish_reason == "stop")
    assert old.stats is not None and old.stats.generated_tokens == CONTEXT - 10
    assert batch.busy == 0


def test_a_sequence_stopped_while_waiting_for_room_ends_at_once(native_engine: Engine) -> None:
    """The budget is held by the oldest; a newcomer waits for room (WAIT) and, told to stop,
    ends without a token, leaving its place in the queue."""
    engine = native_engine
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 2, grow=CONTEXT)
    tasks = BatchLoop(batch)
    stop = False
    old = Client([3, 4, 5], _settings(GREEDY, 60, None))  # reserves 63 of 64 at once
    waiting = Client([60, 61], _settings(GREEDY, 20, None), should_stop=lambda: stop)

    def on_old_token(index: int) -> None:
        nonlocal stop
        if index == 0:
            add(tasks, engine, waiting)
        if index == 5:
            assert batch.reservation(1) == 0 and waiting.stats is not None  # it waits
            stop = True

    old.on_token = on_old_token
    add(tasks, engine, old)
    run(tasks, [old, waiting])
    assert waiting.stats is not None and waiting.stats.generated_tokens == 0
    assert waiting.stats.finish_reason == "stop"
    assert old.stats is not None and old.stats.generated_tokens == 60 and batch.busy == 0


def test_drafted_tokens_grow_and_roll_back_through_pre_emptions(native_engine: Engine) -> None:
    """Speculative decoding on the slots (serve --speculative): a verifying run of several
    tokens grows its reservation alone, drafts not kept roll back, pre-emptions come between;
    the answers are still the solo ones, tokens and log-probs."""
    engine = native_engine
    prompts = [[5 + i, 6, 7, 5 + i, 6, 7, 9] for i in range(4)]  # repeats: drafts to verify
    settings = [_settings(GREEDY, 30, None) for _ in prompts]
    references = [_solo(engine, p, s) for p, s in zip(prompts, settings, strict=True)]
    batch = SlotBatch(engine.session, engine.info, engine.device, CONTEXT, 4, grow=8)
    # 4 x (7 + 8) = 60 of 64, admitted in one pass: the first to grow pre-empts.
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
