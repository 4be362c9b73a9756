"""The two loops: identical greedy tokens, prefix reuse across turns, stop, limits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.errors import ContextOverflowError
from chatapp.engine.loops import IOBindingLoop, NaiveLoop
from chatapp.engine.sampling import GREEDY, SamplingSettings
from chatapp.engine.text.chat import Message
from tests.convert.test_graph import STEP_TOLERANCE


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Engine:
    return Engine(tiny_model_dir, threads=1, max_context=256)


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


def run_ids(engine: Engine, ids: list[int], mode: str, n: int) -> list[int]:
    engine.loop(mode).reset()
    return engine.generate_ids(ids, greedy(n), mode, ignore_eos=True).run().token_ids


PROMPTS = [[5, 77, 130, 9], list(range(3, 60)), [200]]


@pytest.mark.parametrize("prompt", PROMPTS, ids=["short", "long", "one-token"])
def test_both_loops_produce_the_same_greedy_tokens(engine: Engine, prompt: list[int]) -> None:
    naive = run_ids(engine, prompt, "naive", 40)
    iob = run_ids(engine, prompt, "iobinding", 40)
    assert len(naive) == 40
    assert naive == iob


def test_loop_logits_match_a_full_forward_pass(engine: Engine) -> None:
    """Decoding token by token (each loop) gives the logits of one pass over everything."""
    ids = [7, 90, 33, 180, 41, 12, 250, 99]
    reference = engine.loop("naive")
    reference.reset()
    full = reference.forward(ids, all_logits=True).logits
    for mode in ("naive", "iobinding"):
        loop = engine.loop(mode)
        loop.reset()
        first = loop.forward(ids[:3], all_logits=True).logits
        rows = [first.copy()]
        for t in ids[3:]:
            last = loop.forward([t]).logits
            rows.append(last[None, :].copy())  # IO-Binding reuses its logits buffer
        # Steps run the graph's step branch (two int8 levels, tests/convert/test_graph.py).
        stepped = np.concatenate(rows)
        np.testing.assert_allclose(stepped, full, atol=STEP_TOLERANCE * np.abs(full).max())
        np.testing.assert_array_equal(stepped.argmax(-1), full.argmax(-1))


def test_iobinding_binds_one_buffer_as_past_and_present(engine: Engine) -> None:
    loop = engine.loop("iobinding")
    assert isinstance(loop, IOBindingLoop)
    loop.reset()
    key = loop.kv.bound_values()[engine.info.kv[0].past_name]
    before = key.numpy()[0, :, :5].copy()
    loop.forward([3, 4, 5, 6, 7])
    after = key.numpy()[0, :, :5]
    # The run wrote the new keys straight into the buffer bound as past: no copy came back.
    assert not np.allclose(before, after)
    assert key.shape()[2] == loop.max_context


def test_follow_up_turn_reuses_the_cached_prefix(engine: Engine) -> None:
    first = [9, 8, 7, 6, 5, 4, 3]
    for mode in ("naive", "iobinding"):
        engine.loop(mode).reset()
        gen1 = engine.generate_ids(first, greedy(6), mode, ignore_eos=True)
        answer = gen1.run().token_ids
        follow = [*first, *answer, 100, 101, 102]
        gen2 = engine.generate_ids(follow, greedy(6), mode, ignore_eos=True)
        warm = gen2.run()
        # All but the last answer token (never fed back) were cached.
        assert warm.reused_tokens == len(first) + len(answer) - 1
        cold = run_ids(engine, follow, mode, 6)
        assert warm.token_ids == cold


def test_diverging_history_truncates_the_cache(engine: Engine) -> None:
    for mode in ("naive", "iobinding"):
        loop = engine.loop(mode)
        loop.reset()
        engine.generate_ids([1, 2, 3, 4, 5, 6], greedy(3), mode, ignore_eos=True).run()
        gen = engine.generate_ids([1, 2, 3, 40, 41], greedy(5), mode, ignore_eos=True)
        warm = gen.run()
        assert warm.reused_tokens == 3
        assert warm.token_ids == run_ids(engine, [1, 2, 3, 40, 41], mode, 5)


def test_stop_flag_ends_within_one_step(engine: Engine) -> None:
    calls = {"n": 0}

    def stop_after_three() -> bool:
        calls["n"] += 1
        return calls["n"] >= 3

    engine.loop("iobinding").reset()
    gen = engine.generate_ids([5, 6, 7], greedy(100), should_stop=stop_after_three, ignore_eos=True)
    stats = gen.run()
    assert stats.finish_reason == "stop"
    assert stats.generated_tokens == 3


def test_max_new_tokens_past_the_context_stops_with_length(engine: Engine) -> None:
    prompt = list(range(3, 3 + 250))  # context is 256
    for mode in ("naive", "iobinding"):
        stats = run_stats(engine, prompt, mode, 100)
        assert stats.finish_reason == "length"
        assert stats.prompt_tokens + stats.generated_tokens == 256


def run_stats(engine: Engine, ids: list[int], mode: str, n: int):  # type: ignore[no-untyped-def]
    engine.loop(mode).reset()
    return engine.generate_ids(ids, greedy(n), mode, ignore_eos=True).run()


def test_prompt_longer_than_the_context_is_refused(engine: Engine) -> None:
    with pytest.raises(ContextOverflowError, match="256"):
        engine.generate_ids(list(range(3, 3 + 300)), GREEDY)


def test_eos_ends_the_answer(engine: Engine) -> None:
    """Make every token but eos unlikely: the loop must stop at once with reason eos."""
    eos = engine.info.eos_token_ids[0]
    gen = engine.generate_ids([5, 6], greedy(20))
    loop = gen.loop
    original = loop.forward

    def forward_with_eos(ids, all_logits=False, rows=None):  # type: ignore[no-untyped-def]
        step = original(ids, all_logits, rows)
        logits = step.logits.copy()
        logits[..., eos] = 1e6
        return dataclasses.replace(step, logits=logits)

    loop.forward = forward_with_eos  # type: ignore[method-assign]
    try:
        stats = gen.run()
    finally:
        del loop.forward
    assert stats.finish_reason == "eos"
    assert stats.generated_tokens == 0


def test_chat_with_sampling_is_reproducible_with_a_seed(engine: Engine) -> None:
    settings = SamplingSettings(temperature=0.9, top_k=20, top_p=0.9, seed=7, max_new_tokens=12)
    messages = [Message("user", "the then in an")]
    runs = []
    for _ in range(2):
        engine.reset()
        gen = engine.chat(messages, settings)
        runs.append(gen.run().token_ids)
    assert runs[0] == runs[1]
    assert len(runs[0]) > 0


def test_figures_of_a_run(engine: Engine) -> None:
    stats = run_stats(engine, [5, 6, 7, 8, 9, 10], "iobinding", 16)
    assert stats.ttft_s > 0
    assert len(stats.latencies_s) == 15  # tokens after the first
    assert stats.tokens_per_s == pytest.approx(15 / sum(stats.latencies_s))
    assert len(stats.logprobs) == 16
    assert np.isfinite(stats.perplexity) and stats.perplexity >= 1.0
    assert len(stats.prompt_logprobs) == 1  # sampled: a quarter of the 6 prompt tokens
    assert np.isfinite(stats.prompt_perplexity)
    assert all(s.run_s > 0 for s in stats.steps)


def test_loop_classes_name_their_modes() -> None:
    assert NaiveLoop.mode == "naive"
    assert IOBindingLoop.mode == "iobinding"


@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_top_logprobs_come_with_each_token_when_asked(engine: Engine, mode: str) -> None:
    engine.reset()
    generation = engine.generate_ids([5, 77, 130], greedy(5), mode, top_logprobs=3)
    events = [e for e in generation if not e.tail]  # the tokens, without held-back text
    assert len(events) == 5
    for event in events:
        ids = [i for i, _ in event.top_logprobs]
        logprobs = [lp for _, lp in event.top_logprobs]
        assert len(ids) == 3 and logprobs == sorted(logprobs, reverse=True)
        assert ids[0] == event.token_id  # greedy: the chosen token is the most likely
        assert logprobs[0] == pytest.approx(event.logprob, abs=1e-5)
    engine.reset()
    plain = list(engine.generate_ids([5, 77, 130], greedy(5), mode))
    assert [e.token_id for e in plain] == [e.token_id for e in events]
    assert all(e.top_logprobs == () for e in plain)  # nothing computed unless asked
