"""What of a conversation the model sees: the context policy as the GUI reports it. No Qt.

The tokenizer belongs to the engine, which only jobs on the worker thread use, so the jobs
count (chat_jobs.py): before every answer the generation job fits the messages to the context
(`fit_messages`), sends only what fits and reports the cut in a `ContextReport`; a measurement
job does the same on request (a conversation was opened, an answer finished) so the transcript
can show each turn's tokens and where the cut is before anything is sent.

Indices in a report are conversation indices (`Conversation.messages`), not indices of the
engine message list, which may start with a system prompt.

The policy itself (`fit_to_context`) is a pure function: the caller passes `count_tokens`, which
renders a message list with the model's chat template and counts the ids (`counter_for`); it
only needs `.role`/`.content`, so `chatapp.engine.text.chat.Message` and the GUI's `ChatMessage`
both work. A *turn* is a user message and everything after it up to the next user message
(normally one answer). Turns are dropped whole, oldest first, so the model never sees an answer
without its question. The last turn (the question being asked now) is always kept: when even
that does not fit, the result says so (`fits` is False) and the caller must refuse or shorten it.

With `low_water`, a cut drops enough at once: when the prompt outgrows the budget, the oldest
turns go until it is at most that share of the budget, and the cut then stays where it is until
the budget is exceeded again. Every answer otherwise starts with the same tokens as the one
before, so the engine reuses its cached prefix; the whole prompt is read again only once per
cut (about every (1 - low_water) x budget tokens of chat), not on every answer after the
context first filled. The cut is recomputed from the turns alone, without state: replaying the
chat turn by turn with the per-turn token counts gives the same cut on every call.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, Protocol, TypeVar, cast

from chatapp.engine.backend import Backend
from chatapp.engine.errors import ContextOverflowError
from chatapp.engine.structured.tool_calls import ToolPlan
from chatapp.engine.text.chat import STYLE_TEMPLATE, Message

# The answer's room is "max new tokens", but never more than this share of the context: with a
# 512-token model and max new tokens at 2048, a full reserve would leave no room for any history.
MAX_RESERVE_SHARE = 0.5
# When the chat outgrows the context, cut down to this share of it at once and keep the cut
# until it fills again (fit_to_context): answers in between reuse the cached prompt,
# so a full re-read (seconds at 8k tokens) comes once per cut instead of on every answer.
LOW_WATER_SHARE = 0.5
POLICY_TEXT = (
    "When the chat outgrows the context, the oldest turns are left out until the prompt is "
    f"about {LOW_WATER_SHARE:.0%} of it; that cut then stays, so each answer reuses the prompt "
    "the model has already read, and the whole prompt is read again only when the context "
    "fills up once more."
)


@dataclass(frozen=True)
class TurnTokens:
    start: int  # conversation index of the turn's first message (normally the question)
    stop: int  # one past its last message
    tokens: int  # what the turn adds to the prompt
    sent: bool
    # What each of its messages adds (they sum to `tokens`): a message's figure never changes
    # as the chat grows, a turn's grows once when its answer arrives.
    message_tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContextReport:
    request_id: int
    message_count: int  # conversation messages measured
    limit: int  # the context the engine allocated (engine.max_context)
    reserve: int  # kept free for the answer
    prompt_tokens: int  # what is (or would be) sent
    overhead_tokens: int  # system prompt and the template's fixed text
    dropped: int  # the oldest conversation messages left out
    turns: tuple[TurnTokens, ...]
    fits: bool  # False: even the newest turn alone leaves less than `reserve` for the answer
    elapsed_s: float  # time spent counting tokens
    model: str = ""  # whose tokenizer counted (the model that answers next)

    @property
    def cut_index(self) -> int | None:
        """Conversation index of the first message still sent after a cut; None: no cut."""
        return self.dropped if self.dropped else None

    @property
    def dropped_turns(self) -> int:
        return sum(not t.sent for t in self.turns)

    def turn_starting_at(self, index: int) -> TurnTokens | None:
        for turn in self.turns:
            if turn.start == index:
                return turn
        return None

    def turn_holding(self, index: int) -> TurnTokens | None:
        for turn in self.turns:
            if turn.start <= index < turn.stop:
                return turn
        return None

    def message_tokens(self, index: int) -> int | None:
        """The tokens conversation message `index` adds to the prompt (None: not measured)."""
        turn = self.turn_holding(index)
        if turn is None or index >= self.message_count:
            return None
        offset = index - turn.start
        return turn.message_tokens[offset] if offset < len(turn.message_tokens) else None

    def describe(self) -> str:
        """One sentence for a tooltip."""
        text = (
            f"{self.prompt_tokens} of {self.limit} tokens sent "
            f"({self.reserve} kept free for the answer)."
        )
        if self.dropped:
            turns = self.dropped_turns
            text += (
                f" The oldest {turns} turn{'s' if turns != 1 else ''} ({self.dropped} messages) "
                "no longer fit and are not sent."
            )
        counted = f" Counted for {self.model}." if self.model else ""
        return f"{text}{counted} {POLICY_TEXT}"


class TokenCounter:
    """`count_tokens` with a memory for short message lists: every answer measures each turn
    of the conversation again, and those turns rarely change (SmolLM2, 80 turns of 12 900
    tokens: fitting took 64 ms without, 33 ms with)."""

    def __init__(self, count_tokens: Callable[[list[Message]], int], max_entries: int = 8192):
        self._count = count_tokens
        self._memo: dict[tuple[tuple[object, ...], ...], int] = {}
        self._max_entries = max_entries

    def __call__(self, messages: list[Message]) -> int:
        if len(messages) > 4:  # a whole prompt: it differs every time
            return self._count(messages)
        # Calls and results too: a call's answer has no text ("" as an empty answer has).
        # (The policy's probe turns have a role and a content only.)
        key = tuple(
            (m.role, m.content, getattr(m, "tool_calls", ()), getattr(m, "tool_call_id", None))
            for m in messages
        )
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= self._max_entries:
                self._memo.clear()
            found = self._memo[key] = self._count(messages)
        return found


_counters: weakref.WeakKeyDictionary[object, dict[tuple[str, int], TokenCounter]] = (
    weakref.WeakKeyDictionary()
)


def counter_for(
    backend: Backend, style: str = STYLE_TEMPLATE, plan: ToolPlan | None = None
) -> TokenCounter:
    """What counts a chat's tokens for the context policy, as the model will see the chat in
    `style`: with a tool plan, the tools' definitions and instructions included (a counter for
    this answer); without, one counter per tokenizer and style that remembers (a new model
    starts a new memory; the same turn is another number of tokens as text to continue).
    A backend without a tokenizer here (a server) counts nothing: ValueError."""
    tokenizer = backend.chat_tokenizer
    if tokenizer is None:
        raise ValueError(f"{backend.answerer} counts its own tokens")
    limit = backend.max_context
    tools = plan.template_tools() if plan is not None else None

    def count(messages: list[Message]) -> int:
        """Exact, or for a chat far too long for the context a lower bound above it."""
        if plan is not None:  # the policy's probe turn has only a role and a content
            chat = [m if isinstance(m, Message) else Message(m.role, m.content) for m in messages]
            messages = plan.messages(chat)
        try:
            return len(tokenizer.chat_ids(messages, limit, tools, style=style))
        except ContextOverflowError as exc:
            return exc.prompt_tokens

    if plan is not None:
        return TokenCounter(count)
    counters = _counters.get(tokenizer)
    if counters is None:
        counters = _counters[tokenizer] = {}
    counter = counters.get((style, limit))
    if counter is None:
        counter = counters[style, limit] = TokenCounter(count)
    return counter


def answer_reserve(max_new_tokens: int, limit: int) -> int:
    return max(0, min(max_new_tokens, int(limit * MAX_RESERVE_SHARE)))


def fit_messages(
    request_id: int,
    messages: Sequence[Message],
    count_tokens: Callable[[list[Message]], int],
    limit: int,
    max_new_tokens: int,
    low_water: float | None = LOW_WATER_SHARE,
) -> tuple[list[Message], ContextReport]:
    """The messages to send (the system prompt and the newest turns that fit) and the report.
    `low_water` None: the smallest cut (the policy before; for comparisons)."""
    started = time.perf_counter()
    reserve = answer_reserve(max_new_tokens, limit)
    fit = fit_to_context(
        list(messages), count_tokens, limit=limit, reserve=reserve, low_water=low_water
    )
    offset = fit.pinned_count  # engine index - offset = conversation index
    turns = tuple(
        TurnTokens(t.start - offset, t.stop - offset, t.tokens, t.kept, t.message_tokens)
        for t in fit.turns
    )
    report = ContextReport(
        request_id=request_id,
        message_count=len(messages) - offset,
        limit=limit,
        reserve=reserve,
        prompt_tokens=fit.prompt_tokens,
        overhead_tokens=fit.overhead_tokens,
        dropped=fit.dropped_count,
        turns=turns,
        fits=fit.fits,
        elapsed_s=time.perf_counter() - started,
    )
    return fit.kept, report


# The policy: which messages still fit, dropping the oldest turns, keeping the system prompt.
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
