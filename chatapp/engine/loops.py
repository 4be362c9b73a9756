"""The two generation loops: same model, same tokens under greedy decoding, different plumbing.

NaiveLoop     `session.run` with numpy feeds; after every step the host builds the next
              past_key_values from the present outputs. On a device with its own memory every
              layer's KV crosses device -> host -> device per token.
IOBindingLoop KV buffers allocated once on the device and bound once; per step only the token,
              the mask (and positions) go in and the logits the sampler needs come out.

Logits: a forward returns the last position's row unless asked for more. Graphs with the
`logits_positions` input (chatapp's converter) compute only the rows asked for, so a prompt
costs one row of lm_head (and its memory) instead of one per token; other graphs compute every
row and the loop keeps those asked for.

A loop keeps the KV cache of the tokens it has seen (`cached`), so a follow-up turn that starts
with the same tokens only prefills what is new. Each forward reports its bytes crossing between
host and device (zero on the CPU, where there is no such boundary).
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import CPU, Device
from chatapp.engine.errors import DeviceFailure, EngineError, ModelError
from chatapp.engine.model_folder.model import KVLayout, ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.tensor_types import (
    download,
    host_value,
    is_bfloat16,
    needs_ortvalues,
    ort_element_type,
    run_with_host_arrays,
    upload,
)
from chatapp.error_text import STATUS_LINE, first_line

perf = time.perf_counter
_SHRINK_AFTER_RUN = ort.RunOptions()
_SHRINK_AFTER_RUN.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")


@dataclass(frozen=True)
class Step:
    """One forward: its logits, where its time went and what crossed the device boundary."""

    logits: np.ndarray  # [len(rows), vocab] when rows were asked for, else [vocab]; may be
    # a reused buffer
    host_s: float  # input / KV preparation on the host
    run_s: float  # inside onnxruntime, until the device has finished
    h2d_bytes: int = 0  # host -> device
    d2h_bytes: int = 0  # device -> host


def run_failure(exc: BaseException) -> str:
    """What onnxruntime said went wrong in a run, without its framing ("Non-zero status code
    returned while running ... Status Message: ")."""
    text = first_line(exc, STATUS_LINE * 2)
    return text.rpartition("Status Message: ")[2][:STATUS_LINE] or text[:STATUS_LINE]


def _from_runtime(exc: BaseException) -> bool:
    """Whether onnxruntime (or a kernel in it) raised `exc`, rather than our own code."""
    return isinstance(exc, RuntimeError) or type(exc).__module__.startswith("onnxruntime")


class KVLoop(ABC):
    mode: Mode
    # Prompts longer than this run in pieces: peak memory at a 2k-token prompt stays that of
    # loading the model (SmolLM2: 522 MB, against 818 MB in one piece) at no cost in speed.
    prefill_chunk = 512
    release_weights: Callable[[], object] | None = None  # set by the Engine (packed_cache.py)
    # Raises where a mapped weight file changed on disk (engine/mapped_files.py); set by the
    # Engine, asked before every run.
    check_weights: Callable[[], None] | None = None
    warmed_up = False  # its device's programs are compiled (engine/warm_up.py)

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        self.session = session
        self.info = info
        self.device = device
        self.max_context = max_context
        self.cached: list[int] = []
        if device.max_run_rows is not None:
            self.prefill_chunk = min(self.prefill_chunk, device.max_run_rows)
        self._mask = np.ones((1, max_context), dtype=np.int64)
        self._needs_positions = info.has_position_ids
        self.io = info.io
        # Bytes moved outside a forward (resetting or cutting the cache), charged to the next.
        self._pending_h2d = 0
        self._pending_d2h = 0

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
        self, new_ids: Sequence[int], all_logits: bool = False, rows: Sequence[int] | None = None
    ) -> Step:
        """Run `new_ids` after the cached tokens.

        Logits: of the last position ([vocab]); with `rows` (increasing positions of
        `new_ids`), of those ([len(rows), vocab]); with `all_logits`, of every position.
        The logits may live in a buffer the next call overwrites: copy them to keep them.
        A failure on a device other than the CPU is raised as DeviceFailure.
        """
        self._check_room(len(new_ids))
        if self.check_weights is not None:
            self.check_weights()
        ids = [int(t) for t in new_ids]
        wanted = _wanted_rows(len(ids), all_logits, rows)
        if len(ids) == 1 or self.release_weights is None:
            return self._forward_ids(ids, wanted)
        # A prompt reads the prompt kernel's packed weights, a step the step kernel's: where
        # they are mapped pages (engine/packed_cache.py), only one set stays resident.
        self.release_weights()
        try:
            return self._forward_ids(ids, wanted)
        finally:
            self.release_weights()

    def _forward_ids(self, ids: list[int], wanted: list[int] | None) -> Step:
        chunk = self.prefill_chunk
        if len(ids) <= chunk:
            return self._charge_pending(self._run(ids, wanted))
        # A long prompt in pieces: activations (attention scores grow with piece x context)
        # and, for graphs that return every row, logits stay bounded by the piece.
        steps: list[Step] = []
        picked: list[np.ndarray] = []
        for start in range(0, len(ids), chunk):
            part = ids[start : start + chunk]
            mine = [r - start for r in wanted or () if start <= r < start + len(part)]
            step = self._run(part, mine or None)
            if mine:
                picked.append(step.logits.copy())  # the next piece may reuse the buffer
            steps.append(step)
        logits = steps[-1].logits if wanted is None else np.concatenate(picked)
        total = Step(
            logits,
            sum(s.host_s for s in steps),
            sum(s.run_s for s in steps),
            sum(s.h2d_bytes for s in steps),
            sum(s.d2h_bytes for s in steps),
        )
        return self._charge_pending(total)

    def _run(self, ids: list[int], wanted: list[int] | None) -> Step:
        try:
            step = self._forward(ids, len(self.cached), wanted)
        except Exception as exc:
            if isinstance(exc, ValueError | EngineError):
                raise
            if self.device is CPU:
                if not _from_runtime(exc):
                    raise
                # A graph onnxruntime loaded but cannot run (a kernel refused it): one line.
                raise ModelError(
                    f"{self.info.name} could not be run ({run_failure(exc)}); if its folder was "
                    "edited or damaged, convert its GGUF again."
                ) from exc
            raise DeviceFailure(self.device.label, exc) from exc
        self.cached.extend(ids)
        return step

    def _check_room(self, n: int) -> None:
        if len(self.cached) + n > self.max_context:
            raise ValueError("the KV cache is full")

    def _charge_pending(self, step: Step) -> Step:
        if not (self._pending_h2d or self._pending_d2h):
            return step
        step = Step(
            step.logits,
            step.host_s,
            step.run_s,
            step.h2d_bytes + self._pending_h2d,
            step.d2h_bytes + self._pending_d2h,
        )
        self._pending_h2d = self._pending_d2h = 0
        return step

    def _run_options(self, n: int) -> ort.RunOptions | None:
        """A prompt's run hands the memory arena's growth back when it ends: without this
        the arena keeps its prefill peak (and fragments further) for the rest of the chat."""
        return _SHRINK_AFTER_RUN if n > 1 else None

    def _positions(self, past_len: int, n: int) -> np.ndarray:
        return np.arange(past_len, past_len + n, dtype=np.int64)[None, :]

    def _logits_positions(self, wanted: list[int] | None, n: int) -> list[int] | None:
        """What to feed the graph's logits_positions input; None when it has none."""
        if not self.io.logits_positions:
            return None
        return [n - 1] if wanted is None else wanted

    def _pick(self, logits: np.ndarray, wanted: list[int] | None) -> np.ndarray:
        """The graph's logits rows [rows, vocab] -> what forward promises."""
        if wanted is None:
            last: np.ndarray = logits[-1]
            return last
        if self.io.logits_positions or len(wanted) == len(logits) == wanted[-1] + 1:
            return logits  # the graph returned exactly those rows (or every row, in order)
        return logits[wanted]

    @abstractmethod
    def _forward(self, new_ids: list[int], past_len: int, wanted: list[int] | None) -> Step:
        """Logits of the rows `wanted` ([len(wanted), vocab]), or of the last one ([vocab])."""

    @abstractmethod
    def _truncate(self, keep: int) -> None: ...


def _wanted_rows(n: int, all_logits: bool, rows: Sequence[int] | None) -> list[int] | None:
    if all_logits:
        return list(range(n))
    if rows is None:
        return None
    wanted = [int(r) for r in rows]
    increasing = all(a < b for a, b in itertools.pairwise(wanted))
    if not wanted or not increasing or not 0 <= wanted[0] <= wanted[-1] < n:
        raise ValueError(f"logits rows {wanted} are not increasing positions of {n} new tokens")
    return wanted


def crossing(device: Device, arrays: Sequence[np.ndarray]) -> int:
    """Bytes of host arrays that cross to (or from) `device`: none where it shares host memory."""
    return sum(a.nbytes for a in arrays) if device.own_memory else 0


class NaiveLoop(KVLoop):
    mode = Mode.NAIVE

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        self._output_names = [o.name for o in session.get_outputs()]
        self._present_index = {name: i for i, name in enumerate(self._output_names)}
        self._past: dict[str, np.ndarray] = {}
        # session.run takes and returns no bfloat16: such models run with OrtValues.
        self._ortvalue_io = needs_ortvalues(info.kv_dtype, info.logits_dtype)
        self._truncate(0)

    def _truncate(self, keep: int) -> None:
        info = self.info
        if keep == 0 or not self._past:
            empty: np.ndarray = np.zeros((1, info.kv_heads, 0, info.head_dim), dtype=info.kv_dtype)
            self._past = {t.past_name: empty for t in info.kv}
        else:
            self._past = {k: np.ascontiguousarray(v[:, :, :keep]) for k, v in self._past.items()}

    def _forward(self, new_ids: list[int], past_len: int, wanted: list[int] | None) -> Step:
        t0 = perf()
        io = self.io
        feeds: dict[str, np.ndarray] = {
            io.input_ids: np.asarray([new_ids], dtype=np.int64),
            io.attention_mask: np.ones((1, past_len + len(new_ids)), dtype=np.int64),
        }
        keep = self._logits_positions(wanted, len(new_ids))
        if io.logits_positions and keep is not None:
            feeds[io.logits_positions] = np.asarray(keep, dtype=np.int64)
        if io.position_ids:
            feeds[io.position_ids] = self._positions(past_len, len(new_ids))
        if io.use_cache_branch:  # legacy merged decoders: the first run has no past
            feeds[io.use_cache_branch] = np.array([past_len > 0])
        feeds.update(self._past)
        t1 = perf()
        # onnxruntime copies every feed to the device and every output back to the host.
        if self._ortvalue_io:
            outputs = run_with_host_arrays(self.session, self._output_names, feeds)
        else:
            outputs = self.session.run(self._output_names, feeds, self._run_options(len(new_ids)))
        t2 = perf()
        # The host rebuilds every layer's past from the presents that came back.
        self._past = {
            t.past_name: outputs[self._present_index[t.present_name]] for t in self.info.kv
        }
        logits = self._pick(outputs[self._present_index[io.logits]][0], wanted)
        t3 = perf()
        return Step(
            logits,
            (t1 - t0) + (t3 - t2),
            t2 - t1,
            crossing(self.device, list(feeds.values())),
            crossing(self.device, outputs),
        )


