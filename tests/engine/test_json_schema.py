"""JSON schemas before the grammar library: the hostile corpus refused in one line, the process
alive (the native compiler runs in a child process here), and the copy that is compiled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.structured.constraints import ConstraintError, OutputFormat, TokenConstraint
from chatapp.engine.structured.json_schema import INTEGER_BOUND, check_schema, prepared_schema
from tests.hostile_schemas import (
    ACCEPTED,
    REFUSED_BY_CHECK,
    REFUSED_BY_LIBRARY,
    accepts,
    ref_chain,
)

pytest.importorskip("llguidance", reason="structured output needs llguidance")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Engine:
    return Engine(tiny_model_dir, threads=1)


@pytest.mark.parametrize("name", list(REFUSED_BY_CHECK))
def test_hostile_schemas_are_refused_before_the_library(name: str) -> None:
    schema, words = REFUSED_BY_CHECK[name]
    with pytest.raises(ConstraintError) as caught:
        check_schema(schema)
    message = str(caught.value)
    assert words in message and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("name", list(REFUSED_BY_LIBRARY))
def test_schemas_the_library_refuses_are_one_line_at_the_start(engine: Engine, name: str) -> None:
    schema, words = REFUSED_BY_LIBRARY[name]
    check_schema(schema)  # not the checker's to refuse
    with pytest.raises(ConstraintError) as caught:
        engine.constraints.check(OutputFormat.json_schema(schema))
    message = str(caught.value)
    assert words in message and "\n" not in message, message


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_schemas_near_the_limits_still_work(engine: Engine, name: str) -> None:
    constraint = engine.constraints.start(OutputFormat.json_schema(ACCEPTED[name]))
    masked = constraint.masked(np.zeros(engine.info.vocab_size, dtype=np.float32))
    assert np.isfinite(masked).any()


# The whole corpus through the real compiler in a child: a crash there fails this test
# instead of ending pytest. The last line compiles the 3,000-link chain with no check at all,
# on the compile thread's stack: the second defence holds alone.
CHILD = """
import json, sys
from chatapp.engine.structured.constraints import ConstraintError, OutputFormat, on_big_stack
from chatapp.engine.engine import Engine
from tests.hostile_schemas import REFUSED_BY_CHECK, REFUSED_BY_LIBRARY, ref_chain
import llguidance

engine = Engine(sys.argv[1], threads=1)
for name, (schema, _) in {**REFUSED_BY_CHECK, **REFUSED_BY_LIBRARY}.items():
    try:
        engine.constraints.check(OutputFormat.json_schema(schema))
        print(json.dumps([name, "accepted"]), flush=True)
    except ConstraintError as exc:
        print(json.dumps([name, str(exc)]), flush=True)
