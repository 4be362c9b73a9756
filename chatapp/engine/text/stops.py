"""An answer's text as its tokens stream: each token's text delta (never half a character), and
stop strings (text that might begin one is held back)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from chatapp.engine.text.chat import ChatTokenizer

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


class IncrementalDetokenizer:
    """Turns a token stream into text deltas, never emitting half a UTF-8 character.

    Decodes a short window (from a few tokens back) so that tokenizers which merge spaces or
    bytes across token boundaries still produce the right text.
    """

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens whose text has been emitted

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        after = self.tokenizer.decode(self.ids[self._prefix :])
        if after.endswith("\ufffd") or len(after) <= len(before):
            return ""  # an incomplete character (or nothing visible yet): wait for more
        self._prefix, self._read = self._read, len(self.ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is left at the end (e.g. a dangling incomplete byte sequence)."""
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        after = self.tokenizer.decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :] if after.startswith(before) else ""

    @property
    def text(self) -> str:
        return self.tokenizer.decode(self.ids)
