"""How the grammar libraries compare on the default model's vocabulary (docs/server.md).

llguidance (chatapp's pick), xgrammar and outlines-core, one per process: build the token
table, compile four JSON schemas (outlines-core's `Character` and pydantic `FooBar` test
schemas, a nested one with arrays, `pattern` and `anyOf`, and "any JSON object"), walk a valid
instance token by token (mask, check the token is allowed, advance: the mask time is measured)
and check that invalid instances are refused. Only llguidance is a dependency; install the
others beside it for the comparison, not into the app's environment:

    pip install --no-deps --target /tmp/grammar-libs \
        llguidance xgrammar outlines-core apache-tvm-ffi
    for lib in llguidance outlines xgrammar; do
        PYTHONPATH=/tmp/grammar-libs .venv/bin/python scripts/grammar_libraries.py $lib
    done

xgrammar imports torch at load although its masks can go into numpy (DLPack): the run puts a
stand-in torch module in place, which is enough for masks and not for its logits kernels.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from chatapp.cli.engine_cmds import resolve_model
from chatapp.server.token_text import byte_decoder

CHARACTER = {
    "$defs": {"Armor": {"enum": ["leather", "chainmail", "plate"], "type": "string"}},
    "properties": {
        "name": {"maxLength": 10, "type": "string"},
        "age": {"type": "integer"},
        "armor": {"$ref": "#/$defs/Armor"},
        "strength": {"type": "integer"},
    },
    "required": ["name", "age", "armor", "strength"],
    "type": "object",
}
FOOBAR = {
    "properties": {"foo": {"type": "integer"}, "bar": {"type": "string"}},
    "required": ["foo", "bar"],
    "type": "object",
}
NESTED = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
        },
        "score": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    },
    "required": ["name", "tags", "address", "score"],
}
DEEP = {"a": [1, {"b": [2, {"c": [3, {"d": None}]}]}], "e": "f"}
CASES: list[tuple[str, dict[str, Any], Any, list[Any]]] = [
    (
        "character",
        CHARACTER,
        {"name": "Aragorn", "age": 87, "armor": "chainmail", "strength": 18},
        [
            {"name": "Aragorn the Great", "age": 87, "armor": "plate", "strength": 1},
            {"name": "A", "age": 1, "armor": "wood", "strength": 2},
        ],
    ),
    (
        "foobar",
        FOOBAR,
        {"foo": 4, "bar": "baz baz baz bar"},
        [{"foo": "4", "bar": "x"}, {"foo": 4}],
    ),
    (
        "nested",
        NESTED,
        {
            "name": "Ada",
            "tags": ["math"],
            "address": {"city": "London", "zip": "12345"},
            "score": 9.5,
        },
        [
            {"name": "A", "tags": [], "address": {"city": "x", "zip": "12345"}, "score": 1},
            {"name": "A", "tags": ["a"], "address": {"city": "x", "zip": "1234"}, "score": None},
        ],
    ),
    ("any_object", {"type": "object"}, DEEP, [[1, 2]]),
]

Matcher = Any
Library = tuple[
    float,  # seconds to build the token table
    Callable[[dict[str, Any]], Matcher],  # compile a schema
    Callable[[Matcher], np.ndarray],  # the mask (int32 words) for the next token
    Callable[[Matcher, int], bool],  # advance
    Callable[[Matcher], bool],  # is the text complete?
]


def llguidance_library(tok: Any) -> Library:
    import llguidance
    import llguidance.hf
    import llguidance.numpy as lnp

    started = time.perf_counter()
    table = llguidance.hf.from_tokenizer(tok)
    prep = time.perf_counter() - started
    mask = lnp.allocate_token_bitmask(1, table.vocab_size)

    def compile_schema(schema: dict[str, Any]) -> Matcher:
        matcher = llguidance.LLMatcher(table, llguidance.LLMatcher.grammar_from_json_schema(schema))
        assert not matcher.is_error(), matcher.get_error()
        return matcher

    def step(matcher: Matcher) -> np.ndarray:
        lnp.fill_next_token_bitmask(matcher, mask, 0)
        return mask[0]

    return (
        prep,
        compile_schema,
        step,
        lambda m, t: bool(m.consume_token(t)),
        lambda m: bool(m.is_accepting()),
    )


def outlines_library(tok: Any) -> Library:
    import outlines_core
    from outlines_core.json_schema import build_regex_from_schema

    started = time.perf_counter()
    byte_of = byte_decoder()
    vocabulary: dict[bytes, list[int]] = {}
    specials = set(tok.all_special_tokens)
    for text, token in tok.get_vocab().items():
        if token == tok.eos_token_id or text in specials:
            continue
        try:
            key = bytes(byte_of[c] for c in text)
        except KeyError:
            continue
        vocabulary.setdefault(key, []).append(token)
    vocab = outlines_core.Vocabulary(tok.eos_token_id, vocabulary)
    prep = time.perf_counter() - started
    mask = np.full((1, (len(tok) + 31) // 32), -1, dtype=np.int32)

    def step(guide: Matcher) -> np.ndarray:
        guide.write_mask_into(mask.ctypes.data, mask.size, 4)
        return mask[0]

    def advance(guide: Matcher, token: int) -> bool:
        try:
            guide.advance(token, return_tokens=False)
        except Exception:
            return False
        return True

    return (
        prep,
        lambda s: outlines_core.Guide(
            outlines_core.Index(build_regex_from_schema(json.dumps(s)), vocab)
        ),
        step,
        advance,
        lambda g: bool(g.is_finished()),
    )


def xgrammar_library(tok: Any) -> Library:
    import tvm_ffi  # noqa: F401  (before the stand-in: it looks for a real torch)

    stand_in = types.ModuleType("torch")

    class Dtype:
        pass

    def attribute(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Dtype()

    stand_in.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    stand_in.dtype = Dtype  # type: ignore[attr-defined]
    stand_in.tensor = lambda *a, **k: None  # type: ignore[attr-defined]
    stand_in.__getattr__ = attribute  # type: ignore[method-assign]
    sys.modules["torch"] = stand_in
    import xgrammar

    started = time.perf_counter()
    compiler = xgrammar.GrammarCompiler(
        xgrammar.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    )
    prep = time.perf_counter() - started
    mask = np.full((1, (len(tok) + 31) // 32), -1, dtype=np.int32)

    def step(matcher: Matcher) -> np.ndarray:
        matcher.fill_next_token_bitmask(mask, 0)
        return mask[0]

    return (
        prep,
        lambda s: xgrammar.GrammarMatcher(
            compiler.compile_json_schema(json.dumps(s), any_whitespace=True)
        ),
        step,
        lambda m, t: bool(m.accept_token(t)),
        lambda m: bool(m.is_terminated() or m.accept_token(tok.eos_token_id)),
    )


def walk(
    tok: Any, library: Library, schema: dict[str, Any], value: Any, times: list[float]
) -> bool:
    _, compile_schema, step, advance, complete = library
    matcher = compile_schema(schema)
    for token in tok.encode(json.dumps(value), add_special_tokens=False):
        started = time.perf_counter()
        mask = step(matcher)
        times.append(time.perf_counter() - started)
        if not (int(mask[token // 32]) >> (token % 32)) & 1 or not advance(matcher, token):
            return False
    return complete(matcher)


def main() -> None:
    from transformers import AutoTokenizer

    name = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(str(resolve_model(None)))
    make = {
        "llguidance": llguidance_library,
        "outlines": outlines_library,
        "xgrammar": xgrammar_library,
    }[name]
    library = make(tok)
    out: dict[str, Any] = {"lib": name, "vocab": len(tok), "table_s": round(library[0], 3)}
    times: list[float] = []
    for label, schema, good, bads in CASES:
        started = time.perf_counter()
        library[1](schema)
        compile_ms = (time.perf_counter() - started) * 1000
        out[label] = {
            "compile_ms": round(compile_ms, 1),
            "valid_accepted": walk(tok, library, schema, good, times),
            "invalid_refused": [not walk(tok, library, schema, bad, []) for bad in bads],
        }
    us = sorted(t * 1e6 for t in times)
    out["mask_us_median"] = round(statistics.median(us), 1)
    out["mask_us_p95"] = round(us[int(len(us) * 0.95)], 1)
    out["load"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
