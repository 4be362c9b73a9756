"""Build a loop: its plumbing from the mode, its KV strategy from the graph's KV layout."""

from __future__ import annotations

import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.kv_strategy import KvStrategy, SharedBufferKv, StandardKv
from chatapp.engine.loops import IOBindingLoop, KVLoop, NaiveLoop
from chatapp.engine.model_folder.model import KVLayout, ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.nocache import NoCacheKv
from chatapp.engine.static_window import StaticWindowKv

# How each layout the manifest names keeps its KV.
KV_STRATEGIES: dict[KVLayout, type[KvStrategy]] = {
    KVLayout.CONCAT: StandardKv,
    KVLayout.SHARED_BUFFER: SharedBufferKv,
    KVLayout.STATIC_WINDOW: StaticWindowKv,
}


def make_kv(mode: Mode, info: ModelInfo, device: Device, max_context: int) -> KvStrategy:
    """The KV strategy for the model's layout; without a cache, wrapped so nothing is kept."""
    mode = Mode(mode)
    kv = KV_STRATEGIES[info.layout](info, device, max_context)
    return kv if mode.caches else NoCacheKv(kv)


def make_loop(
    mode: Mode, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
) -> KVLoop:
    """The loop for `mode`, given the KV strategy that fits the model's layout. The loop
    without a cache is the naive loop's plumbing (`session.run`) given `NoCacheKv`."""
    mode = Mode(mode)  # a Mode equals its string: "naive" is taken too
    kv = make_kv(mode, info, device, max_context)
    loop_class = IOBindingLoop if mode is Mode.IOBINDING else NaiveLoop
    return loop_class(session, info, device, kv)
