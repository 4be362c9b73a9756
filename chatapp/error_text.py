"""One line of an error for a sentence a user reads; the log keeps the whole message."""

from __future__ import annotations

# Short enough for a status line: the engine's device and model messages.
STATUS_LINE = 200


def first_line(error: object, limit: int = 300, empty: str | None = None) -> str:
    """The first line of an error's message (or of any text), at most `limit` characters.

    Without a line, `empty`, else the exception's type name ("unknown error" for other text)."""
    lines = str(error).strip().splitlines()
    if lines:
        return lines[0][:limit]
    if empty is not None:
        return empty
    return type(error).__name__ if isinstance(error, BaseException) else "unknown error"
