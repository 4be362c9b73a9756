"""Which messages still fit the model's context: drop the oldest turns, keep the system prompt.

Pure functions, no Qt, no tokenizer of its own: the caller passes `count_tokens`, which renders
a message list with the model's chat template and counts the ids (for example
`lambda ms: len(chat_tokenizer.chat_ids(ms))`). It lives in `store/` beside the history it
trims, although it is as much engine policy: it only needs `.role`/`.content`, so
`chatapp.engine.chat.Message` and the GUI's `ChatMessage` both work.

A *turn* is a user message and everything after it up to the next user message (normally one
answer). Turns are dropped whole, oldest first, so the model never sees an answer without its
question. The last turn (the question being asked now) is always kept: when even that does not
fit, the result says so (`fits` is False) and the caller must refuse or shorten it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class MessageLike(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


M = TypeVar("M", bound=MessageLike)


@dataclass(frozen=True)
class Turn:
    start: int  # index of its first message in the list given to fit_to_context
    stop: int  # one past its last message
    tokens: int  # what it adds to the rendered prompt (template overhead included)
    kept: bool


@dataclass(frozen=True)
class ContextFit(Generic[M]):
    """The messages to send and what the window should say about the rest.

    The dropped messages are exactly `messages[pinned_count : pinned_count + dropped_count]`
    of the input: draw the "earlier messages are not sent to the model" line before input
    index `cut_index`.
    """

    kept: list[M]
    dropped_count: int  # messages left out
    turns: tuple[Turn, ...]  # every turn of the input, oldest first
    pinned_count: int  # leading system messages, always kept
    pinned_tokens: int  # what those cost on their own
    prompt_tokens: int  # exact count of the rendered `kept`
    limit: int  # the model's context length
    reserve: int  # tokens kept free for the answer

    @property
    def budget(self) -> int:
        return self.limit - self.reserve

    @property
    def fits(self) -> bool:
        return self.prompt_tokens <= self.budget

    @property
    def dropped_turns(self) -> int:
        return sum(not t.kept for t in self.turns)

    @property
    def cut_index(self) -> int | None:
        """Input index of the first message still sent after a cut; None when nothing was cut."""
        return self.pinned_count + self.dropped_count if self.dropped_count else None


def split_turns(messages: Sequence[MessageLike], first: int = 0) -> list[tuple[int, int]]:
    """(start, stop) of each turn in `messages[first:]`; a new turn starts at each user
    message (anything before the first user message is a turn of its own)."""
    bounds: list[tuple[int, int]] = []
    start = first
    for i in range(first + 1, len(messages)):
        if messages[i].role == "user":
            bounds.append((start, i))
            start = i
    if start < len(messages):
        bounds.append((start, len(messages)))
    return bounds


def fit_to_context(
    messages: Sequence[M],
    count_tokens: Callable[[list[M]], int],
    limit: int,
    reserve: int = 0,
) -> ContextFit[M]:
    """Keep the leading system messages and the newest turns whose rendered prompt plus
    `reserve` fits in `limit` tokens.

    `count_tokens` is called about (turns + log2(turns) + 2) times: once per turn alone (the
    per-turn figures) and a binary search over how many turns to drop, on the assumption that
    dropping a turn never makes the prompt longer.
    """
    if limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    if reserve < 0:
        raise ValueError(f"reserve must be >= 0, not {reserve}")
    msgs = list(messages)
    pinned_count = 0
    while pinned_count < len(msgs) and msgs[pinned_count].role == "system":
        pinned_count += 1
    pinned = msgs[:pinned_count]
    bounds = split_turns(msgs, pinned_count)
    budget = limit - reserve

    cache: dict[int, int] = {}

    def total(drop: int) -> int:
        """Tokens of the prompt without the oldest `drop` turns."""
        if drop not in cache:
            start = bounds[drop][0] if drop < len(bounds) else len(msgs)
            kept = pinned + msgs[start:]
            cache[drop] = count_tokens(kept) if kept else 0
        return cache[drop]

    pinned_tokens = total(len(bounds))
    # Each turn on its own after the system prompt: the template's per-message overhead is
    # counted in, the shared overhead (e.g. the generation prompt) is counted once, in pinned.
    per_turn = [count_tokens(pinned + msgs[a:b]) - pinned_tokens for a, b in bounds]

    drop = 0
    if bounds and total(0) > budget:
        last = len(bounds) - 1  # the newest turn always stays
        if total(last) > budget:
            drop = last
        else:
            lo, hi = 1, last  # total(hi) fits; find the smallest drop that fits
            while lo < hi:
                mid = (lo + hi) // 2
                if total(mid) <= budget:
                    hi = mid
                else:
                    lo = mid + 1
            drop = lo

    turns = tuple(
        Turn(a, b, tokens, kept=i >= drop)
        for i, ((a, b), tokens) in enumerate(zip(bounds, per_turn, strict=True))
    )
    start = bounds[drop][0] if bounds else len(msgs)
    return ContextFit(
        kept=pinned + msgs[start:],
        dropped_count=start - pinned_count,
        turns=turns,
        pinned_count=pinned_count,
        pinned_tokens=pinned_tokens,
        prompt_tokens=total(drop) if bounds else pinned_tokens,
        limit=limit,
        reserve=reserve,
    )
