"""JSON a person gave the app (a schema file, a tools file, the schema box), read with one line
for whatever is wrong with it. No Qt.

`json.loads` fails in three ways: JSONDecodeError (not JSON), RecursionError (nested thousands
deep) and a plain ValueError for an integer of more than 4300 digits (Python's limit on
int(str)), whose message names `sys.set_int_max_str_digits`. Each is a `JsonTextError` here, in
words a user understands; a caller adds which file or box it was.
"""

from __future__ import annotations

import json
from typing import Any


class JsonTextError(ValueError):
    """Why a text is not usable JSON, as the end of a sentence ("is not valid JSON (...)")."""


def parse_json_text(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonTextError(
            f"is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise JsonTextError("is nested too deeply") from None
    except ValueError:  # int() of a number of more than 4300 digits
        raise JsonTextError("holds a number with thousands of digits") from None


def nesting_depth(text: str) -> int:
    """How deep `text` nests arrays and objects, counted without parsing (one pass, no
    recursion: a file of ten thousand brackets costs nothing), strings skipped. Not
    necessarily whole JSON: a tool call the token limit cut is counted as far as it goes."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest
