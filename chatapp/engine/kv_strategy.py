"""KV handling as a strategy that a generation loop is given.

The two loops (engine/loops.py) differ in plumbing: the naive loop feeds numpy arrays to
`session.run`, the IO-Binding loop binds buffers once and runs the binding. How the keys and
values of the tokens seen are kept is the other axis, and it is a strategy:

StandardKv      per layer a past [1, kvH, P, D] goes in and a present [1, kvH, P + n, D] comes
                out (concat); the present becomes the next past.
SharedBufferKv  GroupQueryAttention graphs: bound, one context-long buffer per KV tensor is both
                past and present, written in place (fed to the naive loop it works as standard).
StaticWindowKv  fixed-shape graphs: C slots filled from the right, W tokens a run
                (engine/static_window.py).
NoCacheKv       nothing is kept: every step runs the whole sequence again (engine/nocache.py).

A strategy says what fits (`fits`, `tokens_that_fit`, `check_room`, `reusable`), how a step's
tokens become runs of the graph (`forward`, which calls the loop's `RunGraph` once per run), and
where the KV lives: host arrays for the naive loop (`host_feeds`, `keep_host`), device values
bound once for the IO-Binding loop (`bind`, `keep_bound`). Bytes it moves outside a run
(cutting or zeroing a device KV) wait in `pending_h2d` / `pending_d2h`, charged to the next step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.model_folder.model import KVTensor, ModelInfo
from chatapp.engine.tensor_types import download, ort_element_type, upload


@dataclass(frozen=True)
class Step:
    """One forward: its logits, where its time went and what crossed the device boundary."""

    logits: np.ndarray  # [len(rows), vocab] when rows were asked for, else [vocab]; may be
    # a reused buffer
    host_s: float  # input / KV preparation on the host
    run_s: float  # inside onnxruntime, until the device has finished
    h2d_bytes: int = 0  # host -> device
    d2h_bytes: int = 0  # device -> host


def combined(steps: Sequence[Step], logits: np.ndarray, extra_host_s: float = 0.0) -> Step:
    """Several runs as one step: their times and bytes added up, with these logits."""
    return Step(
        logits,
        sum(s.host_s for s in steps) + extra_host_s,
        sum(s.run_s for s in steps),
        sum(s.h2d_bytes for s in steps),
        sum(s.d2h_bytes for s in steps),
    )


def crossing(device: Device, arrays: Sequence[np.ndarray]) -> int:
    """Bytes of host arrays that cross to (or from) `device`: none where it shares host memory."""
    return sum(a.nbytes for a in arrays) if device.own_memory else 0


@dataclass(frozen=True)
class GraphRun:
    """One run of the graph as a strategy plans it; the loop feeds or binds it."""

    ids: Sequence[int]  # the tokens it feeds (a static window: W of them, left-padded)
    start: int  # tokens before them in the KV: the first one's position
    wanted: list[int] | None  # logits rows (positions in `ids`); None: the last one's
    mask: np.ndarray | None = None  # [1, C] for fixed shapes; None: ones over start + len(ids)
    keep_kv: bool = True  # False: its presents are not fetched (the no-cache step's last run)
    shrink_arena: bool = False  # a prompt's run: hand the memory arena's growth back after


RunGraph = Callable[[GraphRun], Step]


class Binder(Protocol):
    """What a strategy binds its device values through (the IO-Binding loop's binding)."""

    def bind_input(self, name: str, value: ort.OrtValue) -> None: ...

    def bind_output(self, name: str, value: ort.OrtValue | None) -> None:
        """None: onnxruntime allocates the output on the device at each run."""

    def outputs(self) -> dict[str, ort.OrtValue]:
        """The bound outputs of the last run, by name."""
        ...


class KvStrategy(ABC):
    """How a loop keeps the KV; these defaults are a cache that grows one slot per token."""

    caches = True  # False: nothing is kept between steps (Mode.NOCACHE)
    # Drafted tokens verified in one run get the bits one-token steps would: False where the
    # tokens' arrangement in the cache depends on how many share a run (a static window).
    verifies_in_one_run = True

    def __init__(self, info: ModelInfo, device: Device, context: int) -> None:
        self.info = info
        self.device = device
        self.context = context  # tokens the KV holds
        self.binder: Binder | None = None  # set by `bind`: the KV lives in bound device values
        # Bytes moved outside a run (resetting or cutting the KV), charged to the next step.
        self.pending_h2d = 0
        self.pending_d2h = 0

    # -- what fits ---------------------------------------------------------------------------
    def reusable(self, cached: Sequence[int], prompt: Sequence[int]) -> int:
        """How many cached tokens a new prompt keeps: their shared prefix, leaving one to run."""
        reuse = 0
        limit = min(len(cached), len(prompt) - 1)
        while reuse < limit and cached[reuse] == prompt[reuse]:
            reuse += 1
        return reuse

    def slots_needed(self, n_tokens: int) -> int:
        return n_tokens

    def fits(self, prompt_tokens: int) -> bool:
        """Can a prompt this long run and leave room to generate?"""
        return prompt_tokens < self.context

    def tokens_that_fit(self, cached: int, new_tokens: int) -> int:
        """How many tokens can be generated after prefilling `new_tokens` more."""
        return self.context - cached - new_tokens

    def check_room(self, cached: int, n: int) -> None:
        if cached + n > self.context:
            raise ValueError("the KV cache is full")

    def piece_tokens(self, prefill_chunk: int) -> int | None:
        """How long a piece of a long prompt may be; None: the whole prompt in one step."""
        return prefill_chunk

    # -- how a step runs ---------------------------------------------------------------------
    def forward(
        self, run: RunGraph, cached: Sequence[int], new_ids: list[int], wanted: list[int] | None
    ) -> Step:
        """Run `new_ids` after the `cached` tokens: logits of the rows `wanted`, or the last."""
        return run(GraphRun(new_ids, len(cached), wanted, shrink_arena=len(new_ids) > 1))

    # -- where the KV lives ------------------------------------------------------------------
    @abstractmethod
    def truncate(self, keep: int) -> None:
        """Keep the first `keep` tokens' KV (0: an empty cache)."""

    @abstractmethod
    def host_feeds(self) -> Mapping[str, np.ndarray]:
        """The naive loop: the pasts to feed."""

    @abstractmethod
    def keep_host(self, outputs: Mapping[str, np.ndarray]) -> None:
        """The naive loop: take what the run returned (by output name) as the next pasts."""

    @abstractmethod
    def bind(self, binder: Binder) -> None:
        """The IO-Binding loop: allocate the KV on the device and bind it."""

    @abstractmethod
    def keep_bound(self) -> None:
        """The IO-Binding loop: after a run, make its presents the next pasts."""

    @abstractmethod
    def bound_values(self) -> dict[str, ort.OrtValue]:
        """The device values bound as KV now, by name (empty on the host)."""


def empty_past(info: ModelInfo) -> np.ndarray:
    return np.zeros((1, info.kv_heads, 0, info.head_dim), dtype=info.kv_dtype)


class StandardKv(KvStrategy):
    """Concat: the graph returns past + new as the present, which becomes the next past."""

    def __init__(self, info: ModelInfo, device: Device, context: int) -> None:
        super().__init__(info, device, context)
        self._past: dict[str, np.ndarray] = {}  # on the host (the naive loop)
        self._values: dict[str, ort.OrtValue] = {}  # bound on the device (IO-Binding)

    def truncate(self, keep: int) -> None:
        if self.binder is None:
            if keep == 0 or not self._past:
                empty = empty_past(self.info)
                self._past = {t.past_name: empty for t in self.info.kv}
            else:
                past = self._past
                self._past = {k: np.ascontiguousarray(v[:, :, :keep]) for k, v in past.items()}
        elif keep == 0:
            self._bind_empty()
        else:  # shortening a device tensor needs one round trip, once per turn
            for t in self.info.kv:
                old = self._values[t.past_name]
                host = np.ascontiguousarray(download(self.device, old)[:, :, :keep])
                if self.device.own_memory:
                    self.pending_d2h += old.tensor_size_in_bytes()
                    self.pending_h2d += host.nbytes
                self._bind_past(t, upload(self.device, host))

    def host_feeds(self) -> Mapping[str, np.ndarray]:
        return self._past

    def keep_host(self, outputs: Mapping[str, np.ndarray]) -> None:
        # The host rebuilds every layer's past from the presents that came back.
        self._past = {t.past_name: outputs[t.present_name] for t in self.info.kv}

    def bind(self, binder: Binder) -> None:
        self.binder = binder
        self._bind_empty()

    def keep_bound(self) -> None:
        """This run's presents (still on the device) become the next pasts."""
        assert self.binder is not None
        outputs = self.binder.outputs()
        for t in self.info.kv:
            self._bind_past(t, outputs[t.present_name])

    def bound_values(self) -> dict[str, ort.OrtValue]:
        return dict(self._values)

    def _bind_empty(self) -> None:
        empty = empty_past(self.info)
        for t in self.info.kv:
            self._bind_past(t, upload(self.device, empty))

    def _bind_past(self, t: KVTensor, value: ort.OrtValue) -> None:
        assert self.binder is not None
        self._values[t.past_name] = value
        self.binder.bind_input(t.past_name, value)
        self.binder.bind_output(t.present_name, None)  # onnxruntime allocates it on the device


class SharedBufferKv(StandardKv):
    """GroupQueryAttention: bound, one context-long buffer per KV tensor is past and present.

    Not zeroed: GroupQueryAttention reads only the first `total_sequence_length` rows, and
    positions past a cut are simply overwritten by the next run. `buffers` (by past name) are
    given where the caller owns the memory (engine/slots.py: rows of a batch's buffers).
    """

    def __init__(
        self,
        info: ModelInfo,
        device: Device,
        context: int,
        buffers: Mapping[str, ort.OrtValue] | None = None,
    ) -> None:
        super().__init__(info, device, context)
        self._given = dict(buffers or {})

    def truncate(self, keep: int) -> None:
        if self.binder is None:
            super().truncate(keep)  # the naive loop runs it as standard

    def bind(self, binder: Binder) -> None:
        self.binder = binder
        info = self.info
        shape = [1, info.kv_heads, self.context, info.head_dim]
        for t in info.kv:
            value = self._given.get(t.past_name)
            if value is None:
                value = self.device.allocate(shape, ort_element_type(info.kv_dtype))
            self._values[t.past_name] = value
            binder.bind_input(t.past_name, value)
            binder.bind_output(t.present_name, value)

    def keep_bound(self) -> None:
        pass  # the run wrote its keys and values in place
