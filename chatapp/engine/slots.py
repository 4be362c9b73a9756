"""Slots: several sequences decoded together, one batch row each (continuous batching).

A `SlotBatch` holds N slots over one session. Every KV tensor is one host buffer
[N, kvH, C, D]; slot i owns row i, a contiguous [1, kvH, C, D] region. Each slot is a
`SlotLoop` (an IO-Binding loop bound to its own row), so a prompt is prefilled on its own
(batch 1), with the cached-prefix reuse, pieces and logits rows of the solo loop. A decode
step (one new token) is not run alone: every slot that is decoding hands its token to the batch,
and the last one to arrive runs all of them in one run of the graph (`input_ids` [h, 1],
each row with its own KV length through `attention_mask`, hence GroupQueryAttention's
`seqlens_k`). Sequences join (after their prefill) and leave (`release`) between steps.

Each slot's answer is the one it would get alone: GroupQueryAttention treats each batch row on
its own, and the native GGUF kernels compute [h, 1, K] inputs row by row on the one-token path
(native/gguf_ops.cpp), reading each piece of the weights from memory once for all rows: on a
CPU a step is bound by reading the weights, so h rows cost little more than one.

All slots draw on one KV budget (`budget`, in positions; a context's worth by default). A
sequence reserves its prompt and its token limit (at most a context) before its prefill, and
waits while the others' reservations and the idle slots' kept caches leave too little: the idle
caches go first, least recently used first, their pages given back to the system. The buffers
are allocated for N whole contexts, but only written pages take memory (on Linux and macOS;
Windows commits what is allocated), so the memory held stays within the budget.

The runs are serialized (one session, one run at a time); a slot's generation is driven by its
own thread (the server's request threads): a step waits until every decoding slot has handed
its token in, so a consumer that stops pulling tokens without releasing its slot stalls the
others. Supported: GroupQueryAttention (shared-buffer) graphs with float32 KV, on the CPU.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import CPU, Device
from chatapp.engine.errors import EngineError
from chatapp.engine.kv_strategy import SharedBufferKv
from chatapp.engine.loops import IOBindingLoop, Step
from chatapp.engine.model_folder.model import KVLayout, ModelInfo
from chatapp.engine.resident import release_owned

perf = time.perf_counter


def slots_refusal(info: ModelInfo, device: Device) -> str | None:
    """Why this model on this device cannot decode several sequences together, or None."""
    if device is not CPU:
        return f"Several sequences at once run on the CPU only, not on {device.label}."
    if info.layout is not KVLayout.SHARED_BUFFER or info.io.use_cache_branch:
        return (
            "Several sequences at once need a GroupQueryAttention graph (chatapp's default "
            "conversion); this model's KV cache has another layout."
        )
    if np.dtype(info.kv_dtype) != np.float32:
        return "Several sequences at once need a float32 KV cache; this model's is not."
    return None


class SlotLoop(IOBindingLoop):
    """One slot: the IO-Binding loop over its row of the batch's KV buffers."""

    def __init__(self, batch: SlotBatch, index: int) -> None:
        self.batch = batch
        self.index = index
        rows = {  # contiguous
            name: ort.OrtValue.ortvalue_from_numpy(kv[index : index + 1])
            for name, kv in batch.kv.items()
        }
        kv = SharedBufferKv(batch.info, batch.device, batch.max_context, buffers=rows)
        super().__init__(batch.session, batch.info, batch.device, kv)

    def admit(
        self, prompt: Sequence[int], new_tokens: int, should_stop: Callable[[], bool]
    ) -> bool:
        # A prefix another slot is prefilling now (the other choices of an `n` request, or
        # clients on one system prompt arriving together) is waited for and copied.
        self.batch.await_prefill(self, prompt, should_stop)
        # The prefix first: the budget may then drop the idle cache it came from.
        self.batch.share_prefix(self, prompt)
        return self.batch.reserve(self, len(prompt) + new_tokens, should_stop)

    def prepare(self, prompt: Sequence[int]) -> int:
        # Under the batch's lock, so that no other slot copies from this one mid-change.
        with self.batch._cond:
            return super().prepare(prompt)

    def _run(self, ids: list[int], wanted: list[int] | None) -> Step:
        if len(ids) == 1 and wanted is None:  # a decode step: taken with the other slots'
            step = self.batch.step(self.index, ids[0])
            self.cached.append(ids[0])
            return step
        with self.batch.run_lock:  # a prompt: alone, between two steps
            step = super()._run(ids, wanted)
        self.batch.filled(self)
        return step