class IOBindingLoop(KVLoop):
    mode = Mode.IOBINDING

    def __init__(
        self, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
    ) -> None:
        super().__init__(session, info, device, max_context)
        self._binding = session.io_binding()
        self._ids = np.zeros((1, max_context), dtype=np.int64)
        self._pos = np.zeros((1, max_context), dtype=np.int64)
        self._keep = np.zeros(max_context, dtype=np.int64)  # logits_positions
        self._step_logits = np.zeros((1, 1, info.vocab_size), dtype=info.logits_dtype)
        self._prefill_logits = np.empty((1, 0, info.vocab_size), dtype=info.logits_dtype)
        self._branch = np.zeros(1, dtype=np.bool_)  # use_cache_branch of merged decoders
        self._bound_step = False  # are the per-token (length 1) logits bound?
        self._bound_len: dict[str, int] = {}  # per-step inputs: the length bound now
        self._kv: dict[str, ort.OrtValue] = {}
        self._out_order: list[str] = []  # IOBinding returns outputs in first-bound order
        if info.layout is KVLayout.SHARED_BUFFER:
            self._allocate_shared()
        else:
            self._bind_empty_concat()

    # -- KV plumbing -------------------------------------------------------------------------
    def _allocate_shared(self) -> None:
        """One buffer per KV tensor, context long, on the device, bound as past and present.

        Not zeroed: GroupQueryAttention reads only the first `total_sequence_length` rows.
        """
        info = self.info
        shape = [1, info.kv_heads, self.max_context, info.head_dim]
        for t in info.kv:
            value = self.device.allocate(shape, ort_element_type(info.kv_dtype))
            self._kv[t.past_name] = value
            self._binding.bind_ortvalue_input(t.past_name, value)
            self._binding.bind_ortvalue_output(t.present_name, value)
            self._note_output(t.present_name)

    def _bind_empty_concat(self) -> None:
        info = self.info
        empty: np.ndarray = np.zeros((1, info.kv_heads, 0, info.head_dim), dtype=info.kv_dtype)
        for t in info.kv:
            value = upload(self.device, empty)
            self._kv[t.past_name] = value
            self._binding.bind_ortvalue_input(t.past_name, value)
            self._bind_device_output(t.present_name)

    def _note_output(self, name: str) -> None:
        if name not in self._out_order:
            self._out_order.append(name)

    def _bind_device_output(self, name: str) -> None:
        """Let onnxruntime allocate this output on the device (concat presents)."""
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
            old = self._kv[t.past_name]
            host = np.ascontiguousarray(download(self.device, old)[:, :, :keep])
            if self.device.own_memory:
                self._pending_d2h += old.tensor_size_in_bytes()
                self._pending_h2d += host.nbytes
            value = upload(self.device, host)
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
    def _bind_row(self, name: str, row: np.ndarray, n: int) -> int:
        """Bind the first n values of a per-step host row; returns the bytes that cross.

        On the CPU the binding is the numpy buffer itself: rewriting it is enough while n stays.
        A device copies a host input when it is bound, not when the session runs, so there every
        step binds again. (A device-resident value updated in place is not enough either: where
        the graph consumes an input on the CPU, as shape arithmetic often is, onnxruntime copies
        the bound value at bind time and later updates are never seen.)
        """
        if self.device.own_memory or self._bound_len.get(name) != n:
            shape = [1, n] if row.ndim == 2 else [n]
            self._binding.bind_input(name, "cpu", 0, row.dtype, shape, row.ctypes.data)
            self._bound_len[name] = n
        return crossing(self.device, [row[..., :n]])

    def _forward(self, new_ids: list[int], past_len: int, wanted: list[int] | None) -> Step:
        t0 = perf()
        n = len(new_ids)
        total = past_len + n
        io = self.io
        self._ids[0, :n] = new_ids
        h2d = self._bind_row(io.input_ids, self._ids, n)
        h2d += self._bind_row(io.attention_mask, self._mask, total)
        if io.position_ids:
            self._pos[0, :n] = np.arange(past_len, total)
            h2d += self._bind_row(io.position_ids, self._pos, n)
        if io.use_cache_branch:  # legacy merged decoders: the first run has no past
            self._branch[0] = past_len > 0
            h2d += self._bind_row(io.use_cache_branch, self._branch, 1)
        rows = n
        keep = self._logits_positions(wanted, n)
        if io.logits_positions and keep is not None:
            rows = len(keep)
            self._keep[:rows] = keep
            h2d += self._bind_row(io.logits_positions, self._keep, rows)
        logits_buf = self._bind_logits(rows)
        t1 = perf()
        # The logits are bound in host memory, so the run returns only once the device has
        # finished and copied them back: the run clock covers the device's work.
        self.session.run_with_iobinding(self._binding, self._run_options(n))
        t2 = perf()
        if self.info.layout is KVLayout.CONCAT:
            self._after_concat_run()
        t3 = perf()
        logits = self._pick(logits_buf[0], wanted)
        d2h = crossing(self.device, [logits_buf])
        return Step(logits, (t1 - t0) + (t3 - t2), t2 - t1, h2d, d2h)

    def _bind_logits(self, n: int) -> np.ndarray:
        """The logits land straight in a numpy buffer (on a device: one copy of n rows)."""
        vocab = self.info.vocab_size
        if n == 1:
            buf = self._step_logits
            if self._bound_step:
                return buf
            self._bound_step = True
        else:
            # Grow-only: a fresh multi-hundred-MB buffer per prompt would page-fault every time.
            if self._prefill_logits.shape[1] < n:
                self._prefill_logits = np.empty((1, n, vocab), dtype=self.info.logits_dtype)
            buf = self._prefill_logits[:, :n]
            self._bound_step = False
        name = self.io.logits
        if is_bfloat16(buf.dtype):  # no numpy type to bind by: an OrtValue over the buffer
            self._binding.bind_ortvalue_output(name, host_value(buf))
        else:
            self._binding.bind_output(name, "cpu", 0, buf.dtype, [1, n, vocab], buf.ctypes.data)
        self._note_output(name)
        return buf
