"""The generation loops a model can run with. A StrEnum: a Mode equals its string, so stored
history, JSON results and command lines that say "naive" or "iobinding" keep working."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    NAIVE = "naive"  # session.run with numpy feeds; the host rebuilds the KV every step
    IOBINDING = "iobinding"  # buffers bound once on the device; only the new token changes


MODES: tuple[Mode, ...] = tuple(Mode)  # in the order results and charts list them
