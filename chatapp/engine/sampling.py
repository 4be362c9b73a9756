"""Choosing the next token: greedy, temperature, top-k, top-p, repetition penalty, seeded."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

MAX_LOGIT_BIAS = 100  # OpenAI's bound: -100 bans a token
PENALTY_ALL = -1


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.7
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    repetition_penalty: float = 1.1  # 1.0 = off
    seed: int | None = None
    max_new_tokens: int = 256
    # OpenAI's logit_bias: (token id, bias) pairs added to the logits before any choice; a bias
    # of -100 bans the token (its logit becomes -inf), +100 all but forces it.
    logit_bias: tuple[tuple[int, float], ...] = ()
    # The end-of-text token is not chosen before this many tokens (transformers'
    # min_new_tokens, vLLM's min_tokens): text continuation asks for at least one.
    min_new_tokens: int = 0
    # How many of the latest tokens (prompt and answer) the penalty looks at: -1 all of them
    # (transformers' and vLLM's meaning), n the last n (llama.cpp's repeat_last_n, 64 there).
    # All: over the last 64, Gemma 3 270M base repeated a paragraph in 3 of 4 continuations.
    penalty_last_n: int = PENALTY_ALL

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        # `not x >= 0` rather than `x < 0`: NaN fails every comparison and must be refused.
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError("temperature must be 0 (greedy) or more")
        if not self.top_k >= 0:
            raise ValueError("top-k must be 0 (off) or more")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top-p must be in (0, 1]")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise ValueError("repetition penalty must be positive")
        if not self.max_new_tokens >= 1:
            raise ValueError("max new tokens must be at least 1")
        if not self.penalty_last_n >= -1:
            raise ValueError("the penalty's last tokens must be -1 (all), 0 (none) or more")
        if not self.min_new_tokens >= 0:
            raise ValueError("min new tokens must be 0 or more")
        if self.seed is not None and not self.seed >= 0:
            raise ValueError("the seed must be 0 or more")
        for token, bias in self.logit_bias:
            if not token >= 0:
                raise ValueError("logit bias token ids must be 0 or more")
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise ValueError(f"logit biases must be from -{MAX_LOGIT_BIAS} to {MAX_LOGIT_BIAS}")


# ---- presets: the window's three buttons; `generate --greedy` is "precise" ------------------

PRESET_LABELS = {"precise": "Precise", "balanced": "Balanced", "creative": "Creative"}
PRESETS = {
    # Greedy; the mild penalty keeps a small model out of loops (a poem by the 135M model
    # repeats "a place where the sea is a place" without it).
    "precise": SamplingSettings(temperature=0.0, top_k=40, top_p=0.95, repetition_penalty=1.1),
    "balanced": SamplingSettings(temperature=0.7, top_k=40, top_p=0.9, repetition_penalty=1.1),
    "creative": SamplingSettings(temperature=1.0, top_k=100, top_p=0.95, repetition_penalty=1.1),
}
PRESET_TIPS = {
    "precise": "Always the most likely token, with a mild repetition penalty: the right answers "
    "small models know",
    "balanced": "Some variety (temperature 0.7, top-p 0.9): for models of a billion "
    "parameters and more",
    "creative": "More variety (temperature 1.0, top-p 0.95): stories and ideas, more mistakes",
}


def chosen_sampling(preset: str | None = None, **chosen: Any) -> SamplingSettings:
    """The one place a preset (the window's buttons; `generate --greedy` is "precise") and the
    values a person named become settings: greedy is temperature 0 with the rest of the preset
    kept, its repetition penalty too (1 turns it off, in the window and on the command line)."""
    base = PRESETS[preset] if preset is not None else SamplingSettings()
    return replace(base, **chosen)


GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0)


class BiasRefused(ValueError):
    """A request's logit_bias that leaves nothing to sample: the request's fault, at any step."""


class Sampler:
    """Chooses tokens for one answer. `never`: ids no answer may contain (a text-only model's
    image and sound markers); a call's `avoid` adds ids for that token alone (the end of text
    before min_new_tokens). A choice that falls on one is made again with them masked (greedy:
    the best other token), so the usual choice pays one set lookup, not a copy of the row."""

    def __init__(self, settings: SamplingSettings, never: Iterable[int] = ()) -> None:
        settings.validate()
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)
        ids = [token for token, _ in settings.logit_bias]
        biases = [-np.inf if b <= -MAX_LOGIT_BIAS else b for _, b in settings.logit_bias]
        self._bias_ids = np.asarray(ids, dtype=np.int64)
        self._biases = np.asarray(biases, dtype=np.float32)
        self._never = frozenset(int(t) for t in never)

    def __call__(
        self, logits: np.ndarray, history: Sequence[int], avoid: frozenset[int] = frozenset()
    ) -> int:
        """Pick a token from raw logits [vocab]; `history` feeds the repetition penalty."""
        token = self._choose(logits, history)
        if token not in self._never and token not in avoid:
            return token
        banned = [t for t in self._never | avoid if 0 <= t < logits.size]
        masked = logits.astype(np.float32)  # a copy: the caller's row keeps the raw logits
        masked[banned] = -np.inf
        if masked.max() == -np.inf:  # nothing else is allowed (a grammar that must end)
            return token
        return self._choose(masked, history)

    def _choose(self, logits: np.ndarray, history: Sequence[int]) -> int:
        s = self.settings
        if self._bias_ids.size:
            logits = self._biased(logits)
        if s.repetition_penalty != 1.0 and history and s.penalty_last_n != 0:
            recent = history if s.penalty_last_n < 0 else history[-s.penalty_last_n :]
            logits = _penalize(logits, recent, s.repetition_penalty)
        if s.greedy:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / s.temperature
        if s.top_k and s.top_k < scaled.size:
            candidates = np.argpartition(-scaled, s.top_k - 1)[: s.top_k]
        else:
            candidates = np.arange(scaled.size)
        order = candidates[np.argsort(-scaled[candidates], kind="stable")]
        probs = np.exp(scaled[order] - scaled[order[0]])
        probs /= probs.sum()
        if s.top_p < 1.0:
            # Keep the smallest head whose mass reaches top_p (always at least one token).
            keep = int(np.searchsorted(np.cumsum(probs), s.top_p) + 1)
            order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
        return int(order[self.rng.choice(order.size, p=probs)])

    def _biased(self, logits: np.ndarray) -> np.ndarray:
        if int(self._bias_ids.max()) >= logits.size:
            raise BiasRefused(
                f"logit_bias names token {int(self._bias_ids.max())}, but the model's "
                f"vocabulary has {logits.size} tokens."
            )
        out = logits.astype(np.float32)  # a copy: the caller's row keeps the raw logits
        out[self._bias_ids] += self._biases
        if out.max() == -np.inf:  # with a grammar's mask: nothing left to choose from
            raise BiasRefused(
                "logit_bias bans every token the answer may continue with (with a JSON "
                "schema: every token the schema allows); ban fewer tokens."
            )
        return out


def _penalize(logits: np.ndarray, history: Sequence[int], penalty: float) -> np.ndarray:
    """CTRL-style penalty: seen tokens' positive logits shrink, negative ones grow."""
    out = logits.copy()
    seen = np.unique(np.asarray(history, dtype=np.int64))
    seen = seen[(seen >= 0) & (seen < out.size)]
    values = out[seen]
    out[seen] = np.where(values > 0, values / penalty, values * penalty)
    return out


