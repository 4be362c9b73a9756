"""The engine on the real default model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.modes import MODES
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message

pytestmark = [pytest.mark.default_model, pytest.mark.usefixtures("exact_default_precision")]
GREEDY_48 = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=48)


@pytest.fixture(scope="module")
def engine(default_model_dir: Path) -> Engine:
    return Engine(default_model_dir, max_context=2048)


def test_capital_of_france_in_both_loops(engine: Engine) -> None:
    answers = {}
    for mode in MODES:
        engine.reset()
        gen = engine.chat([Message("user", "What is the capital of France?")], GREEDY_48, mode)
        stats = gen.run()
        answers[mode] = (gen.text, stats.token_ids)
        assert "Paris" in gen.text
        assert stats.finish_reason == "eos"
        assert 1.0 <= stats.perplexity < 3.0  # the model is sure of this answer
    assert answers["naive"] == answers["iobinding"] == answers["nocache"]


def test_second_turn_reuses_the_first(engine: Engine) -> None:
    engine.reset()
    history = [Message("user", "What is the capital of France?")]
    first = engine.chat(history, GREEDY_48)
    first.run()
    history += [Message("assistant", first.text), Message("user", "And of Italy?")]
    second = engine.chat(history, GREEDY_48)
    stats = second.run()
    assert stats.reused_tokens >= first.stats.prompt_tokens
    assert stats.prompt_tokens - stats.reused_tokens < 20
    assert "Rome" in second.text
