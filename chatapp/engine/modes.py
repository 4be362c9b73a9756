"""The generation loops a model can run with. A StrEnum: a Mode equals its string, so stored
history, JSON results and command lines that say "naive" or "iobinding" keep working.

A mode carries what every place that shows it needs (the toggle, the figures line, exports,
bench tables, charts): its label and a one-line description, in one place. The members are
declared in the order they are shown: from no cache at all to the KV kept on the device.
"""

from __future__ import annotations

from enum import StrEnum

from chatapp.engine.errors import EngineError


class Mode(StrEnum):
    NOCACHE = "nocache"  # every step runs the whole sequence so far with an empty past
    NAIVE = "naive"  # session.run with numpy feeds; the host rebuilds the KV every step
    IOBINDING = "iobinding"  # buffers bound once on the device; only the new token changes

    @property
    def label(self) -> str:
        """How people read it: "No cache", "Naive", "IO-Binding"."""
        return _LABELS[self]

    @property
    def description(self) -> str:
        """One plain sentence on what the loop does (tooltips, reports)."""
        return _DESCRIPTIONS[self]

    @property
    def caches(self) -> bool:
        """Does the loop keep the keys and values of the tokens it has seen?"""
        return self is not Mode.NOCACHE

    @property
    def order(self) -> int:
        """Where it stands in lists, toggles and charts (0 first)."""
        return MODES.index(self)


_LABELS = {Mode.NOCACHE: "No cache", Mode.NAIVE: "Naive", Mode.IOBINDING: "IO-Binding"}
_DESCRIPTIONS = {
    Mode.NOCACHE: (
        "No KV cache: every token runs the whole conversation through the model again, "
        "so each token costs more than the one before."
    ),
    Mode.NAIVE: (
        "KV cache kept by the host: each token runs alone, and the cache goes in and comes "
        "back out as plain arrays every step."
    ),
    Mode.IOBINDING: (
        "KV cache kept where the model runs: buffers bound once, only the new token goes in "
        "and its scores come out."
    ),
}

MODES: tuple[Mode, ...] = tuple(Mode)  # in the order toggles, results and charts list them
# What `chatapp bench` runs unless --modes says otherwise: the two loops with a cache.
CACHED_MODES: tuple[Mode, ...] = tuple(m for m in MODES if m.caches)


def mode_label(mode: str) -> str:
    """A stored or given loop name as people read it; an unknown one as it is."""
    return Mode(mode).label if mode in MODES else mode


def as_mode(mode: Mode | str) -> Mode:
    """A loop name as given (the command line, settings, the history) as a Mode."""
    if mode not in MODES:
        raise EngineError(f"Unknown loop '{mode}'; choose one of {', '.join(MODES)}.")
    return Mode(mode)