def log_softmax_at(logits: np.ndarray, token: int, scratch: np.ndarray | None = None) -> float:
    """log p(token) under softmax(logits), computed stably.

    It runs on every token, so it stays in float32 (the sum of exp(x - max) is >= 1, and
    numpy sums pairwise) and writes into `scratch`, a float32 array shaped like `logits`, when
    given: a fresh vocabulary-sized array per token is fresh memory to fault in (in the decode
    loop this took the call from about 180 to 120 microseconds).
    """
    top = logits.max()
    shifted = np.subtract(logits, top, out=scratch, dtype=np.float32)
    np.exp(shifted, out=shifted)
    return float(logits[token] - top - np.log(shifted.sum()))


def top_logprobs(logits: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    """The k most likely tokens as (id, log p) under softmax(logits), most likely first."""
    k = min(k, logits.size)
    top = logits.max()
    norm = float(top) + float(np.log(np.exp(logits - top, dtype=np.float32).sum()))
    ids = np.argpartition(-logits, k - 1)[:k]
    ids = ids[np.argsort(-logits[ids], kind="stable")]
    return tuple((int(i), float(logits[i]) - norm) for i in ids)


def token_logprobs(logits: np.ndarray, tokens: Sequence[int], rows: int = 0) -> np.ndarray:
    """log p(tokens[i]) under softmax(logits[i]) for each row.

    For a long prompt this runs over millions of logits before the first answer token can be
    shown, so it works in float32 and in blocks of rows that stay in cache: a float64 copy of
    all rows took longer than the model's own prefill. A block is about 1M logits unless
    `rows` says otherwise (64 rows of a 16k vocabulary, 4 of Gemma 3's 262k: 64 of those
    took 128 MiB of temporaries).
    """
    rows = rows or max(1, (1 << 20) // max(1, logits.shape[-1]))
    out = np.empty(len(tokens), dtype=np.float64)
    targets = np.asarray(tokens)
    for start in range(0, len(tokens), rows):
        # float16 / bfloat16 logits are widened one block at a time: never all rows at once.
        block = logits[start : start + rows].astype(np.float32, copy=False)
        top = block.max(axis=-1, keepdims=True)
        total = np.exp(block - top, dtype=np.float32).sum(axis=-1, dtype=np.float64)
        picked = block[np.arange(block.shape[0]), targets[start : start + rows]]
        out[start : start + rows] = picked - top[:, 0] - np.log(total)
    return out
