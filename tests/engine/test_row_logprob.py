"""Each generated token's log-probability: ONNX Runtime's LogSoftmax, numpy as the fallback."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from chatapp.engine import row_logprob
from chatapp.engine.row_logprob import RowLogProb, log_softmax_session


def reference(logits: np.ndarray, token: int) -> float:
    wide = logits.astype(np.float64)
    top = wide.max()
    return float(wide[token] - top - np.log(np.exp(wide - top).sum()))


@pytest.mark.parametrize("vocab", [6, 49_152, 262_144])
def test_matches_float64_log_softmax_at_real_vocabulary_sizes(vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    logprob = RowLogProb(vocab)
    assert log_softmax_session() is not None  # the session path is what runs here
    for _ in range(3):  # the same bound buffers, row after row
        logits = (rng.normal(size=vocab) * 4 + 10).astype(np.float32)
        for token in (0, int(logits.argmax()), int(logits.argmin()), vocab - 1):
            assert logprob(logits, token) == pytest.approx(reference(logits, token), abs=2e-4)


def test_rows_it_cannot_bind_take_numpy_with_the_same_answer() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(size=1000).astype(np.float32)
    logprob = RowLogProb(1000)
    expected = reference(logits, 7)
    assert logprob(logits.astype(np.float64), 7) == pytest.approx(expected, abs=1e-5)
    strided = np.repeat(logits, 2)[::2]  # not contiguous
    assert logprob(strided, 7) == pytest.approx(expected, abs=1e-5)
    assert logprob(logits[None, :], 7) == pytest.approx(expected, abs=1e-5)  # [1, vocab]


def test_without_a_session_numpy_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_logprob, "log_softmax_session", lambda: None)
    logits = np.linspace(-3, 3, 500, dtype=np.float32)
    assert RowLogProb(500)(logits, 499) == pytest.approx(reference(logits, 499), abs=1e-5)


def test_a_token_outside_the_vocabulary_is_refused_not_read() -> None:
    logits = np.zeros(10, dtype=np.float32)
    with pytest.raises(IndexError):
        RowLogProb(10)(logits, 10)


def test_non_finite_logits_give_nan_as_numpy_does() -> None:
    logits = np.zeros(64, dtype=np.float32)
    logits[3] = np.nan
    assert np.isnan(RowLogProb(64)(logits, 0))


def test_a_failing_run_falls_back_to_numpy_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    logits = np.linspace(-2, 2, 300, dtype=np.float32)
    logprob = RowLogProb(300)
    runs = {"n": 0}

    def broken(*_args: object) -> None:
        runs["n"] += 1
        raise RuntimeError("onnxruntime went away")

    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", broken)
    assert logprob(logits, 10) == pytest.approx(reference(logits, 10), abs=1e-5)
    assert logprob(logits, 20) == pytest.approx(reference(logits, 20), abs=1e-5)
    assert runs["n"] == 1  # not tried again on every token
