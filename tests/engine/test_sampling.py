"""Sampling: greedy, temperature, top-k, top-p, repetition penalty, seeds, log-probs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from chatapp.engine.sampling import (
    Sampler,
    SamplingSettings,
    log_softmax_at,
    token_logprobs,
    top_logprobs,
)

LOGITS = np.array([1.0, 3.0, 2.5, -1.0, 0.0, 2.9], dtype=np.float32)


def draws(settings: SamplingSettings, n: int = 400, history: list[int] | None = None) -> list[int]:
    sampler = Sampler(settings)
    return [sampler(LOGITS, history or []) for _ in range(n)]


def test_greedy_takes_the_argmax() -> None:
    assert set(draws(SamplingSettings(temperature=0.0), 20)) == {1}


def test_top_k_keeps_only_the_k_best() -> None:
    picked = set(draws(SamplingSettings(temperature=1.5, top_k=2, top_p=1.0, seed=1)))
    assert picked == {1, 5}


def test_top_p_keeps_the_smallest_head_reaching_p() -> None:
    # softmax of LOGITS: token 1 alone has ~0.35, 1+5 ~0.67, 1+5+2 ~0.88
    picked = set(draws(SamplingSettings(temperature=1.0, top_k=0, top_p=0.6, seed=3)))
    assert picked == {1, 5}


def test_temperature_spreads_choices() -> None:
    hot = set(draws(SamplingSettings(temperature=5.0, top_k=0, top_p=1.0, seed=5)))
    assert len(hot) == 6


def test_same_seed_same_choices_other_seed_differs() -> None:
    s = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, seed=11)
    assert draws(s, 50) == draws(s, 50)
    other = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, seed=12)
    assert draws(s, 50) != draws(other, 50)


def test_repetition_penalty_steers_away_from_seen_tokens() -> None:
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.5)
    # Token 1 (3.0) seen -> 2.0, so 5 (2.9) wins; negative logits get more negative.
    assert Sampler(settings)(LOGITS, [1]) == 5
    assert Sampler(SamplingSettings(temperature=0.0, repetition_penalty=1.0))(LOGITS, [1]) == 1


def test_frequency_of_samples_follows_the_distribution() -> None:
    settings = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0, seed=0)
    picks = np.bincount(draws(settings, 4000), minlength=LOGITS.size) / 4000
    probs = np.exp(LOGITS - LOGITS.max())
    probs /= probs.sum()
    np.testing.assert_allclose(picks, probs, atol=0.03)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -1.0),
        ("top_k", -2),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("repetition_penalty", 0.0),
        ("max_new_tokens", 0),
    ],
)
def test_invalid_settings_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError):
        Sampler(SamplingSettings(**{field: value}))


def test_log_probs_are_log_softmax() -> None:
    probs = np.exp(LOGITS.astype(np.float64))
    probs /= probs.sum()
    assert log_softmax_at(LOGITS, 2) == pytest.approx(math.log(probs[2]))
    rows = np.stack([LOGITS, LOGITS[::-1]])
    got = token_logprobs(rows, [0, 0])
    assert got[0] == pytest.approx(math.log(probs[0]))
    assert got[1] == pytest.approx(math.log(probs[-1]))


def test_token_logprobs_are_the_same_in_any_block_size() -> None:
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(9, 300_000)).astype(np.float32)  # a Gemma-sized row: 3 per block
    targets = [int(t) for t in rng.integers(0, 300_000, size=9)]
    one_by_one = token_logprobs(rows, targets, rows=1)
    np.testing.assert_allclose(token_logprobs(rows, targets), one_by_one, rtol=1e-6)
    np.testing.assert_allclose(token_logprobs(rows, targets, rows=64), one_by_one, rtol=1e-6)


def test_top_logprobs_are_the_most_likely_tokens_in_order() -> None:
    probs = np.exp(LOGITS.astype(np.float64))
    probs /= probs.sum()
    top = top_logprobs(LOGITS, 3)
    assert [i for i, _ in top] == [1, 5, 2]
    assert [lp for _, lp in top] == pytest.approx([math.log(probs[i]) for i in (1, 5, 2)])
    assert len(top_logprobs(LOGITS, 50)) == LOGITS.size  # never more than the vocabulary


# ---- logit_bias (OpenAI's semantics) ------------------------------------------------------
def test_a_ban_of_minus_100_takes_the_greedy_token_away() -> None:
    banned = SamplingSettings(temperature=0.0, logit_bias=((1, -100.0),))
    assert Sampler(banned)(LOGITS, []) == 5  # the next best
    sampled = replace(banned, temperature=1.5, top_k=0, top_p=1.0, seed=2)
    assert 1 not in draws(sampled)


def test_plus_100_forces_a_token_and_small_biases_add() -> None:
    assert Sampler(SamplingSettings(temperature=0.0, logit_bias=((3, 100.0),)))(LOGITS, []) == 3
    forced = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, seed=4, logit_bias=((4, 100.0),))
    assert set(draws(forced, 100)) == {4}
    # 2.5 + 0.6 > 3.0: a small bias changes the order without banning anything
    assert Sampler(SamplingSettings(temperature=0.0, logit_bias=((2, 0.6),)))(LOGITS, []) == 2


def test_the_bias_leaves_the_callers_logits_raw() -> None:
    row = LOGITS.copy()
    Sampler(SamplingSettings(temperature=0.0, logit_bias=((1, -100.0), (3, 50.0))))(row, [])
    assert np.array_equal(row, LOGITS)  # log-probs are read from the raw row afterwards


def test_a_bias_outside_the_vocabulary_or_banning_everything_is_refused() -> None:
    with pytest.raises(ValueError, match="vocabulary has 6 tokens"):
        Sampler(SamplingSettings(temperature=0.0, logit_bias=((6, 1.0),)))(LOGITS, [])
    every = tuple((i, -100.0) for i in range(LOGITS.size))
    with pytest.raises(ValueError, match="bans every token"):
        Sampler(SamplingSettings(temperature=0.0, logit_bias=every))(LOGITS, [])
    for bad in (((0, 100.5),), ((-1, 1.0),), ((0, math.nan),)):
        with pytest.raises(ValueError, match="logit bias"):
            SamplingSettings(logit_bias=bad).validate()


# ---- tokens no answer may contain, and the end of text before min_new_tokens ---------------
def test_a_never_token_is_drawn_around_greedy_and_sampled() -> None:
    assert Sampler(SamplingSettings(temperature=0.0), never=[1])(LOGITS, []) == 5
    sampled = SamplingSettings(temperature=1.5, top_k=0, top_p=1.0, seed=2)
    sampler = Sampler(sampled, never=[1, 5])
    picks = [sampler(LOGITS, []) for _ in range(2000)]
    assert {1, 5}.isdisjoint(picks) and {0, 2, 3, 4} <= set(picks)
    # Drawn around in proportion: the others keep their odds among themselves.
    rest = np.array([0, 2, 3, 4])
    odds = np.exp(LOGITS[rest] / 1.5) / np.exp(LOGITS[rest] / 1.5).sum()
    counts = np.array([picks.count(int(t)) for t in rest]) / len(picks)
    np.testing.assert_allclose(counts, odds, atol=0.04)


def test_avoid_holds_for_one_call_and_the_raw_row_is_left_alone() -> None:
    sampler, row = Sampler(SamplingSettings(temperature=0.0)), LOGITS.copy()
    assert sampler(row, [], frozenset({1})) == 5
    assert sampler(row, []) == 1  # the next call may choose it again
    assert np.array_equal(row, LOGITS)


def test_when_only_avoided_tokens_are_allowed_one_is_still_chosen() -> None:
    """A grammar that must end allows only the end of text: it ends, even before min tokens."""
    only_end = np.full(LOGITS.size, -np.inf, dtype=np.float32)
    only_end[3] = 0.0
    assert Sampler(SamplingSettings(temperature=0.0))(only_end, [], frozenset({3})) == 3
    sampled = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, seed=0)
    assert Sampler(sampled)(only_end, [], frozenset({3})) == 3


def test_never_ids_outside_the_vocabulary_are_ignored() -> None:
    assert Sampler(SamplingSettings(temperature=0.0), never=[1, 99])(LOGITS, []) == 5


def test_min_new_tokens_below_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="min new tokens"):
        SamplingSettings(min_new_tokens=-1).validate()


def test_the_penalty_looks_at_every_token_or_the_last_n() -> None:
    """All tokens by default (transformers', vLLM's); n: the last n (llama.cpp's repeat_last_n);
    0: none."""
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.5)
    seen_long_ago = [1] + [0] * 64  # token 1 (3.0) is 65 tokens back
    assert Sampler(settings)(LOGITS, seen_long_ago) == 5
    assert Sampler(replace(settings, penalty_last_n=64))(LOGITS, seen_long_ago) == 1
    assert Sampler(replace(settings, penalty_last_n=0))(LOGITS, [1]) == 1
    assert Sampler(replace(settings, penalty_last_n=1))(LOGITS, [0, 1]) == 5
    with pytest.raises(ValueError, match="last tokens"):
        SamplingSettings(penalty_last_n=-2).validate()
