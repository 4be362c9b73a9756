"""No KV cache: the first write-up's starting point, kept to be measured.

Every step runs the whole sequence so far (prompt and the tokens generated until now) through
the same graph, starting from an empty KV, with the mask and positions of the whole sequence;
the presents are dropped. Its greedy tokens equal the cached loops' (the same computation,
redone), and its cost per token grows with the length where the cached loops' stays flat: that
growth is what a KV cache saves (docs/engine.md).

`NoCacheKv` is a strategy the naive loop is given (`session.run`, numpy feeds), around the
strategy of the model's layout:
- dynamic layouts (shared-buffer, concat): one run per step over the whole sequence (runs of at
  most `max_run_rows` on a device that needs them, each piece's presents the next one's past),
  and the last run fetches only the logits (on a device, the presents never come back);
- static-window graphs have no empty past: their shapes are fixed. "No cache" there means
  starting over every step: zeroed past, all slots free, then the whole sequence window by
  window, as a new conversation's prompt would run. The work per step grows with the windows
  the sequence fills.

An answer in this loop stops at SEQUENCE_CAP tokens of sequence (prompt and answer), or after
MIN_ANSWER tokens where the prompt is longer already; benchmarks (which ask for exact lengths)
are not capped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnxruntime as ort

from chatapp.engine.kv_strategy import (
    Binder,
    GraphRun,
    KvStrategy,
    RunGraph,
    Step,
    combined,
)
from chatapp.engine.static_window import StaticWindowKv

# Each step costs about as much as a prompt of the sequence's length: on the default model on a
# 2-core machine a 1k-token sequence takes about 2 s per token, 4.5 s at 2k. So a chat answer
# without a cache stops at 1024 tokens of sequence; a longer prompt still gets MIN_ANSWER tokens.
SEQUENCE_CAP = 1024
MIN_ANSWER = 16


def capped_new_tokens(prompt_tokens: int, asked: int) -> int:
    """How many new tokens an answer without a cache may have."""
    return min(asked, max(MIN_ANSWER, SEQUENCE_CAP - prompt_tokens))


class NoCacheKv(KvStrategy):
    """Nothing kept between steps: `inner` (the layout's strategy, on the host) holds a KV only
    within a step."""

    caches = False

    def __init__(self, inner: KvStrategy) -> None:
        super().__init__(inner.info, inner.device, inner.context)
        self.inner = inner

    # -- what fits ---------------------------------------------------------------------------
    def reusable(self, cached: Sequence[int], prompt: Sequence[int]) -> int:
        return 0  # nothing is reused: the whole prompt runs (as every step will)

    def fits(self, prompt_tokens: int) -> bool:
        return self.inner.fits(prompt_tokens)

    def tokens_that_fit(self, cached: int, new_tokens: int) -> int:
        # The whole sequence is packed again each step: no padded window per token.
        return max(0, self.context - cached - new_tokens)

    def check_room(self, cached: int, n: int) -> None:
        if self.inner.slots_needed(cached + n) > self.context:
            raise ValueError("the sequence is longer than the model's context")

    def piece_tokens(self, prefill_chunk: int) -> int | None:
        return None  # a piece after the first would need the cache this strategy does not keep

    # -- how a step runs ---------------------------------------------------------------------
    def forward(
        self, run: RunGraph, cached: Sequence[int], new_ids: list[int], wanted: list[int] | None
    ) -> Step:
        sequence = [*cached, *new_ids]
        self.inner.truncate(0)  # start over: an empty (static: zeroed) KV, every slot free
        try:
            if isinstance(self.inner, StaticWindowKv):  # fixed shapes: window by window
                rows = None if wanted is None else [len(cached) + r for r in wanted]
                return self.inner.forward(run, [], sequence, rows)
            return self._in_pieces(run, sequence, len(cached), wanted, len(new_ids) > 1)
        finally:
            self.inner.truncate(0)  # the step's KV is dropped

    def _in_pieces(
        self,
        run: RunGraph,
        sequence: list[int],
        past_len: int,
        wanted: list[int] | None,
        shrink_arena: bool,
    ) -> Step:
        """The whole sequence in runs of at most `max_run_rows` tokens (all of it in one where
        the device allows: devices.py); the last run fetches only its logits."""
        # The rows asked for, as positions of the whole sequence.
        rows = [past_len + r for r in wanted] if wanted is not None else [len(sequence) - 1]
        limit = self.device.max_run_rows or len(sequence)
        steps: list[Step] = []
        picked: list[np.ndarray] = []
        for start in range(0, len(sequence), limit):
            piece = sequence[start : start + limit]
            end = start + len(piece)
            mine = [r - start for r in rows if start <= r < end]
            last = end == len(sequence)  # its presents are dropped: not fetched
            step = run(GraphRun(piece, start, mine or None, None, not last, shrink_arena))
            if mine:
                picked.append(step.logits)  # [len(mine), vocab]: rows were asked for
            steps.append(step)
        every = np.concatenate(picked)
        return combined(steps, every[-1] if wanted is None else every)

    # -- where the KV lives: the inner strategy's, on the host -------------------------------
    def truncate(self, keep: int) -> None:
        self.inner.truncate(0)

    def host_feeds(self) -> Mapping[str, np.ndarray]:
        return self.inner.host_feeds()

    def keep_host(self, outputs: Mapping[str, np.ndarray]) -> None:
        self.inner.keep_host(outputs)

    def bind(self, binder: Binder) -> None:
        raise TypeError("without a KV cache the model runs on the naive loop only")

    def keep_bound(self) -> None:
        raise TypeError("without a KV cache the model runs on the naive loop only")

    def bound_values(self) -> dict[str, ort.OrtValue]:
        return {}