class SlotBatch:
    """N slots over one session (see the module's docstring)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        info: ModelInfo,
        device: Device,
        max_context: int,
        slots: int,
        budget: int | None = None,
    ) -> None:
        """`budget`: KV positions all slots may hold together (at least `max_context`, so that
        any one sequence fits; default: `max_context`)."""
        refusal = slots_refusal(info, device)
        if refusal is not None:
            raise EngineError(refusal)
        if slots < 1:
            raise ValueError("at least one slot")
        self.budget = max_context if budget is None else budget
        if self.budget < max_context:
            raise ValueError("the KV budget must hold one whole context")
        self.session, self.info, self.device = session, info, device
        self.max_context = max_context
        shape = (slots, info.kv_heads, max_context, info.head_dim)
        # Not zeroed: GroupQueryAttention reads only each row's first seqlens_k + 1 positions.
        self.kv = {t.past_name: np.empty(shape, np.float32) for t in info.kv}
        self.run_lock = threading.Lock()  # one run of the session at a time
        self._cond = threading.Condition()
        self._decoding: set[int] = set()  # slots whose next token comes through step()
        self._pending: dict[int, int] = {}  # slot -> the token it handed in for this step
        self._results: dict[int, Step | BaseException] = {}
        self._round = 0
        self._bindings: dict[int, tuple[ort.IOBinding, np.ndarray]] = {}
        self._taken = [False] * slots
        self._filling: dict[int, Sequence[int]] = {}  # slot -> the prompt it is prefilling
        self._reserved = [0] * slots  # positions a busy slot may fill (its prompt + limit)
        self._idle_since = [0] * slots  # release order: the least recently used cache goes first
        self._releases = 0
        self.loops = [SlotLoop(self, i) for i in range(slots)]
        self.shared_positions = 0  # prompt positions copied from another slot, not prefilled
        self.share_prompts = True  # off: every prompt prefilled whole (bench's baseline)
        self.steps = 0  # batched runs so far
        self.rows = 0  # sequences they carried, all together

    @property
    def size(self) -> int:
        return len(self.loops)

    # -- slots joining and leaving -----------------------------------------------------------
    def acquire(self, prompt: Sequence[int] = ()) -> SlotLoop | None:
        """A free slot (the one whose cache shares the longest prefix with `prompt`; else the
        emptiest, so that other caches stay for reuse), or None."""
        with self._cond:
            free = [i for i, taken in enumerate(self._taken) if not taken]
            if not free:
                return None
            loops = self.loops
            best = max(
                free, key=lambda i: (_shared(loops[i].cached, prompt), -len(loops[i].cached), -i)
            )
            self._taken[best] = True
            return self.loops[best]

    def release(self, loop: SlotLoop) -> None:
        """The slot's sequence has ended: it leaves the batch (its cache stays for reuse while
        the budget has room for it)."""
        with self._cond:
            self._taken[loop.index] = False
            self._reserved[loop.index] = 0
            self._releases += 1
            self._idle_since[loop.index] = self._releases
            self._decoding.discard(loop.index)
            self._filling.pop(loop.index, None)
            self._run_if_complete()
            self._cond.notify_all()  # a sequence waiting for the budget may fit now

    # -- the KV budget -----------------------------------------------------------------------
    def reserve(self, loop: SlotLoop, positions: int, should_stop: Callable[[], bool]) -> bool:
        """Before `loop`'s prefill: wait until `positions` (at most a context) fit in the budget
        beside what the other slots hold, dropping idle slots' caches first. False when
        `should_stop` said so while waiting."""
        positions = min(positions, self.max_context)
        with self._cond:
            while True:
                others = sum(self._holds(i) for i in range(self.size) if i != loop.index)
                if others + positions <= self.budget:
                    self._reserved[loop.index] = positions
                    return True
                idle = [
                    i
                    for i in range(self.size)
                    if not self._taken[i] and self.loops[i].cached and i != loop.index
                ]
                if idle:
                    self._forget(min(idle, key=lambda i: self._idle_since[i]))
                    continue
                if loop.cached:  # a waiting slot holds nothing: two could wait on each other
                    self._forget(loop.index)
                    continue
                if should_stop():
                    return False
                self._cond.wait(0.05)

    def await_prefill(
        self, loop: SlotLoop, prompt: Sequence[int], should_stop: Callable[[], bool]
    ) -> None:
        """Before `loop`'s prefill: while another slot is prefilling a longer prefix of
        `prompt` than any cache holds, wait for it (the prefills run one at a time anyway), so
        that `share_prefix` copies it instead of computing it again; else claim the prompt, so
        that slots arriving later wait for this one. A waiting slot gives up its own cache
        first: it holds nothing that the others' reservations could wait for."""
        limit = len(prompt) - 1
        with self._cond:
            while self.share_prompts and not should_stop():
                held = max(min(_shared(other.cached, prompt), limit) for other in self.loops)
                coming = max(
                    (min(_shared(p, prompt), limit) for i, p in self._filling.items()),
                    default=0,
                )
                if coming <= held:
                    self._filling[loop.index] = list(prompt)
                    return
                if loop.cached:
                    self._forget(loop.index)
                self._cond.wait(0.05)

    def filled(self, loop: SlotLoop) -> None:
        """After a prompt run on `loop`: once its cache holds the prompt it claimed, the slots
        waiting for that prefix may copy it."""
        with self._cond:
            claimed = self._filling.get(loop.index)
            if claimed is not None and len(loop.cached) >= len(claimed) - 1:
                del self._filling[loop.index]
                self._cond.notify_all()

    def share_prefix(self, loop: SlotLoop, prompt: Sequence[int]) -> int:
        """Before `loop`'s prefill: where another slot's cache holds a longer prefix of `prompt`
        (a shared system prompt, the earlier turns of a conversation answered on another slot)
        than `loop`'s own, copy those positions' keys and values into `loop`'s row, a copy
        instead of a prefill. Returns the positions gained."""
        with self._cond:
            if not self.share_prompts:
                return 0
            limit = len(prompt) - 1  # one token always runs (KvStrategy.reusable)
            own = min(_shared(loop.cached, prompt), limit)
            best, source = own, None
            for other in self.loops:
                shared = min(_shared(other.cached, prompt), limit)
                if other is not loop and shared > best:
                    best, source = shared, other
            if source is None:
                return 0
            # Positions below a slot's cache length are never written again while it holds
            # them (its runs write past them), and steps wait for this lock.
            for kv in self.kv.values():
                kv[loop.index, :, :best] = kv[source.index, :, :best]
            loop.cached = list(prompt[:best])
            self.shared_positions += best - own
            return best - own

    @property
    def held(self) -> int:
        """KV positions held now: busy slots' reservations and idle slots' caches (display)."""
        return sum(self._holds(i) for i in range(self.size))

    def _holds(self, i: int) -> int:
        cached = len(self.loops[i].cached)
        return max(self._reserved[i], cached) if self._taken[i] else cached

    def _forget(self, i: int) -> None:
        """Drop slot i's cache and give its pages back (idle, or waiting for the budget
        before its prefill: in no step either way)."""
        self.loops[i].reset()
        for kv in self.kv.values():
            release_owned(kv[i])

    @property
    def busy(self) -> int:
        """Slots in use, for display. Read without `_cond`: a step holds it while the model
        runs, and the window asks this on its GUI thread, which must never wait."""
        return sum(self._taken)

    # -- the batched step --------------------------------------------------------------------
    def expect_step(self, loop: SlotLoop) -> None:
        """From now on each step waits for `loop`'s token too (sequences started together then
        share their first step as well; a slot otherwise joins at its first step)."""
        with self._cond:
            self._decoding.add(loop.index)

    def step(self, index: int, token: int) -> Step:
        """Hand in slot `index`'s next token; returns its logits once the batch has run."""
        with self._cond:
            self._decoding.add(index)
            self._pending[index] = token
            waiting_for = self._round
            self._run_if_complete()
            while self._round == waiting_for:
                self._cond.wait()
            result = self._results.pop(index)
        if isinstance(result, BaseException):
            raise result
        return result

    def _run_if_complete(self) -> None:
        """Run the step once every decoding slot has handed its token in (holding _cond)."""
        if not self._pending or not self._decoding <= self._pending.keys():
            return
        pending, self._pending = self._pending, {}
        try:
            with self.run_lock:
                steps = self._run(pending)
            self._results.update(steps)
        except Exception as exc:  # every slot of this step sees the failure
            self._results.update(dict.fromkeys(pending, exc))
        self._round += 1
        self._cond.notify_all()

    def _run(self, pending: dict[int, int]) -> dict[int, Step]:
        t0 = perf()
        h = max(pending) + 1  # rows 0..h-1 run: the KV buffers are bound from row 0
        pasts = []
        ids = np.zeros((h, 1), np.int64)
        for i in range(h):
            loop = self.loops[i]
            if i in pending:
                ids[i, 0] = pending[i]
            elif len(loop.cached) >= self.max_context:
                # A filler row writes one position after the slot's cache; a full cache has
                # none free, so its last token is given up (a later prompt prefills it again).
                loop.cached.pop()
            pasts.append(len(loop.cached))
        total = max(pasts) + 1
        mask = (np.arange(total)[None, :] <= np.asarray(pasts)[:, None]).astype(np.int64)
        binding, logits = self._binding(h)
        io = self.info.io
        feeds = {io.input_ids: ids, io.attention_mask: mask}
        if io.position_ids:
            feeds[io.position_ids] = np.asarray(pasts, np.int64)[:, None]
        if io.logits_positions:  # an overridable initializer: bound by pointer, not by name
            feeds[io.logits_positions] = np.zeros(1, np.int64)
        for name, array in feeds.items():
            binding.bind_input(name, "cpu", 0, np.int64, list(array.shape), array.ctypes.data)
        t1 = perf()
        self.session.run_with_iobinding(binding)
        t2 = perf()
        self.steps += 1
        self.rows += len(pending)
        return {i: Step(logits[i, 0], t1 - t0, t2 - t1) for i in pending}

    def _binding(self, h: int) -> tuple[ort.IOBinding, np.ndarray]:
        """The binding of a step of rows 0..h-1: its KV (rows of the buffers, which never
        move) and its logits buffer bound once. The logits a step returns are views of that
        buffer: safe, since the next step of h rows runs only once every slot has handed in
        its next token, so is done with them."""
        if h not in self._bindings:
            binding = self.session.io_binding()
            for t in self.info.kv:
                value = ort.OrtValue.ortvalue_from_numpy(self.kv[t.past_name][:h])
                binding.bind_ortvalue_input(t.past_name, value)
                binding.bind_ortvalue_output(t.present_name, value)
            logits = np.empty((h, 1, self.info.vocab_size), np.float32)
            shape = list(logits.shape)
            binding.bind_output(
                self.info.io.logits, "cpu", 0, np.float32, shape, logits.ctypes.data
            )
            self._bindings[h] = (binding, logits)
        return self._bindings[h]


def _shared(cached: Sequence[int], prompt: Sequence[int]) -> int:
    n = 0
    for a, b in zip(cached, prompt, strict=False):
        if a != b:
            break
        n += 1
    return n
