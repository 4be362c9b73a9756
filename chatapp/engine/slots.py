"""Slots: several sequences decoded together, one batch row each (continuous batching).

A `SlotBatch` holds N slots over one session. Every KV tensor is one host buffer
[N, kvH, C, D]; slot i owns row i, a contiguous [1, kvH, C, D] region. Each slot is a
`SlotLoop` (an IO-Binding loop bound to its own row), so a prompt is prefilled on its own
(batch 1), with the cached-prefix reuse, pieces and logits rows of the solo loop. A decode
step (one new token) is not run alone: every slot that is decoding hands its token to the batch,
and the batch's loop runs all of them in one run of the graph (`input_ids` [h, 1], each row
with its own KV length through `attention_mask`, hence GroupQueryAttention's `seqlens_k`).
Sequences join (after their prefill) and leave (`release`) between steps.

Each slot's answer is the one it would get alone: GroupQueryAttention treats each batch row on
its own, and the native GGUF kernels compute [h, 1, K] inputs row by row on the one-token path
(native/gguf_ops.cpp), reading each piece of the weights from memory once for all rows: on a
CPU a step is bound by reading the weights, so h rows cost little more than one.

All slots draw on one KV budget (`budget`, in positions; a context's worth by default), as
vLLM's scheduler does it. A sequence reserves its prompt and a first piece of its answer
(`grow` positions, or its token limit if smaller) before its prefill, waiting first come first
served while the others leave too little, and reserves another piece each time it fills its
reservation. Where the budget is full, the idle slots' kept caches go first (least recently
used first, their pages given back to the system), then the caches of slots waiting for room,
then the most recently arrived running sequence is pre-empted: its KV dropped, its reservation
given back, it waits at the head of the queue and computes its prompt and the tokens it has
generated again when room comes back (recompute pre-emption; slot_loop.py). The oldest
sequence is never pre-empted, so something always progresses, and alone a sequence may grow to
a whole context. On a native graph at the fast precision the recomputed positions hold the bits
the steps wrote, so a pre-empted answer is its solo answer. The buffers are allocated for N
whole contexts, but only written pages take memory (on Linux and macOS; Windows commits what is
allocated), so the memory held stays within the budget.

Everything here runs on one thread, the batch's loop (engine/batch_loop.py; on the engine
service's thread when serving): a slot's generation is a sequence of turns (engine/slot_loop.py)
that hands its next token in (`hand_in`) and yields; the loop runs every handed-in token as one
step (`run_pending`) and resumes each. Reservations and pre-emptions are decided between two
steps, so no lock is needed and nothing waits on another thread. Supported: GroupQueryAttention
(shared-buffer) graphs with float32 KV, on the CPU.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import CPU, Device
from chatapp.engine.errors import EngineError
from chatapp.engine.loops import Step
from chatapp.engine.mapped_weights import release_owned
from chatapp.engine.model_folder.model import KVLayout, ModelInfo
from chatapp.engine.slot_loop import SlotLoop

perf = time.perf_counter
__all__ = ["SlotBatch", "SlotLoop", "slots_refusal"]


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
        grow: int | None = None,
    ) -> None:
        """`budget`: KV positions all slots may hold together (at least `max_context`, so that
        any one sequence fits; default: `max_context`). `grow`: the positions a sequence
        reserves past its prompt, and again each time it fills them (default: an eighth of the
        budget per slot pair, 8 to 256)."""
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
        self.grow = grow if grow is not None else max(8, min(256, self.budget // (2 * slots)))
        shape = (slots, info.kv_heads, max_context, info.head_dim)
        # Not zeroed: GroupQueryAttention reads only each row's first seqlens_k + 1 positions.
        self.kv = {t.past_name: np.empty(shape, np.float32) for t in info.kv}
        self._pending: dict[int, int] = {}  # slot -> the token it handed in for the next step
        self._bindings: dict[int, tuple[ort.IOBinding, np.ndarray]] = {}
        self._taken = [False] * slots
        self._reserved = [0] * slots  # positions a busy slot may fill (it grows them)
        self._ticket = [0] * slots  # arrival order of a slot's sequence (0: none); kept when
        self._tickets = 0  # pre-empted, so that it goes first again and the oldest never waits
        self._waiting: dict[int, int] = {}  # slot -> ticket, waiting for room in the budget
        self.preempted = [False] * slots  # KV dropped for older sequences; computed again
        self._idle_since = [0] * slots  # release order: the least recently used cache goes first
        self._releases = 0
        self.loops = [SlotLoop(self, i) for i in range(slots)]
        self.shared_positions = 0  # prompt positions copied from another slot, not prefilled
        self.share_prompts = True  # off: every prompt prefilled whole (bench's baseline)
        self.steps = 0  # batched runs so far
        self.rows = 0  # sequences they carried, all together
        self.widest = 0  # the most sequences one step carried
        self.preemptions = 0  # sequences whose KV was dropped for older ones to grow
        self.recomputed = 0  # positions computed again after a pre-emption

    @property
    def size(self) -> int:
        return len(self.loops)

    # -- slots joining and leaving -----------------------------------------------------------
    def acquire(self, prompt: Sequence[int] = ()) -> SlotLoop | None:
        """A free slot (the one whose cache shares the longest prefix with `prompt`; else the
        emptiest, so that other caches stay for reuse), or None."""
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
        i = loop.index
        self._taken[i] = False
        self._reserved[i] = 0
        self._ticket[i] = 0
        self.preempted[i] = False
        loop.resume = None
        loop.stepped = None
        self._releases += 1
        self._idle_since[i] = self._releases
        self._pending.pop(i, None)
        self._waiting.pop(i, None)

    # -- the KV budget -----------------------------------------------------------------------
    def reserve(self, loop: SlotLoop, positions: int) -> bool:
        """Before `loop`'s prefill (or its resumption after a pre-emption): reserve
        `positions` (at most a context) where they fit beside what the other slots hold, first
        come first served (a pre-empted sequence keeps its place), dropping idle slots' caches
        first, then waiting slots'. False: not yet; it is queued, and asks again later
        (`unqueue` where it gives up)."""
        positions = min(positions, self.max_context)
        i = loop.index
        if not self._ticket[i]:
            self._tickets += 1
            self._ticket[i] = self._tickets
        self._waiting[i] = self._ticket[i]
        if min(self._waiting.values()) != self._ticket[i]:
            return False
        while True:
            others = sum(self._holds(j) for j in range(self.size) if j != i)
            if others + positions <= self.budget:
                self._reserved[i] = positions
                self.preempted[i] = False
                del self._waiting[i]
                return True
            cache = self._evictable(i)
            if cache is None and loop.cached:
                cache = i  # a waiting slot holds nothing others could wait for
            if cache is None:
                return False
            self._forget(cache)

    def unqueue(self, loop: SlotLoop) -> None:
        """`loop` no longer waits for room (its generation was stopped)."""
        self._waiting.pop(loop.index, None)

    def make_room(self, loop: SlotLoop, count: int) -> bool:
        """Before a run of `count` tokens alone on `loop` (a prompt, drafted tokens): grow its
        reservation where they pass it. False: `loop` itself was pre-empted."""
        return self._grow(loop.index, len(loop.cached) + count)

    def _grow(self, i: int, need: int) -> bool:
        """Make slot i's reservation hold `need` positions,
        a piece (`grow`) more where it fits. Where the budget is full: idle caches go, then
        waiting slots' caches, then the most recently arrived running sequence is pre-empted
        (vLLM's recompute pre-emption), which may be slot i itself: False then. The oldest
        sequence is never pre-empted, and alone it may always grow to a whole context."""
        if need <= self._reserved[i]:
            return True
        grown = min(self.max_context, max(self.loops[i].limit, need), self._reserved[i] + self.grow)
        want = max(need, grown)
        while True:
            others = sum(self._holds(j) for j in range(self.size) if j != i)
            if others + need <= self.budget:
                self._reserved[i] = min(want, self.budget - others)
                return True
            cache = self._evictable(i)
            if cache is not None:
                self._forget(cache)
                continue
            running = [j for j in range(self.size) if self._taken[j] and self._reserved[j] > 0]
            running += [] if i in running else [i]  # not admitted: it waits, as if pre-empted
            youngest = max(running, key=lambda j: self._ticket[j])
            self._preempt(youngest)
            if youngest == i:
                return False

    def _evictable(self, i: int) -> int | None:
        """A cache slot i may drop: an idle slot's, least recently used first, else that of a
        slot waiting for room (it holds no reservation, and copies or computes it again)."""
        idle = [j for j in range(self.size) if not self._taken[j] and self.loops[j].cached]
        if idle:
            return min(idle, key=lambda j: self._idle_since[j])
        waiting = [
            j
            for j in range(self.size)
            if j != i and self._taken[j] and not self._reserved[j] and self.loops[j].cached
        ]
        return waiting[0] if waiting else None

    def _preempt(self, j: int) -> None:
        """Drop slot j's KV and its reservation (between two steps: no run is on it); its
        generation, at its next run, waits for room and computes it again. A token it handed
        in leaves the next step: its generation hands it in again once it has resumed."""
        loop = self.loops[j]
        if loop.resume is None:
            loop.resume = list(loop.cached)
        self.preempted[j] = True
        self._reserved[j] = 0
        self._pending.pop(j, None)
        self._forget(j)
        self.preemptions += 1

    def share_prefix(self, loop: SlotLoop, prompt: Sequence[int]) -> int:
        """Before `loop`'s prefill: where another slot's cache holds a longer prefix of `prompt`
        (a shared system prompt, the earlier turns of a conversation answered on another slot)
        than `loop`'s own, copy those positions' keys and values into `loop`'s row, a copy
        instead of a prefill. Returns the positions gained."""
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
        # Positions below a slot's cache length are never written again while it holds them
        # (its runs write past them).
        for kv in self.kv.values():
            kv[loop.index, :, :best] = kv[source.index, :, :best]
        loop.cached = list(prompt[:best])
        self.shared_positions += best - own
        return best - own

    @property
    def held(self) -> int:
        """KV positions held now: busy slots' reservations and idle slots' caches (display)."""
        return sum(self._holds(i) for i in range(self.size))

    @property
    def reserved(self) -> int:
        """KV positions the running sequences have reserved (display)."""
        return sum(r for r, taken in zip(self._reserved, self._taken, strict=True) if taken)

    @property
    def cached_positions(self) -> int:
        """KV positions written and kept, every slot (display)."""
        return sum(len(loop.cached) for loop in self.loops)

    def reservation(self, index: int) -> int:
        """Slot `index`'s reservation (0: free, or waiting for room; display)."""
        return self._reserved[index] if self._taken[index] else 0

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
        """Slots in use, for display (read from other threads without waiting)."""
        return sum(self._taken)

    # -- the batched step --------------------------------------------------------------------
    def hand_in(self, loop: SlotLoop, token: int) -> None:
        """`loop`'s next token, for the next batched step (`run_pending`)."""
        self._pending[loop.index] = token

    @property
    def stepping(self) -> int:
        """Slots whose token waits for the next step."""
        return len(self._pending)

    def run_pending(self) -> bool:
        """One batched step of every handed-in token; each slot finds its logits (or the
        step's failure) in `stepped`. Oldest first, a reservation that is full grows first,
        pre-empting younger sequences (which then leave this step). False: nothing to run."""
        for i in sorted(self._pending, key=lambda j: self._ticket[j]):
            if i in self._pending:  # not pre-empted by an older one's growth (`_preempt`)
                self._grow(i, len(self.loops[i].cached) + 1)
        pending, self._pending = self._pending, {}
        if not pending:
            return False
        lease = self.loops[next(iter(pending))].weights_in_use
        try:
            with lease() if lease is not None else nullcontext():
                steps = self._run(pending)
        except Exception as exc:  # every slot of this step sees the failure
            for i in pending:
                self.loops[i].stepped = exc
            return True
        for i, step in steps.items():
            self.loops[i].cached.append(pending[i])
            self.loops[i].stepped = step
        return True

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
        self.widest = max(self.widest, len(pending))
        return {i: Step(logits[i, 0], t1 - t0, t2 - t1) for i in pending}

    def _binding(self, h: int) -> tuple[ort.IOBinding, np.ndarray]:
        """The binding of a step of rows 0..h-1: its KV (rows of the buffers, which never
        move) and its logits buffer bound once. The logits a step returns are views of that
        buffer: safe, since the loop resumes every slot of a step (each samples from its row)
        before it runs the next one."""
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
