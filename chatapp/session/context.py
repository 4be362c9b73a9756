"""What of a conversation the model sees: the context policy as the GUI reports it. No Qt.

The tokenizer belongs to the engine, which only jobs on the worker thread use, so the jobs
count (chat_jobs.py): before every answer the generation job fits the messages to the context
(`fit_messages`), sends only what fits and reports the cut in a `ContextReport`; a measurement
job does the same on request (a conversation was opened, an answer finished) so the transcript
can show each turn's tokens and where the cut is before anything is sent.

Indices in a report are conversation indices (`Conversation.messages`), not indices of the
engine message list, which may start with a system prompt.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chatapp.engine.backend import Backend
from chatapp.engine.chat import STYLE_TEMPLATE, Message
from chatapp.engine.errors import ContextOverflowError
from chatapp.engine.tool_calls import ToolPlan
from chatapp.session.context_policy import fit_to_context

# The answer's room is "max new tokens", but never more than this share of the context: with a
# 512-token model and max new tokens at 2048, a full reserve would leave no room for any history.
MAX_RESERVE_SHARE = 0.5
# When the chat outgrows the context, cut down to this share of it at once and keep the cut
# until it fills again (context_policy.py): answers in between reuse the cached prompt,
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
