"""JSON schemas before they reach the grammar library: checked, then made to finish.

`check_schema` bounds what the native compiler sees, walking the schema iteratively (no
Python recursion, whatever its depth): its size, its nesting, its numbers, its `$ref`s (local
only, to something that exists, no loop that never writes a value) and how deep the schema
is once every `$ref` is followed. llguidance compiles a `$ref` chain by recursion on its own
stack: about 3,000 definitions that each point at the next overflow 8 MB and kill the
process (issue 37). Each refusal is one line (ConstraintError).

`prepared_schema` is the copy that is compiled, written as llama.cpp's JSON-schema grammar
converter reads a schema: an object that lists `properties` admits no other property unless
it says so (`additionalProperties: true` or a schema), and an integer without bounds has at
most 16 digits. A small model otherwise fills an open object with invented properties, or an
integer with digits, until max_tokens. (A number's integral part is bounded the same way.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

MAX_SCHEMA_CHARS = 256 * 1024  # a schema is a request field: bounded like one
MAX_NESTING = 100  # JSON levels (llguidance's own parser stops at 128, around the schema)
MAX_NODES = 50_000  # JSON values in the schema
MAX_DEFINITIONS = 1000  # entries of $defs / definitions
MAX_REFS = 5000
# JSON levels once every $ref is followed (a loop counted once): native compile recursion.
# 8 MB of stack overflows near 2,500 (measured); the compile thread has COMPILE_STACK_MB.
MAX_EXPANDED_DEPTH = 1000
MAX_INTEGER = 2**63 - 1  # the library reads integers as 64 bits
# llama.cpp's converter: an integer, or a number's integral part, of at most 16 digits
# (`[1-9] [0-9]{0,15}`). (A number's fraction stays unbounded: no keyword says so.)
INTEGER_BOUND = 10**16 - 1

# Keywords whose value is a schema, a map of schemas or a list of schemas. `consumes`: a
# $ref below them is reached only after writing part of a value (a key, a bracket).
_ONE = {
    "items": True,
    "additionalProperties": True,
    "contains": True,
    "propertyNames": True,
    "unevaluatedProperties": True,
    "unevaluatedItems": True,
    "additionalItems": True,
    "not": False,
    "if": False,
    "then": False,
    "else": False,
}
_MAP = {"properties": True, "patternProperties": True, "dependentSchemas": False}
_LIST = {"anyOf": False, "oneOf": False, "allOf": False, "prefixItems": True, "items": True}
DEFINITIONS = ("$defs", "definitions")

Path = tuple[str | int, ...]


class ConstraintError(ValueError):
    """A constraint that cannot be used: bad schema or grammar, or no grammar library."""


def subschemas(node: Mapping[str, Any]) -> Iterator[tuple[Path, Any, bool]]:
    """(path below `node`, subschema, consumes) for each schema directly inside `node`;
    definitions excluded (they are reached only through a $ref)."""
    for key, value in node.items():
        if key in _ONE and isinstance(value, (dict, bool)):
            yield (key,), value, _ONE[key]
        elif key in _MAP and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, (dict, bool)):
                    yield (key, name), sub, _MAP[key]
        elif key in _LIST and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, (dict, bool)):
                    yield (key, i), sub, _LIST[key]


def _where(path: Path) -> str:
    """A JSON pointer to `path`, its end only when long (the message stays one short line)."""
    text = "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)
    return text if len(text) <= 80 else "#/..." + text[-75:]


def check_schema(schema: Any) -> None:
    """Raise ConstraintError (one line) for a schema that must not reach the compiler."""
    if not isinstance(schema, Mapping):
        raise ConstraintError("The JSON schema must be a JSON object.")
    _check_values(schema)
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError) as exc:  # not after _check_values
        raise ConstraintError(f"The JSON schema is not JSON ({exc}).") from None
    if size > MAX_SCHEMA_CHARS:
        raise ConstraintError(f"The JSON schema is longer than {MAX_SCHEMA_CHARS} characters.")
    _check_references(schema)


def _check_values(schema: Mapping[str, Any]) -> None:
    """Every value is JSON, numbers the library can read, nesting and count bounded."""
    stack: list[tuple[Any, int, Path]] = [(schema, 1, ())]
    nodes = 0
    definitions = 0
    while stack:
        value, depth, path = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ConstraintError(f"The JSON schema has more than {MAX_NODES} values.")
        if isinstance(value, (dict, list)) and depth > MAX_NESTING:
            raise ConstraintError(
                f"The JSON schema is nested too deeply (more than {MAX_NESTING} levels)."
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConstraintError(
                        f"The JSON schema has a key that is not text at {_where(path)}."
                    )
                if key in DEFINITIONS and isinstance(item, dict):
                    definitions += len(item)
                stack.append((item, depth + 1, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, (*path, i)) for i, item in enumerate(value))
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        elif isinstance(value, int):
            if abs(value) > MAX_INTEGER:
                raise ConstraintError(
                    f"The JSON schema has a number out of range at {_where(path)} "
                    f"(at most {MAX_INTEGER})."
                )
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ConstraintError(
                    f"The JSON schema has a number out of range at {_where(path)} ({value})."
                )
        else:
            raise ConstraintError(
                f"The JSON schema is not JSON: {type(value).__name__} at {_where(path)}."
            )
    if definitions > MAX_DEFINITIONS:
        raise ConstraintError(
            f"The JSON schema has {definitions} definitions; at most {MAX_DEFINITIONS}."
        )


def resolve(schema: Mapping[str, Any], ref: str) -> tuple[Path, Any]:
    """The path and value a local `$ref` points at; ConstraintError for any other."""
    if ref != "#" and not ref.startswith("#/"):
        shown = ref if len(ref) <= 80 else ref[:77] + "..."
        raise ConstraintError(
            f"The JSON schema's $ref '{shown}' does not point inside the schema "
            "(only '#/...' references are read)."
        )
    path: list[str | int] = []
    node: Any = schema
    for raw in ref[2:].split("/") if ref != "#" else []:
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
            path.append(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
            path.append(int(token))
        else:
            raise ConstraintError(f"The JSON schema's $ref '{ref[:80]}' points at nothing.")
    if not isinstance(node, (dict, bool)):
        raise ConstraintError(f"The JSON schema's $ref '{ref[:80]}' points at no schema.")
    return tuple(path), node


class _Target:
    """A schema some $ref points at (or the root): its own depth, and the $refs inside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.height = 1
        self.edges: list[tuple[Path, bool]] = []  # (target, consumes on the way)


