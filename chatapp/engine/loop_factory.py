"""Pick the loop class for a mode and a model's KV layout."""

from __future__ import annotations

from typing import NamedTuple

import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.loops import IOBindingLoop, KVLoop, NaiveLoop
from chatapp.engine.model_folder.model import KVLayout, ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.nocache import NoCacheLoop, NoCacheStaticLoop
from chatapp.engine.static_window import IOBindingStaticLoop, NaiveStaticLoop


class LoopKind(NamedTuple):
    """What decides the loop class: fixed-shape (static-window) graphs need loops of their own."""

    static_window: bool
    mode: Mode


LOOPS: dict[LoopKind, type[KVLoop]] = {
    LoopKind(static_window=False, mode=Mode.NOCACHE): NoCacheLoop,
    LoopKind(static_window=False, mode=Mode.NAIVE): NaiveLoop,
    LoopKind(static_window=False, mode=Mode.IOBINDING): IOBindingLoop,
    LoopKind(static_window=True, mode=Mode.NOCACHE): NoCacheStaticLoop,
    LoopKind(static_window=True, mode=Mode.NAIVE): NaiveStaticLoop,
    LoopKind(static_window=True, mode=Mode.IOBINDING): IOBindingStaticLoop,
}


def make_loop(
    mode: Mode, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
) -> KVLoop:
    """The loop for `mode` that fits the model's KV layout."""
    kind = LoopKind(static_window=info.layout is KVLayout.STATIC_WINDOW, mode=mode)
    return LOOPS[kind](session, info, device, max_context)
