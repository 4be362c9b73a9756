"""The two generation loops: same model, same tokens under greedy decoding, different plumbing.

NaiveLoop     `session.run` with numpy feeds; after every step the host builds the next
              past_key_values from the present outputs.
IOBindingLoop KV buffers allocated once on the device and bound once; per step only input_ids
              and attention_mask change, and only the logits the sampler needs come back.

A loop keeps the KV cache of the tokens it has seen (`cached`), so a follow-up turn that starts
with the same tokens only prefills what is new.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.model import KVLayout, ModelInfo

perf = time.perf_counter


class KVLoop(ABC):
    mode: str = ""

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        self.session = session
        self.info = info
        self.device = device
        self.max_context = max_context
        self.cached: list[int] = []
        self._mask = np.ones((1, max_context), dtype=np.int64)
        self._needs_positions = info.has_position_ids

    def reset(self) -> None:
        """Forget the cache (new chat, or the model/device changed)."""
        self._truncate(0)
        self.cached = []

    def prepare(self, prompt: Sequence[int]) -> int:
        """Keep the cached prefix shared with `prompt`; returns how many tokens are reused."""
        reuse = 0
        limit = min(len(self.cached), len(prompt) - 1)  # at least one token must run
        while reuse < limit and self.cached[reuse] == prompt[reuse]:
            reuse += 1
        self._truncate(reuse)
        self.cached = list(prompt[:reuse])
        return reuse

    def fits(self, prompt_tokens: int) -> bool:
        """Can a prompt this long run and leave room to generate?"""
        return prompt_tokens < self.max_context

    def tokens_that_fit(self, new_tokens: int) -> int:
        """How many tokens can be generated after prefilling `new_tokens` more."""
        return self.max_context - len(self.cached) - new_tokens

    def forward(
        self, new_ids: Sequence[int], all_logits: bool = False
    ) -> tuple[np.ndarray, float, float]:
        """Run `new_ids` after the cached tokens.

        Returns (logits, host_s, run_s): logits [len(new_ids), vocab] when all_logits, else the
        last position's [vocab]; host_s is input/KV preparation, run_s the time in onnxruntime.
        The logits may live in a buffer the next call overwrites: copy them to keep them.
        """
        if len(self.cached) + len(new_ids) > self.max_context:
            raise ValueError("the KV cache is full")
        logits, host_s, run_s = self._forward(list(new_ids), len(self.cached), all_logits)
        self.cached.extend(int(t) for t in new_ids)
        return logits, host_s, run_s

    def _positions(self, past_len: int, n: int) -> np.ndarray:
        return np.arange(past_len, past_len + n, dtype=np.int64)[None, :]

    @abstractmethod
    def _forward(
        self, new_ids: list[int], past_len: int, all_logits: bool
    ) -> tuple[np.ndarray, float, float]: ...

    @abstractmethod
    def _truncate(self, keep: int) -> None: ...


class NaiveLoop(KVLoop):
    mode = "naive"

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        self._output_names = [o.name for o in session.get_outputs()]
        self._present_index = {name: i for i, name in enumerate(self._output_names)}
        self._past: dict[str, np.ndarray] = {}
        self._truncate(0)

    def _truncate(self, keep: int) -> None:
        info = self.info
        if keep == 0 or not self._past:
            empty = np.zeros((1, info.kv_heads, 0, info.head_dim), dtype=info.kv_dtype)
            self._past = {t.past_name: empty for t in info.kv}
        else:
            self._past = {k: np.ascontiguousarray(v[:, :, :keep]) for k, v in self._past.items()}

    def _forward(
        self, new_ids: list[int], past_len: int, all_logits: bool
    ) -> tuple[np.ndarray, float, float]:
        t0 = perf()
        feeds: dict[str, np.ndarray] = {
            "input_ids": np.asarray([new_ids], dtype=np.int64),
            "attention_mask": np.ones((1, past_len + len(new_ids)), dtype=np.int64),
        }
        if self._needs_positions:
            feeds["position_ids"] = self._positions(past_len, len(new_ids))
        feeds.update(self._past)
        t1 = perf()
        outputs = self.session.run(self._output_names, feeds)
        t2 = perf()
        # The host rebuilds every layer's past from the presents that came back.
        self._past = {
            t.past_name: outputs[self._present_index[t.present_name]] for t in self.info.kv
        }
        logits = outputs[self._present_index["logits"]][0]
        t3 = perf()
        return (logits if all_logits else logits[-1]), (t1 - t0) + (t3 - t2), t2 - t1


class IOBindingLoop(KVLoop):
    mode = "iobinding"

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        self._binding = session.io_binding()
        self._on_cpu = device.ortvalue_device == "cpu"
        self._ids = np.zeros((1, max_context), dtype=np.int64)
        self._pos = np.zeros((1, max_context), dtype=np.int64)
        self._step_logits = np.zeros((1, 1, info.vocab_size), dtype=np.float32)
        self._prefill_logits = np.empty((1, 0, info.vocab_size), dtype=np.float32)
        self._bound_step = False  # are the per-token (length 1) bindings in place?
        self._bound_ids = 0  # length of the input_ids binding in place
        self._kv: dict[str, ort.OrtValue] = {}
        self._out_order: list[str] = []  # IOBinding returns outputs in first-bound order
        if info.layout is KVLayout.SHARED_BUFFER:
            self._allocate_shared()
        else:
            self._bind_empty_concat()

    # -- KV plumbing -------------------------------------------------------------------------
    def _allocate_shared(self) -> None:
        """One buffer per KV tensor, context long, bound as both past and present."""
        info = self.info
        shape = [1, info.kv_heads, self.max_context, info.head_dim]
        for t in info.kv:
            value = ort.OrtValue.ortvalue_from_shape_and_type(
                shape, info.kv_dtype, self.device.ortvalue_device, 0
            )
            self._kv[t.past_name] = value
            self._binding.bind_ortvalue_input(t.past_name, value)
            self._binding.bind_ortvalue_output(t.present_name, value)
            self._note_output(t.present_name)

    def _bind_empty_concat(self) -> None:
        info = self.info
        empty = np.zeros((1, info.kv_heads, 0, info.head_dim), dtype=info.kv_dtype)
        for t in info.kv:
            value = ort.OrtValue.ortvalue_from_numpy(empty, self.device.ortvalue_device, 0)
            self._kv[t.past_name] = value
            self._binding.bind_ortvalue_input(t.past_name, value)
            self._bind_device_output(t.present_name)

    def _note_output(self, name: str) -> None:
        if name not in self._out_order:
            self._out_order.append(name)

    def _bind_device_output(self, name: str) -> None:
        """Let onnxruntime allocate this output on the device (concat presents, device logits)."""
        self._binding.bind_output(name, self.device.ortvalue_device, 0)
        self._note_output(name)

    def _truncate(self, keep: int) -> None:
        if self.info.layout is KVLayout.SHARED_BUFFER:
            return  # positions past `keep` are simply overwritten by the next run
        if keep == 0:
            self._bind_empty_concat()
            return
        # Concat models: shortening a device tensor needs one round trip, once per turn.
        for t in self.info.kv:
            host = self._kv[t.past_name].numpy()[:, :, :keep]
            value = ort.OrtValue.ortvalue_from_numpy(
                np.ascontiguousarray(host), self.device.ortvalue_device, 0
            )
            self._kv[t.past_name] = value
            self._binding.bind_ortvalue_input(t.past_name, value)
            self._bind_device_output(t.present_name)

    def _after_concat_run(self) -> None:
        """Concat models: this run's presents (still on the device) become the next pasts."""
        outputs = dict(zip(self._out_order, self._binding.get_outputs(), strict=True))
        for t in self.info.kv:
            value = outputs[t.present_name]
            self._kv[t.past_name] = value
            self._binding.bind_ortvalue_input(t.past_name, value)
            self._bind_device_output(t.present_name)

    # -- one run -----------------------------------------------------------------------------
    def _bind_cpu(self, name: str, array: np.ndarray, length: int, rows: int = 1) -> None:
        self._binding.bind_input(name, "cpu", 0, array.dtype, [rows, length], array.ctypes.data)

    def _forward(
        self, new_ids: list[int], past_len: int, all_logits: bool
    ) -> tuple[np.ndarray, float, float]:
        t0 = perf()
        n = len(new_ids)
        total = past_len + n
        b = self._binding
        self._ids[0, :n] = new_ids
        if n != self._bound_ids:  # one token per step: the same binding serves every step
            self._bind_cpu("input_ids", self._ids, n)
            self._bound_ids = n
        self._bind_cpu("attention_mask", self._mask, total)
        if self._needs_positions:
            self._pos[0, :n] = np.arange(past_len, total)
            self._bind_cpu("position_ids", self._pos, n)
        logits_buf = self._bind_logits(n)
        t1 = perf()
        self.session.run_with_iobinding(b)
        t2 = perf()
        if logits_buf is None:  # logits stayed on the device: bring back only what is needed
            full = b.get_outputs()[self._out_order.index("logits")].numpy()[0]
            logits = full if all_logits else full[-1]
        else:
            logits = logits_buf[0] if all_logits else logits_buf[0, -1]
        if self.info.layout is KVLayout.CONCAT:
            self._after_concat_run()
        t3 = perf()
        return logits, (t1 - t0) + (t3 - t2), t2 - t1

    def _bind_logits(self, n: int) -> np.ndarray | None:
        """On the CPU the logits land straight in a numpy buffer: no copy, no allocation."""
        vocab = self.info.vocab_size
        if not self._on_cpu:
            self._bind_device_output("logits")
            return None
        if n == 1:
            buf = self._step_logits
            if self._bound_step:
                return buf
            self._bound_step = True
        else:
            # Grow-only: a fresh multi-hundred-MB buffer per prompt would page-fault every time.
            if self._prefill_logits.shape[1] < n:
                self._prefill_logits = np.empty((1, n, vocab), dtype=np.float32)
            buf = self._prefill_logits[:, :n]
            self._bound_step = False
        self._binding.bind_output("logits", "cpu", 0, np.float32, [1, n, vocab], buf.ctypes.data)
        self._note_output("logits")
        return buf


MODES = (NaiveLoop.mode, IOBindingLoop.mode)


def make_loop(
    mode: str, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
) -> KVLoop:
    """The loop for `mode` that fits the model's KV layout."""
    if info.layout is KVLayout.STATIC_WINDOW:
        from chatapp.engine.static_window import IOBindingStaticLoop, NaiveStaticLoop

        static = {"naive": NaiveStaticLoop, "iobinding": IOBindingStaticLoop}
        return static[mode](session, info, device, max_context)
    dynamic = {"naive": NaiveLoop, "iobinding": IOBindingLoop}
    return dynamic[mode](session, info, device, max_context)