tokenizer = engine.constraints.ll_tokenizer
grammar = llguidance.LLMatcher.grammar_from_json_schema(ref_chain(3000))
matcher = on_big_stack(lambda: llguidance.LLMatcher(tokenizer, grammar, log_level=0))
print(json.dumps(["unchecked chain", "compiled" if not matcher.is_error() else "refused"]))
"""


def test_the_corpus_never_crashes_the_compiler(tiny_model_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tiny_model_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, f"the child died ({out.returncode}): {out.stderr[-2000:]}"
    results = dict(json.loads(line) for line in out.stdout.splitlines())
    for name, (_, words) in {**REFUSED_BY_CHECK, **REFUSED_BY_LIBRARY}.items():
        assert words in results[name], (name, results[name])
    assert results["unchecked chain"] in ("compiled", "refused")


def test_the_stack_of_the_compile_thread_is_what_saves_an_unchecked_chain() -> None:
    """Without the big stack the same unchecked chain kills a thread's process: the reason
    the compiler has its own thread (an 8 MB thread here, as a server's would have)."""
    child = (
        "import threading, llguidance\n"
        "from tests.hostile_schemas import ref_chain\n"
        "g = llguidance.LLMatcher.grammar_from_json_schema(ref_chain(6000))\n"
        "threading.stack_size(8 << 20)\n"
        "t = threading.Thread(target=lambda: llguidance.LLMatcher.validate_grammar(g))\n"
        "t.start(); t.join(); print('survived')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    if "survived" in out.stdout:
        pytest.skip("this llguidance no longer overflows an 8 MB stack on a $ref chain")
    assert out.returncode != 0


def test_a_schema_no_value_matches_is_refused_when_it_starts(engine: Engine) -> None:
    """A grammar the library accepts but that allows no first token: refused by start(), not
    in the middle of an answer."""
    with pytest.raises(ConstraintError, match="cannot be used"):
        engine.constraints.start(OutputFormat.json_schema({"enum": []}))


# ---- the copy that is compiled -------------------------------------------------------------
def test_objects_that_list_properties_are_closed_as_llama_cpp_closes_them() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"x": {}}},
            "open": {"type": "object", "properties": {"x": {}}, "additionalProperties": True},
            "typed": {"properties": {"x": {}}, "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"properties": {"y": {}}}},
            "any": {"type": "object"},
        },
        "required": ["a", "not_listed"],
        "$defs": {"D": {"properties": {"z": {}}}},
        "default": {"properties": {"kept": 1}},
    }
    out = prepared_schema(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["not_listed"] == {}  # required: still allowed, any value
    props = out["properties"]
    assert props["a"]["additionalProperties"] is False
    assert props["open"]["additionalProperties"] is True
    assert props["typed"]["additionalProperties"] == {"type": "string"}
    assert props["list"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in props["any"]  # no properties listed: any object
    assert out["$defs"]["D"]["additionalProperties"] is False
    assert out["default"] == {"properties": {"kept": 1}}  # data, not a schema
    assert "additionalProperties" not in schema  # the caller's schema is untouched


def test_allof_parts_and_conditions_are_left_open() -> None:
    schema = {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
    out = prepared_schema(schema)
    assert all("additionalProperties" not in part for part in out["allOf"])
    single = prepared_schema({"allOf": [{"properties": {"a": {}}}]})
    assert single["allOf"][0]["additionalProperties"] is False
    conditions = prepared_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "not": {"properties": {"b": {}}, "required": ["b"]},
            "if": {"properties": {"a": {"const": 1}}},
            "then": {"properties": {"n": {"type": "integer"}}},
        }
    )
    for key in ("not", "if", "then"):  # conditions on the value, not its shape: as written
        assert "additionalProperties" not in conditions[key]
    assert "maximum" not in conditions["then"]["properties"]["n"]
    assert conditions["additionalProperties"] is False


def test_unbounded_integers_and_numbers_get_16_digits() -> None:
    assert prepared_schema({"type": "integer"}) == {
        "type": "integer",
        "minimum": -INTEGER_BOUND,
        "maximum": INTEGER_BOUND,
    }
    kept = prepared_schema({"type": ["integer", "null"], "minimum": 0})
    assert kept["minimum"] == 0 and kept["maximum"] == INTEGER_BOUND
    assert "maximum" not in prepared_schema({"type": "integer", "exclusiveMaximum": 5})
    assert prepared_schema({"type": "number"})["maximum"] == INTEGER_BOUND  # integral part
    assert "minimum" not in prepared_schema({"type": "string"})


def test_the_compiled_grammar_closes_objects_and_bounds_integers(engine: Engine) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def start() -> TokenConstraint:
        return engine.constraints.start(OutputFormat.json_schema(schema))

    assert accepts(engine, start(), '{"n":' + "9" * 16 + "}")
    assert not accepts(engine, start(), '{"n":' + "9" * 17)
    assert not accepts(engine, start(), '{"n":1,"')  # no property beyond the listed one
    assert accepts(engine, start(), '{"n":-12}')


def test_a_chain_under_the_limit_compiles_on_the_compile_thread(engine: Engine) -> None:
    engine.constraints.check(OutputFormat.json_schema(ref_chain(900)))


def test_the_compile_thread_falls_back_to_the_default_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stack the system will not reserve (a `ulimit -v`, here 64 TB): the work still runs,
    and the process-wide stack size is as it was."""
    import threading

    from chatapp.engine.structured import constraints

    before = threading.stack_size()
    monkeypatch.setattr(constraints, "COMPILE_STACK_BYTES", 1 << 46)
    assert constraints.on_big_stack(lambda: 42) == 42
    with pytest.raises(KeyError):
        constraints.on_big_stack(lambda: {}["x"])  # the work's own error comes back
    assert threading.stack_size() == before