def _check_references(schema: Mapping[str, Any]) -> None:
    targets: dict[Path, _Target] = {}
    todo: list[tuple[Path, Any]] = [((), schema)]
    refs = visited = 0
    while todo:
        path, node = todo.pop()
        if path in targets:
            continue
        target = targets[path] = _Target(path)
        walk: list[tuple[Any, int, bool]] = [(node, 1, False)]
        while walk:
            sub, depth, consumed = walk.pop()
            if not isinstance(sub, dict):
                continue
            visited += 1  # a target inside another is walked again: bounded, not quadratic
            if visited > 2 * MAX_NODES:
                raise ConstraintError("The JSON schema's $refs point inside each other too often.")
            target.height = max(target.height, depth)
            ref = sub.get("$ref")
            if isinstance(ref, str):
                refs += 1
                if refs > MAX_REFS:
                    raise ConstraintError(f"The JSON schema has more than {MAX_REFS} $refs.")
                to, value = resolve(schema, ref)
                target.edges.append((to, consumed))
                todo.append((to, value))
            elif "$ref" in sub:
                raise ConstraintError("The JSON schema has a $ref that is not text.")
            for below, child, consumes in subschemas(sub):
                walk.append((child, depth + len(below), consumed or consumes))
    _refuse_empty_loops(targets)
    _check_expanded_depth(targets)


def _refuse_empty_loops(targets: dict[Path, _Target]) -> None:
    """A $ref loop that writes nothing on its way round (`a` is `b`, `b` is `a`) never ends a
    value: the library accepts it and then allows no token at all."""
    state: dict[Path, int] = {}  # 1: on the current path, 2: done
    for start in targets:
        if state.get(start):
            continue
        stack: list[tuple[Path, Iterator[Path]]] = [(start, _empty_edges(targets[start]))]
        state[start] = 1
        while stack:
            path, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                state[path] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                loop = [p for p, _ in stack[[p for p, _ in stack].index(nxt) :]] + [nxt]
                shown = " -> ".join(_where(p) for p in loop[:6])
                raise ConstraintError(
                    f"The JSON schema's $ref loop never reaches a value ({shown})."
                )
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, _empty_edges(targets[nxt])))


def _empty_edges(target: _Target) -> Iterator[Path]:
    return (to for to, consumes in target.edges if not consumes)


