"""Pick the loop class for a mode and a model's KV layout."""

from __future__ import annotations

import onnxruntime as ort

from chatapp.engine.devices import Device
from chatapp.engine.loops import IOBindingLoop, KVLoop, NaiveLoop
from chatapp.engine.model import KVLayout, ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.nocache import NoCacheLoop, NoCacheStaticLoop
from chatapp.engine.static_window import IOBindingStaticLoop, NaiveStaticLoop

LOOPS: dict[tuple[bool, Mode], type[KVLoop]] = {
    (False, Mode.NOCACHE): NoCacheLoop,
    (False, Mode.NAIVE): NaiveLoop,
    (False, Mode.IOBINDING): IOBindingLoop,
    (True, Mode.NOCACHE): NoCacheStaticLoop,
    (True, Mode.NAIVE): NaiveStaticLoop,
    (True, Mode.IOBINDING): IOBindingStaticLoop,
}


def make_loop(
    mode: Mode, session: ort.InferenceSession, info: ModelInfo, device: Device, max_context: int
) -> KVLoop:
    """The loop for `mode` that fits the model's KV layout."""
    static = info.layout is KVLayout.STATIC_WINDOW
    return LOOPS[static, mode](session, info, device, max_context)
