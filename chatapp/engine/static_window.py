"""The KV of fixed-shape (static-window) models, as a strategy either loop is given.

The graph takes `input_ids` [1, W], `attention_mask` [1, C] and past [1, kvH, C-W, D], and
returns present [1, kvH, C, D]; the next past is the present without its first W slots. Slots
fill from the right; the mask says which slots hold real tokens (the first window of a prompt
is left-padded, and with W > 1 each generated token rides in a padded window).

Naive:      numpy feeds; the host slices present[:, :, W:] into the next past every run.
IO-Binding: per KV tensor one past buffer and one present buffer on the device, bound once;
            after each run a tiny device-side session copies present[:, :, W:] into the past
            buffer. The KV never crosses to the host and nothing is re-bound.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from chatapp.engine.devices import Device, create_session, session_options
from chatapp.engine.kv_strategy import (
    Binder,
    GraphRun,
    KvStrategy,
    RunGraph,
    Step,
    combined,
    crossing,
)
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.tensor_types import download, ort_element_type

perf = time.perf_counter
PAD_ID = 0  # any id works: padded slots are masked out


class StaticWindowKv(KvStrategy):
    """C slots, W tokens a run: which slots hold real tokens, and where the KV lives."""

    verifies_in_one_run = False  # drafted tokens sharing a window sit unlike single steps'

    def __init__(self, info: ModelInfo, device: Device, context: int) -> None:
        assert info.window is not None
        # The graph's C is fixed: the allocated context cannot be anything else.
        super().__init__(info, device, info.context_length)
        self.window = info.window
        self.slots = info.context_length
        self.valid = np.zeros(self.slots, dtype=bool)
        self.used_slots = 0  # slots taken since the last reset, padding included
        self.mask = np.zeros((1, self.slots), dtype=np.int64)  # the run's, rewritten in place
        self._past: dict[str, np.ndarray] = {}  # on the host (the naive loop)
        self.past_values: dict[str, ort.OrtValue] = {}  # bound on the device (IO-Binding)
        self.present_values: dict[str, ort.OrtValue] = {}
        self._shift: ort.InferenceSession | None = None
        self._shift_binding: ort.IOBinding | None = None

    # -- what fits ---------------------------------------------------------------------------
    def reusable(self, cached: Sequence[int], prompt: Sequence[int]) -> int:
        """A static cache can grow or start over, not be cut: reuse only a full cached prefix."""
        n = len(cached)
        return n if n and n < len(prompt) and list(prompt[:n]) == list(cached) else 0

    def slots_needed(self, n_tokens: int) -> int:
        return -(-n_tokens // self.window) * self.window

    def fits(self, prompt_tokens: int) -> bool:
        return self.slots_needed(prompt_tokens) < self.slots

    def tokens_that_fit(self, cached: int, new_tokens: int) -> int:
        free = self.slots - self.used_slots - self.slots_needed(new_tokens)
        return max(0, free // self.window)

    def check_room(self, cached: int, n: int) -> None:
        if self.used_slots + self.slots_needed(n) > self.slots:
            raise ValueError("the KV cache is full")

    # -- how a step runs ---------------------------------------------------------------------
    def forward(
        self, run: RunGraph, cached: Sequence[int], new_ids: list[int], wanted: list[int] | None
    ) -> Step:
        steps: list[Step] = []
        rows: list[np.ndarray] = []
        advance_s = 0.0
        done = 0  # new tokens before this window
        every_row = list(range(self.window))
        for ids, flags in self._windows(new_ids):
            t0 = perf()
            start = self.used_slots
            self._advance(flags)
            advance_s += perf() - t0
            step = run(GraphRun(ids, start, every_row, mask=self.mask))
            real = step.logits[flags]
            if wanted is None:
                rows.append(real[-1:])
            else:  # only the rows asked for: a long prompt's every row would be hundreds of MB
                rows.append(real[[r - done for r in wanted if done <= r < done + len(real)]])
            done += len(real)
            steps.append(step)
        out = np.concatenate(rows)
        return combined(steps, out if wanted is not None else out[-1], advance_s)

    def _windows(self, ids: list[int]) -> list[tuple[list[int], np.ndarray]]:
        """(ids, real-token flags) of each run, W each; the first window is left-padded."""
        w = self.window
        pad = (-len(ids)) % w
        padded = [PAD_ID] * pad + ids
        flags = np.array([False] * pad + [True] * len(ids))
        return [(padded[i : i + w], flags[i : i + w]) for i in range(0, len(padded), w)]

    def _advance(self, flags: np.ndarray) -> None:
        """Slide the slot flags by one window and write the attention mask [1, C]."""
        self.valid = np.concatenate([self.valid[self.window :], flags])
        self.used_slots += self.window
        self.mask[0] = self.valid

    # -- where the KV lives ------------------------------------------------------------------
    def truncate(self, keep: int) -> None:
        if keep:
            self._take_back(int(np.count_nonzero(self.valid)) - keep)
            return
        self.valid[:] = False
        self.used_slots = 0
        info = self.info
        zeros: np.ndarray = np.zeros(
            (1, info.kv_heads, self.slots - self.window, info.head_dim), info.kv_dtype
        )
        if self.binder is None:
            self._past = {t.past_name: zeros for t in info.kv}
            return
        # Fresh device memory may hold NaN, and 0 * NaN in the attention sum is still NaN, so
        # a new conversation zeroes the past buffers (one upload per reset, not per token).
        for value in self.past_values.values():
            value.update_inplace(zeros)
            self.pending_h2d += crossing(self.device, [zeros])

    def _take_back(self, count: int) -> None:
        """Undo the last `count` runs of one token each (drafted tokens not kept, verified one
        a window: KVLoop.verify): slide the slots back right by their windows, so the cache
        is laid out as if they had never run, which keeps the next steps' bits the plain
        decode's. (`reusable` keeps all or nothing, so only a rollback cuts.) Masking them
        out instead moves the older tokens within the attention's sums: log-probs 4e-7 off."""
        if count <= 0:
            return
        back = count * self.window
        last = self.valid[-back:].reshape(count, self.window)
        if not (last[:, -1].all() and not last[:, :-1].any()):
            raise ValueError("only runs of one token each can be taken back from a static window")
        self.valid = np.concatenate([np.zeros(back, dtype=bool), self.valid[:-back]])
        self.used_slots -= back
        self.mask[0] = self.valid
        if self.binder is None:
            self._past = {name: _slid_right(p, back) for name, p in self._past.items()}
            return
        for value in self.past_values.values():
            host = _slid_right(download(self.device, value), back)
            value.update_inplace(host)
            self.pending_d2h += crossing(self.device, [host])
            self.pending_h2d += crossing(self.device, [host])

    def host_feeds(self) -> Mapping[str, np.ndarray]:
        return self._past

    def keep_host(self, outputs: Mapping[str, np.ndarray]) -> None:
        # The host builds the next past: every layer's present without its oldest window.
        w = self.window
        self._past = {
            t.past_name: np.ascontiguousarray(outputs[t.present_name][:, :, w:])
            for t in self.info.kv
        }

    def bind(self, binder: Binder) -> None:
        self.binder = binder
        info, device = self.info, self.device
        # One thread: a memcpy needs no pool, and an idle pool's spinning threads would
        # compete with the model's own. Same device as the model, so the KV stays there.
        options = session_options(threads=1)
        self._shift = create_session(shift_model(info, self.slots, self.window), device, options)
        shift = self._shift_binding = self._shift.io_binding()
        past_shape = [1, info.kv_heads, self.slots - self.window, info.head_dim]
        present_shape = [1, info.kv_heads, self.slots, info.head_dim]
        for t in info.kv:
            past = device.allocate(past_shape, ort_element_type(info.kv_dtype))
            present = device.allocate(present_shape, ort_element_type(info.kv_dtype))
            self.past_values[t.past_name], self.present_values[t.present_name] = past, present
            # Bound once, for good: model reads past, writes present; shift reads present,
            # writes past.
            binder.bind_input(t.past_name, past)
            binder.bind_output(t.present_name, present)
            shift.bind_ortvalue_input(t.present_name, present)
            shift.bind_ortvalue_output(t.past_name, past)
        self.truncate(0)

    def keep_bound(self) -> None:
        assert self._shift is not None and self._shift_binding is not None
        self._shift.run_with_iobinding(self._shift_binding)
        self._shift_binding.synchronize_outputs()

    def bound_values(self) -> dict[str, ort.OrtValue]:
        return {**self.past_values, **self.present_values}


