"""One function tool for the tests that have the default model call it: `generate --tools`
and the window's Tools option (a city bounded in length, so a small model's call ends)."""

from __future__ import annotations

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
