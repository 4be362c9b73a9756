"""What the comparison view accepts as input: the prompt's length, the sweep's contexts."""

from __future__ import annotations

from chatapp.session.arg_checks import MAX_CONTEXT, MAX_SWEEP_POINTS

MAX_PROMPT_CHARS = 4_000  # the prompt line: a benchmark question, not a document


def parse_contexts(text: str) -> tuple[int, ...]:
    """'128, 512,1024' -> (128, 512, 1024); ValueError with a readable message otherwise.
    At most MAX_SWEEP_POINTS lengths, each at most MAX_CONTEXT (the command line's limits):
    a pasted list of thousands, or a 5000-digit number, is refused before any work."""
    parts = [p for p in text.replace(" ", "").split(",") if p]
    if len(parts) > MAX_SWEEP_POINTS:
        raise ValueError(f"at most {MAX_SWEEP_POINTS} context lengths")
    values = []
    for part in parts:
        shown = part if len(part) <= 12 else part[:11] + "…"
        if not (part.isascii() and part.isdigit()) or len(part) > 9 or int(part) < 16:
            raise ValueError(f"'{shown}' is not a context length (a whole number of at least 16)")
        if int(part) > MAX_CONTEXT:
            raise ValueError(f"{part} is more than any model's context ({MAX_CONTEXT})")
        values.append(int(part))
    if not values:
        raise ValueError("give at least one context length, e.g. 128,512,1024")
    return tuple(sorted(set(values)))
