"""Speculative decoding drafted from the conversation itself (prompt lookup).

A chat answer often repeats what the conversation holds: a rewritten paragraph, a fixed
function, a quoted line. `PromptLookup` finds the latest earlier place where the last few
tokens occurred and proposes the tokens that followed there. The generation then runs its
own token and the draft in one multi-row forward pass, which reads the weights once for all
rows, and keeps the drafted tokens the model would have chosen anyway (generation.py).

Why the answer does not change: each row's logits are those a one-token step would compute
(where the arithmetic is row-invariant: `speculation_refusal`), and each row is sampled by the
ordinary sampler, in order, with the history it would have had. A drafted token is kept only
when that sample equals it. With a draft that is certain (one proposed token, not a
distribution), this "sample, then compare" rule *is* the standard speculative acceptance rule:
the draft x is accepted with probability p(x), and on a rejection the token emitted is distributed
as p without x, renormalized; so greedy answers are token for token the plain decode's, and
seeded sampling draws the same random numbers in the same order, so it gives the same tokens.

`DraftPlanner` keeps it from ever costing more than it saves: it measures what a run of r rows
costs on this machine and how often drafts of each match length are accepted, and drafts the
length that maximizes the expected tokens per second, or nothing.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

# How many tokens must match before a draft is proposed: longer matches first. One token
# matches almost everywhere in open-ended text and its drafts are mostly wrong; the planner
# learns that from its acceptance and stops drafting from it.
NGRAM_SIZES = (4, 3, 2, 1)
MAX_DRAFT = 8
MAX_PROBE_GAP = 1024
# A match is followed back past its n-gram up to this many tokens: how long the answer has
# agreed with the text it copies tells a copy (drafts kept) from a chance match.
LONGEST_MATCH = 32
# Runs of each row count whose median cost is taken (DraftPlanner), and how many must have run
# before the median may say a length costs more than guessed from shorter ones.
COST_SAMPLES = 9
TRUSTED_SAMPLES = 3


@dataclass(frozen=True)
class Draft:
    tokens: tuple[int, ...]
    matched: int  # how many of the last tokens equal those before the source (<= LONGEST_MATCH)


class PromptLookup:
    """Drafts from the token history (prompt and answer so far): for the longest n with a
    match, the tokens that followed the latest earlier occurrence of the last n tokens.

    The index maps each n-gram to the position after its latest occurrence whose next token is
    known, so a lookup is one dict access per n and an appended token costs one insert per n.
    """

    def __init__(self, history: Sequence[int], sizes: Sequence[int] = NGRAM_SIZES) -> None:
        self.sizes = tuple(sorted(sizes, reverse=True))
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self.extend(history)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(int(token))

    def append(self, token: int) -> None:
        toks = self.tokens
        end = len(toks)  # the n-grams ending just before `token` now have a continuation
        toks.append(token)
        for n in self.sizes:
            if end >= n:
                self._index[tuple(toks[end - n : end])] = end

    def draft(self, most: int) -> Draft | None:
        """Up to `most` tokens to propose next, or None where nothing matches."""
        toks = self.tokens
        if most <= 0:
            return None
        for n in self.sizes:
            if len(toks) < n:
                continue
            start = self._index.get(tuple(toks[-n:]))
            if start is not None:
                return Draft(tuple(toks[start : start + most]), self._matched(start, n))
        return None

    def _matched(self, start: int, n: int) -> int:
        """How far back the tokens before `start` equal the last ones (at least n)."""
        toks, end = self.tokens, len(self.tokens)
        most = min(LONGEST_MATCH, start)
        while n < most and toks[start - 1 - n] == toks[end - 1 - n]:
            n += 1
        return n


# The acceptance assumed before a match length has been tried: a long match is usually a
# quotation that goes on; a single token is a guess. Worth two drafted tokens of evidence.
# Per class of match length (`match_class`): 1, 2, 3, 4-7, 8-15, 16 and more.
PRIOR_ACCEPTANCE = {1: 0.3, 2: 0.6, 3: 0.8, 4: 0.85, 8: 0.9, 16: 0.95}


def match_class(matched: int) -> int:
    """The class of a match length that acceptance is learnt for: 1, 2, 3, 4, 8 or 16."""
    return max(c for c in PRIOR_ACCEPTANCE if c <= max(1, matched))


@dataclass
class _Acceptance:
    """Per-token acceptance of drafts of one match length, with a decaying memory."""

    offered: float
    accepted: float

    @classmethod
    def prior(cls, kind: int) -> _Acceptance:
        return cls(2.0, 2.0 * PRIOR_ACCEPTANCE[kind])

    @property
    def rate(self) -> float:
        return self.accepted / self.offered

    def record(self, offered: int, accepted: int, decay: float = 0.9) -> None:
        self.offered = self.offered * decay + offered
        self.accepted = self.accepted * decay + accepted


class DraftPlanner:
    """Chooses each step's draft length from measured costs and acceptance.

    The cost of a run of r rows is learnt per r as a multiple of a one-row step's: the median
    of the last few runs' seconds over the one-row step's median then, kept within 1 to r (a
    pass of r rows never costs more than r steps: more is a run the machine held up). Medians
    and ratios, so that a shared machine's stalls and changing load do not stop drafting for
    good: a length looked dear after one stalled run and was never run again to learn better.
    A length not yet run is assumed to cost like the longest one measured below it plus, per
    row, what each row past the first cost in that one, at most the share of a one-row step
    that `row_share` guesses (the guess alone while nothing is measured: at half a step a row,
    rows that shared the weights' unpacking at a fifth of a step each were never tried). Per
    class of match length (`match_class`) the acceptance rate a gives the expected tokens of a
    k-token draft, 1 + a + ... + a^k (the model's own token is always kept), and the length
    that gives the most tokens per second wins; 0 where none beats a plain step. A match class
    that stopped paying is probed again (one drafted token) after `probe_every` chances, and
    each probe that keeps nothing doubles the wait (to MAX_PROBE_GAP): open-ended text matches
    one or two tokens almost everywhere, and probing it at a fixed rate cost a few percent of
    its speed for nothing.
    """

    def __init__(
        self, most: int = MAX_DRAFT, row_share: float = 0.5, probe_every: int = 16
    ) -> None:
        self.most = most
        self.row_share = row_share
        self.probe_every = probe_every
        self._step_s: deque[float] = deque(maxlen=COST_SAMPLES)  # one-row steps' seconds
        self._ratios: dict[int, deque[float]] = {}  # r rows: seconds / a one-row step's
        self._one: float | None = None  # their median
        self._known: dict[int, float] = {}  # `_ratio` until the next pass of rows is recorded
        self._acceptance: dict[int, _Acceptance] = {}
        self._skipped: dict[int, int] = {}
        self._gap: dict[int, int] = {}  # chances between probes, per match class
        self._probing: set[int] = set()  # match classes whose last draft was a probe

    def cost(self, rows: int) -> float | None:
        """The expected seconds of a run of `rows` rows, None before a one-row step ran."""
        if self._one is None:
            return None
        return self._ratio(rows) * self._one

    def _ratio(self, rows: int) -> float:
        """What a run of `rows` rows costs in one-row steps."""
        if rows <= 1:
            return 1.0
        known = self._known.get(rows)
        if known is not None:
            return known
        below = max((r for r in self._ratios if r < rows), default=1)
        share = self.row_share
        if below > 1:  # each row past the longest run measured: as dear as its rows were
            share = min(share, (self._ratio(below) - 1.0) / (below - 1))
        guess = self._ratio(below) + (rows - below) * share
        samples = self._ratios.get(rows)
        ratio = guess
        if samples:
            measured = statistics.median(samples)
            if len(samples) < TRUSTED_SAMPLES:  # one stalled run must not rule a length out
                measured = min(measured, guess)
            ratio = min(max(measured, 1.0), rows)
        self._known[rows] = ratio
        return ratio

    def record_run(self, rows: int, seconds: float) -> None:
        if rows <= 1:
            self._step_s.append(seconds)
            self._one = statistics.median(self._step_s)
        elif self._one:
            self._ratios.setdefault(rows, deque(maxlen=COST_SAMPLES)).append(seconds / self._one)
            self._known.clear()

    def record_draft(self, matched: int, offered: int, accepted: int) -> None:
        kind = match_class(matched)
        if kind in self._probing:
            self._probing.discard(kind)
            gap = self._gap.get(kind, self.probe_every)
            self._gap[kind] = self.probe_every if accepted else min(2 * gap, MAX_PROBE_GAP)
        self._acceptance.setdefault(kind, _Acceptance.prior(kind)).record(offered, accepted)

    def acceptance(self, matched: int) -> float:
        kind = match_class(matched)
        known = self._acceptance.get(kind)
        return (known or _Acceptance.prior(kind)).rate

    def length(self, draft: Draft) -> int:
        """How many of the draft's tokens to verify in the next run (0: a plain step)."""
        most = min(self.most, len(draft.tokens))
        one = self.cost(1)
        if most <= 0 or one is None:
            return 0
        kind = match_class(draft.matched)
        a = min(self.acceptance(kind), 0.999)
        best, best_rate = 0, 1.0 / one
        expected = 1.0
        for k in range(1, most + 1):
            expected += a**k
            cost = self.cost(k + 1)
            assert cost is not None
            if expected / cost > best_rate:
                best, best_rate = k, expected / cost
        if best:
            self._skipped[kind] = 0
            return best
        skipped = self._skipped.get(kind, 0) + 1
        self._skipped[kind] = skipped
        if skipped < self._gap.get(kind, self.probe_every):
            return 0
        self._skipped[kind] = 0
        self._probing.add(kind)
        return 1


@dataclass(frozen=True)
class SpeculativeStep:
    """One verifying run: how many tokens it drafted and how many of them were kept."""

    drafted: int
    accepted: int
