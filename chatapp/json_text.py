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
