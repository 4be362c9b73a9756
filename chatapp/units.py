"""Quantities as people read them; shared by the reports, the exports and the window."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    """Bytes for people: 0 B, 840 B, 12.3 KB, 45.6 MB, 1.20 GB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n:.0f} B"


def whole_mb_up(n: int | float) -> int:
    """Bytes as whole MB (MiB) rounded up, for sizes said beside a limit: a file just over a
    1 MB limit reads "2 MB", never "1 MB; more than 1 MB is refused"."""
    return -(-int(n) // (1 << 20))
