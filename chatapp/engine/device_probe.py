"""Whether a device can really run here: a tiny graph started and run once, per process.

A provider being listed says little: onnxruntime-gpu lists CUDA on a machine without a driver,
and WebGPU's plugin offers an adapter where Vulkan then fails to load. Only starting a session
tells, so every device is tried once with a one-node graph before it is offered, and the
reason it failed is what `chatapp devices`, the device selector and the tests report.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from chatapp.error_text import STATUS_LINE, first_line

_lock = threading.Lock()
_results: dict[str, str | None] = {}  # device key -> None (runs) or why it does not


def probe_model() -> bytes:
    """y = x + x on four floats: an op every provider has, so a failure is the device's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # old enough for every onnxruntime chatapp supports
    return bytes(model.SerializeToString())


def device_problem(
    key: str, provider: str, start: Callable[[bytes], ort.InferenceSession]
) -> str | None:
    """None if a session started by `start` runs on `provider`, else why not (cached by key)."""
    with _lock:
        if key not in _results:
            _results[key] = _try(provider, start)
        return _results[key]


def forget(key: str) -> None:
    """Drop a cached result (the plugin was registered anew, in another mode)."""
    with _lock:
        _results.pop(key, None)


def _try(provider: str, start: Callable[[bytes], ort.InferenceSession]) -> str | None:
    with _stderr_captured() as said:
        try:
            session = start(probe_model())
            if provider not in session.get_providers():
                return "its provider did not start (a driver or library is missing)"
            x = np.arange(4, dtype=np.float32)
            [y] = session.run(None, {"x": x})
            if not np.array_equal(y, x + x):
                return "it computed a wrong result on a test graph"
            return None
        except Exception as exc:  # drivers fail in many ways; each becomes a reason
            error = exc
    return explain(error, said())


def explain(error: BaseException, native_output: str) -> str:
    """One line for a failed start, naming the missing driver where the native side said so."""
    text = f"{error}\n{native_output}"
    lowered = text.lower()
    if "libvulkan" in lowered or "couldn't load vulkan" in lowered:
        return "no Vulkan driver (the Vulkan loader libvulkan.so.1 could not be loaded)"
    if "webgpu adapter" in lowered or "requestadapterstatus" in lowered:
        return "no Vulkan driver offers a usable adapter (a GPU driver, or Mesa >= 25's lavapipe)"
    if "libcudnn" in lowered or "libcublas" in lowered or "libcudart" in lowered:
        return f"a CUDA library is missing ({first_line(error, STATUS_LINE)})"
    return f"it failed to start ({first_line(error, STATUS_LINE)})"


@contextlib.contextmanager
def _stderr_captured() -> Iterator[Callable[[], str]]:
    """What native code writes to fd 2 meanwhile (Dawn prints why Vulkan failed there)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2 (a frozen app without a console)
        yield lambda: ""
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        text: list[str] = []
        try:
            yield lambda: "".join(text)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text.append(sink.read(64 * 1024).decode("utf-8", "replace"))
