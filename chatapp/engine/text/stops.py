"""Stop strings on a token stream: text that might begin a stop string is held back."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class StopBuffer(Generic[T]):
    """Feed each token's text (and what goes with the token, e.g. its log-prob); get back what
    may be sent now. Once a stop string appears, the text before it is released, the rest is
    dropped, and `stopped` is set. Without stop strings everything passes straight through.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.stopped = False
        self._text = ""  # held back: could be the start of a stop string
        self._items: list[tuple[int, T]] = []  # (end of the item's text in _text, item)

    def push(self, text: str, item: T) -> tuple[str, list[T]]:
        if self.stopped:
            return "", []
        self._text += text
        self._items.append((len(self._text), item))
        found = [i for i in (self._text.find(s) for s in self.stops) if i >= 0]
        if found:
            # Every held token is released: they were generated, and the stop needed them.
            self.stopped = True
            return self._release(min(found), all_items=True)
        return self._release(len(self._text) - self._held_back())

    def flush(self) -> tuple[str, list[T]]:
        """At the end: whatever was held back is ordinary text after all."""
        if self.stopped:
            return "", []
        return self._release(len(self._text), all_items=True)

    def _held_back(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        for n in range(min(len(self._text), max((len(s) for s in self.stops), default=0)), 0, -1):
            tail = self._text[-n:]
            if any(s.startswith(tail) and s != tail for s in self.stops):
                return n
        return 0

    def _release(self, upto: int, all_items: bool = False) -> tuple[str, list[T]]:
        text = self._text[:upto]
        if all_items:
            items, self._items = [item for _, item in self._items], []
        else:
            items = [item for end, item in self._items if end <= upto]
            self._items = [(end - upto, item) for end, item in self._items if end > upto]
        self._text = self._text[upto:] if not all_items else ""
        return text, items
