"""Which messages still fit the model's context: drop the oldest turns, keep the system prompt.

Pure functions, no Qt, no tokenizer of its own: the caller passes `count_tokens`, which renders
a message list with the model's chat template and counts the ids (for example
`lambda ms: len(chat_tokenizer.chat_ids(ms))`). It lives in `session/` beside its one user,
`context.py`; it only needs `.role`/`.content`, so `chatapp.engine.chat.Message` and the GUI's
`ChatMessage` both work.

A *turn* is a user message and everything after it up to the next user message (normally one
answer). Turns are dropped whole, oldest first, so the model never sees an answer without its
question. The last turn (the question being asked now) is always kept: when even that does not
fit, the result says so (`fits` is False) and the caller must refuse or shorten it.

With `low_water`, a cut drops enough at once: when the prompt outgrows the budget, the oldest
turns go until it is at most that share of the budget, and the cut then stays where it is until
the budget is exceeded again. Every answer otherwise starts with the same tokens as the one
before, so the engine reuses its cached prefix; the whole prompt is read again only once per
cut (about every (1 - low_water) x budget tokens of chat), not on every answer after the
context first filled. The cut is recomputed from the turns alone, without state: replaying the
chat turn by turn with the per-turn token counts gives the same cut on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, Protocol, TypeVar, cast


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
    tokens: int  # what it adds to the rendered prompt (its messages' template markers included)
    kept: bool
    message_tokens: tuple[int, ...] = ()  # the same, message by message (they add up to tokens)


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
    overhead_tokens: int  # the prompt's shared part: pinned messages and the template's fixed
    # text (a default system prompt, the generation prompt); overhead + every turn = whole prompt
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


@dataclass(frozen=True)
class _Probe:
    role: str
    content: str


# A short exchange to measure what a template adds to every prompt whatever the messages.
PROBE_TURN = (_Probe("user", "Hello"), _Probe("assistant", "Hello"))


def fit_to_context(
    messages: Sequence[M],
    count_tokens: Callable[[list[M]], int],
    limit: int,
    reserve: int = 0,
    low_water: float | None = None,
) -> ContextFit[M]:
    """Keep the leading system messages and the newest turns whose rendered prompt plus
    `reserve` fits in `limit` tokens.

    `count_tokens` is called on each turn alone and on its first message alone (the per-turn
    and per-message figures; small prompts, which the session memoizes), and on whole prompts
    only about twice: the per-turn figures add up to a close estimate of where to cut, which
    one or two exact counts confirm. A cut is minimal on the assumption that dropping a turn
    never makes the prompt longer. (A whole prompt is what costs: 12 000 tokens take about
    30 ms to render and count with SmolLM2's tokenizer.)

    A turn's figure depends on that turn (and the system prompt) only, never on the turns
    around it: the same question shows the same figure however the chat grows.
    """
    if limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    if reserve < 0:
        raise ValueError(f"reserve must be >= 0, not {reserve}")
    if low_water is not None and not 0 < low_water <= 1:
        raise ValueError(f"low_water must be in (0, 1], not {low_water}")
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
    alone = [count_tokens(pinned + msgs[a:b]) for a, b in bounds]
    overhead = pinned_tokens if pinned or not bounds else _shared_overhead(count_tokens)
    per_turn = [n - overhead for n in alone]

    drop = _smallest_drop(per_turn, overhead, budget, total)
    if low_water is not None and per_turn:
        replayed = _replayed_drop(per_turn, overhead, budget, int(budget * low_water))
        # The estimate may be off by a few tokens: never fewer than the exact minimum.
        drop = max(drop, replayed)

    turns = tuple(
        Turn(
            a, b, tokens, i >= drop, _message_tokens(pinned, msgs, a, b, n, overhead, count_tokens)
        )
        for i, ((a, b), tokens, n) in enumerate(zip(bounds, per_turn, alone, strict=True))
    )
    start = bounds[drop][0] if bounds else len(msgs)
    return ContextFit(
        kept=pinned + msgs[start:],
        dropped_count=start - pinned_count,
        turns=turns,
        pinned_count=pinned_count,
        pinned_tokens=pinned_tokens,
        overhead_tokens=overhead,
        prompt_tokens=total(drop) if bounds else pinned_tokens,
        limit=limit,
        reserve=reserve,
    )


def _shared_overhead(count_tokens: Callable[[list[M]], int]) -> int:
    """What the template adds to every prompt when no system message is pinned (SmolLM2's
    inserts a default system prompt, most add a generation prompt): with a probe turn P,
    P + P - (P and P together) is that shared part, counted once in the overhead rather than
    once in every turn. Measured on the probe rather than on the chat's own turns, so that it
    never changes as the chat grows (it used to: the same question read 37, 60, then 35)."""
    probe = cast(list[M], list(PROBE_TURN))  # count_tokens reads only .role and .content
    try:
        return max(0, 2 * count_tokens(probe) - count_tokens(probe + probe))
    except Exception:  # a template that refuses the probe: turns then include the shared part
        return 0


def _message_tokens(
    pinned: list[M],
    msgs: list[M],
    start: int,
    stop: int,
    turn_alone: int,
    overhead: int,
    count_tokens: Callable[[list[M]], int],
) -> tuple[int, ...]:
    """The tokens each message of a turn adds: the question alone, then what each following
    message adds to it (for a question and its answer: one more short count)."""
    prefixes = [count_tokens(pinned + msgs[start:k]) for k in range(start + 1, stop)]
    cumulative = [overhead, *prefixes, turn_alone]
    return tuple(max(0, b - a) for a, b in pairwise(cumulative))


def _replayed_drop(per_turn: Sequence[int], overhead: int, budget: int, low: int) -> int:
    """The cut the chat reached turn by turn: each time the estimate outgrows `budget`, the
    oldest turns go until the turns before the newest come to at most `low` (the newest always
    stays). How much goes never depends on the newest turn, which grows once it is answered:
    earlier turns' counts do not change, so every later call replays the same cuts."""
    drop, running = 0, overhead
    for newest, tokens in enumerate(per_turn):
        running += tokens
        if running > budget:
            while drop < newest and running - tokens > low:
                running -= per_turn[drop]
                drop += 1
    return drop


def _smallest_drop(
    per_turn: Sequence[int], overhead: int, budget: int, total: Callable[[int], int]
) -> int:
    """The fewest oldest turns to drop so that `total(drop) <= budget` (the newest turn always
    stays). Start where the per-turn figures say, then step with exact counts; should the
    estimate be far off, finish with a binary search."""
    if not per_turn:
        return 0
    last = len(per_turn) - 1
    estimate = overhead + sum(per_turn)
    guess = 0
    while guess < last and estimate > budget:
        estimate -= per_turn[guess]
        guess += 1
    lo, hi = 0, last  # the answer lies in [lo, hi]
    drop, steps = guess, 0
    while lo < hi and steps < 3:
        steps += 1
        if total(drop) > budget:
            if drop >= last:
                return last  # even the newest turn alone is too long: send it anyway
            lo = drop + 1
            drop = lo
        elif drop > lo and total(drop - 1) <= budget:
            hi = drop - 1
            drop = hi
        else:
            return drop  # fits, and one fewer dropped would not
    while lo < hi:
        mid = (lo + hi) // 2
        if total(mid) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo
