"""Loops for fixed-shape (static-window) models.

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

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from chatapp.engine.devices import Device, create_session, session_options
from chatapp.engine.loops import KVLoop, Step, crossing
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.tensor_types import ort_element_type

perf = time.perf_counter
PAD_ID = 0  # any id works: padded slots are masked out


class StaticWindowLoop(KVLoop):
    """Shared bookkeeping: which of the C slots hold real tokens, and how tokens are windowed."""

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        assert info.window is not None
        self.window = info.window
        # The graph's C is fixed: the allocated context cannot be anything else.
        super().__init__(session, info, device, info.context_length)
        self.slots = info.context_length
        self.valid = np.zeros(self.slots, dtype=bool)
        self.used_slots = 0  # slots taken since the last reset, padding included

    def prepare(self, prompt: list[int] | tuple[int, ...]) -> int:  # type: ignore[override]
        """A static cache can grow or start over, not be cut: reuse only a full cached prefix."""
        n = len(self.cached)
        if n and n < len(prompt) and list(prompt[:n]) == self.cached:
            return n
        self.reset()
        return 0

    def _truncate(self, keep: int) -> None:
        if keep == 0:
            self.valid[:] = False
            self.used_slots = 0
            self._clear_kv()

    def slots_needed(self, n_tokens: int) -> int:
        return -(-n_tokens // self.window) * self.window

    def fits(self, prompt_tokens: int) -> bool:
        return self.slots_needed(prompt_tokens) < self.slots

    def tokens_that_fit(self, new_tokens: int) -> int:
        free = self.slots - self.used_slots - self.slots_needed(new_tokens)
        return max(0, free // self.window)

    def _check_room(self, n: int) -> None:
        if self.used_slots + self.slots_needed(n) > self.slots:
            raise ValueError("the KV cache is full")

    def _windows(self, ids: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(ids [1, W], real-token flags [W]) per run; the first window is left-padded."""
        w = self.window
        pad = (-len(ids)) % w
        padded = [PAD_ID] * pad + ids
        flags = np.array([False] * pad + [True] * len(ids))
        return [
            (np.asarray([padded[i : i + w]], dtype=np.int64), flags[i : i + w])
            for i in range(0, len(padded), w)
        ]

    def _advance(self, flags: np.ndarray) -> np.ndarray:
        """Slide the slot flags by one window; returns the attention mask [1, C]."""
        self.valid = np.concatenate([self.valid[self.window :], flags])
        self.used_slots += self.window
        return self.valid.astype(np.int64)[None, :]

    def _forward(self, new_ids: list[int], past_len: int, wanted: list[int] | None) -> Step:
        host_s = run_s = 0.0
        h2d = d2h = 0
        rows = []
        done = 0  # new tokens before this window
        for ids, flags in self._windows(new_ids):
            t0 = perf()
            mask = self._advance(flags)
            t1 = perf()
            window = self._run_window(ids, mask)
            t2 = perf()
            real = window.logits[flags]
            if wanted is None:
                rows.append(real[-1:])
            else:  # only the rows asked for: a long prompt's every row would be hundreds of MB
                rows.append(real[[r - done for r in wanted if done <= r < done + len(real)]])
            done += len(real)
            host_s += (t1 - t0) + window.host_s
            run_s += (t2 - t1) - window.host_s
            h2d += window.h2d_bytes
            d2h += window.d2h_bytes
        out = np.concatenate(rows)
        return Step(out if wanted is not None else out[-1], host_s, run_s, h2d, d2h)

    def _run_window(self, ids: np.ndarray, mask: np.ndarray) -> Step:
        """Run one window: logits [W, vocab]; host_s is the part spent on the KV."""
        raise NotImplementedError

    def _clear_kv(self) -> None:
        raise NotImplementedError


