"""The fidelity metrics on cases whose answers are known in closed form, the windows, and the
engine's two ways of reading a window (engine/bench/fidelity.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.bench.fidelity import (
    FidelityTally,
    engine_window_logits,
    kl_divergence,
    log_softmax,
    scored_positions,
    windows,
)
from chatapp.engine.engine import Engine


def test_identical_logits_diverge_by_nothing_whatever_their_offset() -> None:
    logits = np.random.default_rng(0).normal(size=(5, 11)) * 4
    assert np.allclose(kl_divergence(logits, logits), 0.0, atol=1e-12)
    assert np.allclose(kl_divergence(logits, logits + 7.5), 0.0, atol=1e-12)


def test_a_known_pair_gives_its_closed_form() -> None:
    """p = (1/2, 1/2), q = (1/4, 3/4): KL(p || q) = 1/2 ln 2 + 1/2 ln(2/3); and back again."""
    p, q = np.log([[0.5, 0.5]]), np.log([[0.25, 0.75]])
    assert kl_divergence(p, q)[0] == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert kl_divergence(q, p)[0] == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5))


def test_log_softmax_of_huge_logits_stays_finite() -> None:
    out = log_softmax(np.array([[1e6, 1e6 - math.log(3)]]))  # exp(1e6) overflows
    assert out[0] == pytest.approx([math.log(0.75), math.log(0.25)], abs=1e-6)


def test_the_tally_counts_agreement_perplexity_and_the_percentile() -> None:
    """A uniform model over 4 tokens: perplexity 4 whatever the targets; it agrees with a
    reference whose top token is the first (argmax of a tie is the first) on the rows where
    the reference's top is token 0."""
    reference = np.log(np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.4, 0.2, 0.2, 0.2]]))
    uniform = np.zeros((3, 4))
    tally = FidelityTally()
    tally.add(reference, uniform, [0, 1, 3])
    m = tally.metrics()
    assert m.positions == 3
    assert m.perplexity == pytest.approx(4.0)
    assert m.top1_agreement == pytest.approx(2 / 3)
    each = [sum(p * math.log(p / 0.25) for p in row) for row in np.exp(reference)]
    assert m.mean_kld == pytest.approx(sum(each) / 3)
    assert m.p99_kld == pytest.approx(float(np.percentile(each, 99)))
    assert m.p99_kld == pytest.approx(max(each))  # two of three rows share the top value
    own = FidelityTally()
    own.add(reference, reference, [0, 1, 3])
    probs = np.exp(reference)[[0, 1, 2], [0, 1, 3]]
    assert own.metrics().perplexity == pytest.approx(math.exp(-np.log(probs).mean()))
    assert own.metrics().mean_kld == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="targets"):
        own.add(reference, reference, [0, 1])


def test_windows_are_whole_and_score_their_second_half() -> None:
    assert windows(1100, 512) == [range(0, 512), range(512, 1024)]
    assert windows(511, 512) == []
    assert scored_positions(512) == range(256, 511)
    with pytest.raises(ValueError):
        windows(100, 2)


def test_a_window_read_as_a_prompt_and_as_steps(tiny_model_dir: Path) -> None:
    """The prompt way's rows are those of the same prompt with every row's logits (two paths
    of the loop); decoding the second half step by step predicts the same tokens within what
    a step's rounding can move: the logits are close, and greedy picks agree where the
    prompt's top two are not near a tie."""
    engine = Engine(tiny_model_dir, threads=1, max_context=64)
    ids = [3 + (7 * i) % 50 for i in range(32)]
    scored = scored_positions(len(ids))
    prompt = engine_window_logits(engine, ids, "prompt")
    assert prompt.shape == (len(scored), engine.info.vocab_size)
    loop = engine.loop()
    loop.reset()
    every = np.array(loop.forward(ids, all_logits=True).logits)[scored.start : scored.stop]
    assert np.array_equal(prompt, every)
    steps = engine_window_logits(engine, ids, "steps")
    assert steps.shape == prompt.shape
    spread = np.abs(prompt).max()
    assert np.abs(steps - prompt).max() < 0.05 * spread
    ordered = np.sort(prompt, axis=-1)
    clear = ordered[:, -1] - ordered[:, -2] > 0.1 * spread
    assert (steps.argmax(-1) == prompt.argmax(-1))[clear].all()
    assert loop.cached == []  # the next answer starts from an empty cache
    with pytest.raises(ValueError, match="a way is one of"):
        engine_window_logits(engine, ids, "sideways")
