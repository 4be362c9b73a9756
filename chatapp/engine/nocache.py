"""The loop without a KV cache: the first write-up's starting point, kept to be measured.

Every step runs the whole sequence so far (prompt and the tokens generated until now) through
the same graph, with an empty past (past length 0) and the mask and positions of the whole
sequence; the presents the graph returns are dropped. Its greedy tokens equal the cached
loops' (the same computation, redone), and its cost per token grows with the length where the
cached loops' stays flat: that growth is what a KV cache saves (docs/engine.md).

NoCacheLoop        dynamic layouts (shared-buffer, concat): one `session.run` per step over
                   the whole sequence, numpy feeds, only the logits fetched (on a device, the
                   presents never come back to the host).
NoCacheStaticLoop  static-window graphs have no empty past: their shapes are fixed. "No cache"
                   there means starting over every step: zeroed past, all slots free, then the
                   whole sequence window by window, as a new conversation's prompt would run.
                   The work per step grows with the windows the sequence fills.

An answer in this loop stops at SEQUENCE_CAP tokens of sequence (prompt and answer), or after
MIN_ANSWER tokens where the prompt is longer already; benchmarks (which ask for exact lengths)
are not capped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.loops import KVLoop, Step, crossing
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.static_window import NaiveStaticLoop
from chatapp.engine.tensor_types import needs_ortvalues, run_with_host_arrays

perf = time.perf_counter

# Each step costs about as much as a prompt of the sequence's length: on the default model on a
# 2-core machine a 1k-token sequence takes about 2 s per token, 4.5 s at 2k. So a chat answer
# without a cache stops at 1024 tokens of sequence; a longer prompt still gets MIN_ANSWER tokens.
SEQUENCE_CAP = 1024
MIN_ANSWER = 16


def capped_new_tokens(prompt_tokens: int, asked: int) -> int:
    """How many new tokens an answer without a cache may have."""
    return min(asked, max(MIN_ANSWER, SEQUENCE_CAP - prompt_tokens))


class NoCacheLoop(KVLoop):
    mode = Mode.NOCACHE

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        empty: np.ndarray = np.zeros((1, info.kv_heads, 0, info.head_dim), dtype=info.kv_dtype)
        self._empty_past = {t.past_name: empty for t in info.kv}
        self._ortvalue_io = needs_ortvalues(info.kv_dtype, info.logits_dtype)

    def prepare(self, prompt: Sequence[int]) -> int:
        """Nothing is reused: the whole prompt runs (as every step will)."""
        self.cached = []
        return 0

    def _truncate(self, keep: int) -> None:
        pass  # no KV is kept: `cached` (the tokens) is all there is

    def _forward_ids(self, ids: list[int], wanted: list[int] | None) -> Step:
        # No pieces: a piece after the first would need the cache this loop does not keep.
        return self._charge_pending(self._run(ids, wanted))

    def _forward(self, new_ids: list[int], past_len: int, wanted: list[int] | None) -> Step:
        sequence = [*self.cached, *new_ids]
        # The rows asked for, as positions of the whole sequence.
        rows = [past_len + r for r in wanted] if wanted is not None else [len(sequence) - 1]
        # One run, or runs of at most max_run_rows on a device that computes longer ones wrongly.
        limit = self.device.max_run_rows or len(sequence)
        options = self._run_options(len(new_ids))
        return self._forward_in_pieces(sequence, rows, wanted is None, limit, options)

    def _forward_in_pieces(
        self,
        sequence: list[int],
        rows: list[int],
        last_only: bool,
        limit: int,
        options: ort.RunOptions | None,
    ) -> Step:
        """The whole sequence again, in runs of at most `limit` tokens (all of it in one where
        the device allows: devices.py): each piece's presents are the next one's past and are
        dropped at the end of the step, so nothing is kept from one step to the next (the last
        piece, or the only one, fetches only its logits: its presents are computed and dropped)."""
        t0 = perf()
        io = self.io
        past: dict[str, np.ndarray] = dict(self._empty_past)
        fetch = [io.logits, *(t.present_name for t in self.info.kv)]
        run_s = 0.0
        h2d = d2h = 0
        picked: list[np.ndarray] = []
        for start in range(0, len(sequence), limit):
            piece = sequence[start : start + limit]
            end = start + len(piece)
            mine = [r - start for r in rows if start <= r < end]
            feeds: dict[str, np.ndarray] = {
                io.input_ids: np.asarray([piece], dtype=np.int64),
                io.attention_mask: np.ones((1, end), dtype=np.int64),
                **past,
            }
            if io.logits_positions:
                # At least one row: an empty list asks the graph for every row.
                feeds[io.logits_positions] = np.asarray(mine or [len(piece) - 1], dtype=np.int64)
            if io.position_ids:
                feeds[io.position_ids] = self._positions(start, len(piece))
            if io.use_cache_branch:  # legacy merged decoders: a past only after a piece
                feeds[io.use_cache_branch] = np.array([start > 0])
            wanted = fetch if end < len(sequence) else fetch[:1]  # the last piece: logits
            t1 = perf()
            if self._ortvalue_io:
                outputs = run_with_host_arrays(self.session, wanted, feeds)
            else:
                outputs = self.session.run(wanted, feeds, options)
            t2 = perf()
            run_s += t2 - t1
            h2d += crossing(self.device, list(feeds.values()))
            d2h += crossing(self.device, outputs)
            past = dict(zip((t.past_name for t in self.info.kv), outputs[1:], strict=False))
            if mine:
                logits = outputs[0][0]
                picked.append(logits if io.logits_positions else logits[mine])
        every = np.concatenate(picked)
        host_s = perf() - t0 - run_s
        return Step(every[-1] if last_only else every, host_s, run_s, h2d, d2h)


class NoCacheStaticLoop(NaiveStaticLoop):
    mode = Mode.NOCACHE

    def prepare(self, prompt: list[int] | tuple[int, ...]) -> int:  # type: ignore[override]
        self.reset()
        return 0

    def fits(self, prompt_tokens: int) -> bool:
        return self.slots_needed(prompt_tokens) < self.slots

    def tokens_that_fit(self, new_tokens: int) -> int:
        # The whole sequence is packed into windows again each step: no padded window per token.
        return max(0, self.slots - len(self.cached) - new_tokens)

    def _check_room(self, n: int) -> None:
        if self.slots_needed(len(self.cached) + n) > self.slots:
            raise ValueError("the sequence is longer than the model's fixed context")

    def _forward(self, new_ids: list[int], past_len: int, wanted: list[int] | None) -> Step:
        sequence = [*self.cached, *new_ids]
        self._truncate(0)  # start over: zeroed past, every slot free
        rows = None if wanted is None else [past_len + r for r in wanted]
        return super()._forward(sequence, 0, rows)
