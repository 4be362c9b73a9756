"""Constrained decoding in the shared sampling step: both loops, greedy and sampled."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY, SamplingSettings
from chatapp.engine.structured import constraints
from chatapp.engine.structured.constraints import ConstraintError, OutputFormat
from chatapp.engine.text.chat import Message

pytest.importorskip("llguidance", reason="structured output needs llguidance")

ASK = [Message("user", "Pick one.")]
CHOICE = {
    "type": "object",
    "properties": {
        "pick": {"enum": ["alpha", "beta"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["pick", "n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(varied_model_dir: Path) -> Engine:
    return Engine(varied_model_dir, threads=1)


@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_greedy_answers_match_the_schema_and_agree_across_loops(engine: Engine, mode: str) -> None:
    fmt = OutputFormat.json_schema(CHOICE)
    gen = engine.chat(ASK, replace(GREEDY, max_new_tokens=60), mode, output_format=fmt)
    stats = gen.run()
    value = json.loads(gen.text)
    assert value["pick"] in ("alpha", "beta") and 0 <= value["n"] <= 99
    # The grammar ended the answer (nothing may follow the object): no EOS step was needed.
    assert stats.finish_reason == "eos"
    other = "iobinding" if mode == "naive" else "naive"
    again = engine.chat(ASK, replace(GREEDY, max_new_tokens=60), other, output_format=fmt)
    again.run()
    assert again.text == gen.text


def test_sampled_answers_always_validate(engine: Engine) -> None:
    for seed in range(5):
        settings = SamplingSettings(
            temperature=1.5, top_k=0, top_p=1.0, seed=seed, max_new_tokens=60
        )
        gen = engine.chat(ASK, settings, output_format=OutputFormat.json_schema(CHOICE))
        gen.run()
        assert json.loads(gen.text)["pick"] in ("alpha", "beta")


def test_unconstrained_answers_are_not_json(engine: Engine) -> None:
    """The control: the random model alone does not write this JSON."""
    gen = engine.chat(ASK, replace(GREEDY, max_new_tokens=20))
    gen.run()
    assert not gen.text.startswith('{"pick":')


def test_logprobs_stay_those_of_the_raw_logits(engine: Engine) -> None:
    fmt = OutputFormat.json_schema(CHOICE)
    constrained = engine.chat(ASK, replace(GREEDY, max_new_tokens=3), output_format=fmt)
    events = list(constrained)
    assert all(np.isfinite(e.logprob) and e.logprob <= 0 for e in events)
    assert constrained.text.startswith('{"')


def test_masked_forbids_tokens_and_keeps_the_raw_row(engine: Engine) -> None:
    constraint = engine.constraints.start(OutputFormat.json_object())
    logits = np.zeros(engine.info.vocab_size, dtype=np.float32)
    masked = constraint.masked(logits)
    allowed = np.flatnonzero(np.isfinite(masked))
    assert [engine.tokenizer.decode([int(i)]) for i in allowed] == ["{"]
    assert np.all(logits == 0)  # the caller's row is untouched


def test_bad_schemas_give_one_line(engine: Engine) -> None:
    for schema in ({"type": "objectx"}, {"$ref": "#/$defs/none"}):
        with pytest.raises(ConstraintError) as caught:
            engine.constraints.check(OutputFormat.json_schema(schema))
        assert "\n" not in str(caught.value)
    with pytest.raises(ConstraintError, match="JSON object"):
        OutputFormat.json_schema([])  # type: ignore[arg-type]


def test_strict_refuses_keywords_the_library_lacks(engine: Engine) -> None:
    schema = {"type": "string", "format": "no-such-format"}
    engine.constraints.check(OutputFormat.json_schema(schema))  # not strict: ignored
    with pytest.raises(ConstraintError):
        engine.constraints.check(OutputFormat.json_schema(schema, strict=True))


def test_without_the_library_a_constraint_is_refused(
    varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constraints, "library_available", lambda: False)
    engine = Engine(varied_model_dir, threads=1)
    with pytest.raises(ConstraintError, match="llguidance"):
        engine.chat(ASK, GREEDY, output_format=OutputFormat.json_object())
    gen = engine.chat(ASK, replace(GREEDY, max_new_tokens=3))  # plain answers still work
    assert gen.run().generated_tokens == 3


def test_hostile_schemas_are_refused_or_bounded(engine: Engine) -> None:
    deep: dict[str, object] = {"type": "string"}
    for _ in range(3000):  # past Python's own recursion limit
        deep = {"type": "array", "items": deep}
    with pytest.raises(ConstraintError, match="nested too deeply"):
        OutputFormat.json_schema(deep)
    shallow: dict[str, object] = {"type": "string"}
    for _ in range(150):  # past llguidance's limit (128), inside Python's
        shallow = {"type": "array", "items": shallow}
    with pytest.raises(ConstraintError, match="nested too deeply"):  # refused before it
        engine.constraints.check(OutputFormat.json_schema(shallow))
    with pytest.raises(ConstraintError, match="longer than"):
        OutputFormat.json_schema({"enum": ["x" * 1000] * 300})
    huge = OutputFormat.json_schema({"type": "string", "maxLength": 10**9})
    engine.constraints.start(huge).masked(np.zeros(engine.info.vocab_size, dtype=np.float32))