class NaiveStaticLoop(StaticWindowLoop):
    mode = Mode.NAIVE

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        self._names = [o.name for o in session.get_outputs()]
        self._clear_kv()

    def _clear_kv(self) -> None:
        info = self.info
        shape = (1, info.kv_heads, self.slots - self.window, info.head_dim)
        self._past: dict[str, np.ndarray] = {
            t.past_name: np.zeros(shape, dtype=info.kv_dtype) for t in info.kv
        }

    def _run_window(self, ids: np.ndarray, mask: np.ndarray) -> Step:
        io = self.info.io
        feeds = {io.input_ids: ids, io.attention_mask: mask, **self._past}
        fetched = self.session.run(None, feeds)
        outputs = dict(zip(self._names, fetched, strict=True))
        t0 = perf()
        # The host builds the next past: every layer's present without its oldest window.
        w = self.window
        self._past = {
            t.past_name: np.ascontiguousarray(outputs[t.present_name][:, :, w:])
            for t in self.info.kv
        }
        return Step(
            outputs[io.logits][0],
            perf() - t0,
            0.0,
            crossing(self.device, list(feeds.values())),
            crossing(self.device, fetched),
        )


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


class IOBindingStaticLoop(StaticWindowLoop):
    mode = Mode.IOBINDING

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        self._binding = session.io_binding()
        # One thread: a memcpy needs no pool, and an idle pool's spinning threads would
        # compete with the model's own. Same device as the model, so the KV stays there.
        options = session_options(threads=1)
        self._shift = create_session(shift_model(info, self.slots, self.window), device, options)
        self._shift_binding = self._shift.io_binding()
        past_shape = [1, info.kv_heads, self.slots - self.window, info.head_dim]
        present_shape = [1, info.kv_heads, self.slots, info.head_dim]
        self.past: dict[str, ort.OrtValue] = {}
        self.present: dict[str, ort.OrtValue] = {}
        for t in info.kv:
            past = device.allocate(past_shape, ort_element_type(info.kv_dtype))
            present = device.allocate(present_shape, ort_element_type(info.kv_dtype))
            self.past[t.past_name], self.present[t.present_name] = past, present
            # Bound once, for good: model reads past, writes present; shift reads present,
            # writes past.
            self._binding.bind_ortvalue_input(t.past_name, past)
            self._binding.bind_ortvalue_output(t.present_name, present)
            self._shift_binding.bind_ortvalue_input(t.present_name, present)
            self._shift_binding.bind_ortvalue_output(t.past_name, past)
        self._ids = np.zeros((1, self.window), dtype=np.int64)
        self._mask = np.zeros((1, self.slots), dtype=np.int64)
        self._logits = np.zeros((1, self.window, info.vocab_size), dtype=info.logits_dtype)
        # The logits land in host memory: the run returns once the device has finished.
        self._binding.bind_output(
            info.io.logits,
            "cpu",
            0,
            self._logits.dtype,
            list(self._logits.shape),
            self._logits.ctypes.data,
        )
        self._bind_inputs()
        self._clear_kv()

    def _clear_kv(self) -> None:
        # Fresh device memory may hold NaN, and 0 * NaN in the attention sum is still NaN, so
        # a new conversation zeroes the past buffers (one upload per reset, not per token).
        info = self.info
        shape = (1, info.kv_heads, self.slots - self.window, info.head_dim)
        zeros: np.ndarray = np.zeros(shape, info.kv_dtype)
        for value in self.past.values():
            value.update_inplace(zeros)
            self._pending_h2d += crossing(self.device, [zeros])

    def _bind_inputs(self) -> None:
        io = self.info.io
        for name, array in ((io.input_ids, self._ids), (io.attention_mask, self._mask)):
            self._binding.bind_input(name, "cpu", 0, np.int64, list(array.shape), array.ctypes.data)

    def _run_window(self, ids: np.ndarray, mask: np.ndarray) -> Step:
        # Rewritten in place in their bound buffers; a device copies a host input when it is
        # bound, so there they are bound again (see IOBindingLoop._bind_row).
        self._ids[...] = ids
        self._mask[...] = mask
        if self.device.own_memory:
            self._bind_inputs()
        self.session.run_with_iobinding(self._binding)
        t0 = perf()
        self._shift.run_with_iobinding(self._shift_binding)
        self._shift_binding.synchronize_outputs()
        shift_s = perf() - t0
        return Step(
            self._logits[0],
            shift_s,
            0.0,
            crossing(self.device, [self._ids, self._mask]),
            crossing(self.device, [self._logits]),
        )