def _slid_right(past: np.ndarray, slots: int) -> np.ndarray:
    """A past [1, kvH, S, D] moved right by `slots` slots, zeros coming in on the left (the
    slots a run pushed out on the left were unused: the room check leaves a window free)."""
    out = np.zeros_like(past)
    out[:, :, slots:] = past[:, :, :-slots]
    return out


def shift_model(info: ModelInfo, slots: int, window: int) -> bytes:
    """A graph that drops the first `window` slots of every present: present[:, :, W:]."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(info.kv_dtype))
    starts = helper.make_tensor("starts", onnx.TensorProto.INT64, [1], [window])
    ends = helper.make_tensor("ends", onnx.TensorProto.INT64, [1], [slots])
    axes = helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [2])
    nodes, inputs, outputs = [], [], []
    for t in info.kv:
        inputs.append(
            helper.make_tensor_value_info(
                t.present_name, elem, [1, info.kv_heads, slots, info.head_dim]
            )
        )
        outputs.append(
            helper.make_tensor_value_info(
                t.past_name, elem, [1, info.kv_heads, slots - window, info.head_dim]
            )
        )
        nodes.append(
            helper.make_node("Slice", [t.present_name, "starts", "ends", "axes"], [t.past_name])
        )
    graph = helper.make_graph(nodes, "shift", inputs, outputs, [starts, ends, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())