def _check_expanded_depth(targets: dict[Path, _Target]) -> None:
    """Bound the deepest path through the schema with every $ref followed. A loop (a
    recursive schema) counts each of its members once: an upper bound of what a compiler's
    first visit recurses through."""
    components = _strongly_connected(targets)
    member_of = {p: i for i, comp in enumerate(components) for p in comp}
    longest: list[int] = []
    for i, comp in enumerate(components):  # sinks first
        below = [
            longest[member_of[to]] for p in comp for to, _ in targets[p].edges if member_of[to] != i
        ]
        longest.append(sum(targets[p].height for p in comp) + max(below, default=0))
    deepest = longest[member_of[()]]
    if deepest > MAX_EXPANDED_DEPTH:
        raise ConstraintError(
            f"The JSON schema is nested too deeply once its $refs are followed ({deepest} "
            f"levels, at most {MAX_EXPANDED_DEPTH})."
        )


def _strongly_connected(targets: dict[Path, _Target]) -> list[list[Path]]:
    """Tarjan's components, iteratively, in reverse topological order (sinks first)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on_stack: set[Path] = set()
    stack: list[Path] = []
    out: list[list[Path]] = []
    for root in targets:
        if root in index:
            continue
        work: list[tuple[Path, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            edges = targets[node].edges
            if i < len(edges):
                work.append((node, i + 1))
                to = edges[i][0]
                if to not in index:
                    work.append((to, 0))
                elif to in on_stack:
                    low[node] = min(low[node], index[to])
                continue
            for to, _ in edges:
                if to in on_stack:
                    low[node] = min(low[node], low[to])
            if low[node] == index[node]:
                comp: list[Path] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                out.append(comp)
    return out


# ---- the copy that is compiled -----------------------------------------------------------
_OPEN_KEYS = ("additionalProperties", "unevaluatedProperties", "patternProperties", "allOf")
# A schema under these is a condition on the value, not its shape: left as written (closing
# `not`'s object would widen what it refuses).
_CONDITIONS = ("not", "if", "then", "else", "dependentSchemas", "propertyNames")


def prepared_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the schema, checked first (so its nesting is bounded and the recursion below
    safe), in which objects that list properties are closed and unbounded integers have 16
    digits at most."""
    check_schema(schema)
    out = _prepared(schema, shape=True)
    assert isinstance(out, dict)
    return out


def _prepared(node: Any, shape: bool) -> Any:
    """`shape`: the schema says what the value looks like (not a condition on it, nor one
    part of several in an allOf, which closing would set against each other)."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for path, child, _ in subschemas(node):
        condition = path[0] in _CONDITIONS or (path[0] == "allOf" and len(node["allOf"]) > 1)
        new = _prepared(child, shape and not condition)
        if len(path) == 1:
            out[path[0]] = new
        else:
            holder = out[path[0]]
            if holder is node[path[0]]:  # copy the map or list once before changing it
                holder = out[path[0]] = type(holder)(holder)
            holder[path[1]] = new
    for key in DEFINITIONS:
        defs = node.get(key)
        if isinstance(defs, dict):
            out[key] = {name: _prepared(sub, True) for name, sub in defs.items()}
    if not shape:
        return out
    properties = out.get("properties")
    if isinstance(properties, dict) and not any(k in out for k in _OPEN_KEYS):
        # Closed as llama.cpp closes it; a required name it does not list stays allowed.
        required = out.get("required")
        missing = [r for r in required if r not in properties] if isinstance(required, list) else []
        if missing:
            out["properties"] = {**properties, **{r: {} for r in missing if isinstance(r, str)}}
        out["additionalProperties"] = False
    kinds = out.get("type")
    numeric = ("integer", "number")
    if kinds in numeric or (isinstance(kinds, list) and any(k in kinds for k in numeric)):
        low = _number(out, "minimum", "exclusiveMinimum")
        high = _number(out, "maximum", "exclusiveMaximum")
        if low is None and (high is None or high > -INTEGER_BOUND):
            out["minimum"] = -INTEGER_BOUND
        if high is None and (low is None or low < INTEGER_BOUND):
            out["maximum"] = INTEGER_BOUND
    return out


def _number(node: Mapping[str, Any], *keys: str) -> float | None:
    """The bound under the first of `keys` present (a bound that is no number: None)."""
    for key in keys:
        if key in node:
            value = node[key]
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            return float(value) if ok else -math.inf if key.endswith("inimum") else math.inf
    return None
