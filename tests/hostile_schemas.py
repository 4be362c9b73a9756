"""Hostile JSON schemas: a corpus by cause (issue 37), each with words its refusal must hold.

Shared by the engine's, the server's and the command line's tests. `REFUSED_BY_CHECK` never
reach the grammar library (chatapp/engine/structured/json_schema.py refuses them);
`REFUSED_BY_LIBRARY` are schemas the library compiles or refuses itself, which must still end
as one line.
`accepts` feeds a text through a constraint, token by token.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chatapp.engine.engine import Engine
from chatapp.engine.structured.constraints import TokenConstraint

Schema = dict[str, Any]


def nested(levels: int, keyword: str = "items") -> Schema:
    schema: Schema = {"type": "string"}
    for _ in range(levels):
        if keyword == "anyOf":
            schema = {"anyOf": [schema, {"type": "null"}]}
        elif keyword == "properties":
            schema = {"type": "object", "properties": {"a": schema}}
        else:
            schema = {"type": "array", "items": schema}
    return schema


def nested_data(levels: int) -> Schema:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return {"const": value}


def ref_chain(links: int, shape: str = "ref", defs: str = "$defs") -> Schema:
    """`links` definitions, each pointing at the next: the schema that crashed the server."""

    def link(i: int) -> Schema:
        ref = {"$ref": f"#/{defs}/d{i + 1}"}
        if shape == "object":
            return {"type": "object", "properties": {"a": ref}, "required": ["a"]}
        if shape == "array":
            return {"type": "array", "items": ref}
        return ref

    chain = {f"d{i}": link(i) for i in range(links)}
    chain[f"d{links}"] = {"type": "string"}
    return {"$ref": f"#/{defs}/d0", defs: chain}


def nested_targets(levels: int = 45, leaf: int = 5000) -> Schema:
    """$refs to each level of one deep path, whose end holds many properties: walking each
    target's subtree would cost levels x leaf."""
    schema: Schema = {"type": "object", "properties": {f"p{i}": {} for i in range(leaf)}}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    refs = [{"$ref": "#" + "/properties/a" * i} for i in range(1, levels + 1)]
    schema["properties"]["r"] = {"anyOf": refs}
    return schema


REFUSED_BY_CHECK: dict[str, tuple[Schema, str]] = {
    # deep nesting
    "arrays 150 deep": (nested(150), "nested too deeply"),
    "objects 3000 deep (past Python's recursion limit)": (
        nested(3000, "properties"),
        "nested too deeply",
    ),
    "anyOf 200 deep": (nested(200, "anyOf"), "nested too deeply"),
    "const data 200 deep": (nested_data(200), "nested too deeply"),
    # huge numbers
    "integer maximum 10**40": ({"type": "integer", "maximum": 10**40}, "out of range"),
    "enum of a 31-digit integer": ({"enum": [10**30]}, "out of range"),
    "minimum of infinity (JSON 1e999)": ({"type": "number", "minimum": float("inf")}, "range"),
    "multipleOf NaN": ({"type": "number", "multipleOf": float("nan")}, "out of range"),
    "minLength 10**20": ({"type": "string", "minLength": 10**20}, "out of range"),
    # $ref loops that never write a value
    "root is its own $ref": ({"$ref": "#"}, "loop"),
    "two definitions point at each other": (
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
        "loop",
    ),
    "anyOf starts with itself": ({"anyOf": [{"$ref": "#"}, {"type": "string"}]}, "loop"),
    "allOf / oneOf loop": (
        {
            "$ref": "#/$defs/a",
            "$defs": {
                "a": {"allOf": [{"$ref": "#/$defs/b"}]},
                "b": {"oneOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]},
            },
        },
        "loop",
    ),
    "not of itself": ({"type": "string", "not": {"$ref": "#"}}, "loop"),
    # $ref chains
    "3000 $defs in a chain (~100 KB)": (ref_chain(3000), "definitions"),
    "1500 legacy definitions in a chain": (ref_chain(1500, defs="definitions"), "definitions"),
    "400 objects in a chain": (ref_chain(400, "object"), "followed"),
    "600 arrays in a chain": (ref_chain(600, "array"), "followed"),
    "45 $refs into one another's subtrees": (nested_targets(), "inside each other"),
    # $refs that do not point inside the schema
    "remote $ref": ({"$ref": "http://example.com/s.json"}, "inside the schema"),
    "file $ref": ({"$ref": "file:///etc/passwd"}, "inside the schema"),
    "relative file $ref": ({"$ref": "other.json#/a"}, "inside the schema"),
    "$ref to nothing": ({"$ref": "#/$defs/none"}, "points at nothing"),
    "$ref that is not text": ({"$ref": 5}, "not text"),
    "$ref to a list": ({"$ref": "#/required", "required": ["a"]}, "no schema"),
    # not JSON, too long
    "a set (from Python)": ({"enum": {1, 2}}, "not JSON"),
    "a number key (from Python)": ({"properties": {1: {}}}, "not text"),
    "300 KB of enum": ({"enum": ["x" * 1000] * 300}, "longer than"),
}

REFUSED_BY_LIBRARY: dict[str, tuple[Schema, str]] = {
    "empty enum": ({"enum": []}, "cannot be used"),
    "empty type list": ({"type": []}, "cannot be used"),
    "minLength over maxLength": ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
    "empty integer range": ({"type": "integer", "minimum": 5, "maximum": 2}, "minimum"),
    "integer minimum 1e308": ({"type": "integer", "minimum": 1e308}, "cannot be used"),
    "string and integer at once": (
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        "cannot be used",
    ),
    "required property that is closed out": (
        {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False},
        "cannot be used",
    ),
    "broken pattern": ({"type": "string", "pattern": "(("}, "cannot be used"),
    "unknown type": ({"type": "objectx"}, "objectx"),
}

# Schemas near the limits that must still work.
ACCEPTED: dict[str, Schema] = {
    "900 $refs in a chain": ref_chain(900),
    "300 objects in a chain": ref_chain(300, "object"),
    "arrays 90 deep": nested(90),
    "a recursive tree": {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["value", "children"],
            }
        },
    },
    "a diamond of $refs": {
        "$ref": "#/$defs/d0",
        "$defs": {
            **{
                f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
                for i in range(40)
            },
            "d40": {"type": "boolean"},
        },
    },
}


def accepts(engine: Engine, constraint: TokenConstraint, text: str) -> bool:
    """Does the constraint let `text` through, token by token (the model's own tokens)?"""
    row = np.zeros(engine.info.vocab_size, dtype=np.float32)
    for token in engine.tokenizer.encode(text):
        if not np.isfinite(constraint.masked(row)[token]):
            return False
        constraint.advance(token)
    return True
