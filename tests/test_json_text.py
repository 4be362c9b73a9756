"""`nesting_depth`: the one count of how deep a JSON text nests, used before parsing."""

from __future__ import annotations

import json

import pytest

from chatapp.json_text import nesting_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("42", 0),
        ('{"a": [1, {"b": []}]}', 4),
        ('{"a": "[[[[{{{{"}', 1),  # brackets inside a string do not count
        ('["a \\" [[[", [[]]]', 3),  # nor after an escaped quote
        ('{"a": [1, {"b": [', 4),  # a text cut short counts as far as it goes
        ("[" * 10_000 + "]" * 10_000, 10_000),
    ],
)
def test_the_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


def test_the_depth_agrees_with_the_parsed_value() -> None:
    def parsed_depth(value: object) -> int:
        if isinstance(value, dict):
            return 1 + max(map(parsed_depth, value.values()), default=0)
        if isinstance(value, list):
            return 1 + max(map(parsed_depth, value), default=0)
        return 0

    value = {"x": [{"y": [[], "]]"]}, {"z": {}}], "w": "{"}
    assert nesting_depth(json.dumps(value)) == parsed_depth(value) == 5
