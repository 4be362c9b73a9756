"""Which devices ONNX Runtime offers here, how to start a session on one, and its memory.

A device with its own memory (a GPU, WebGPU, DirectML) is where the two loops really differ:
every host array fed to a run crosses to the device, and every output fetched crosses back.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from chatapp.engine import webgpu
from chatapp.engine.device_probe import device_problem
from chatapp.engine.errors import EngineError
from chatapp.engine.guards import PRECISIONS, THREADS_PER_CPU, default_precision, max_threads
from chatapp.engine.native_kernels import NativeKernelsUnavailable, NativeNodeMismatch, library_path
from chatapp.engine.vulkan_adapters import adapter_name, vulkan_adapters
from chatapp.folder_format.graph import declares_native, native_node_problem


@dataclass(frozen=True)
class Device:
    name: str  # what the user picks: "cpu", "cuda", "webgpu", "webgpu-software", ...
    provider: str  # the execution provider behind it
    ortvalue_device: str  # the device string OrtValue / IOBinding want
    label: str  # for menus
    own_memory: bool = False  # inputs and outputs cross a host <-> device boundary
    software: bool = False  # emulated on the CPU (slow; for testing)
    on_request: bool = False  # offered, but only started when the user names it
    # The most tokens one run may carry and still be computed right (None: any number).
    max_run_rows: int | None = None
    # ONNX Runtime runs GroupQueryAttention in float32 here. CUDA's takes float16 / bfloat16
    # only: a float32 one is placed on the CPU, its KV crosses every step, and the IO-Binding
    # loop's shared KV buffer gives wrong tokens there (measured on an H100, docs/engine.md).
    float32_gqa: bool = True
    ep_device: Any = field(default=None, compare=False, repr=False)  # plugin EPs' OrtEpDevice

    def __str__(self) -> str:
        return self.name

    def allocate(self, shape: list[int], dtype: Any) -> ort.OrtValue:
        """An uninitialised tensor in this device's memory."""
        if self.ep_device is not None:
            memory = self.ep_device.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
            return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, memory_info=memory)
        return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, self.ortvalue_device, 0)

    def upload(self, array: np.ndarray) -> ort.OrtValue:
        """A copy of `array` in this device's memory (for the CPU: the array itself, no copy)."""
        if not self.own_memory:
            return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
        value = self.allocate(list(array.shape), array.dtype)
        if array.size:
            value.update_inplace(np.ascontiguousarray(array))
        return value

    def download(self, value: ort.OrtValue) -> np.ndarray:
        """A host copy of a tensor that may live on this device."""
        if value.device_name() == "cpu":
            array: np.ndarray = value.numpy()
            return array
        host = ort.OrtValue.ortvalue_from_shape_and_type(
            value.shape(), value.element_type(), "cpu", 0
        )
        if np.prod(value.shape()):
            ort.copy_tensors([value], [host])
        copied: np.ndarray = host.numpy()
        return copied


# Built-in providers, in the order a user would prefer them. CoreML and OpenVINO take inputs in
# host memory, so their OrtValues live on "cpu" and nothing crosses that chatapp could see.
BUILTIN_DEVICES = (
    Device(
        "cuda",
        "CUDAExecutionProvider",
        "cuda",
        "NVIDIA GPU (CUDA)",
        own_memory=True,
        float32_gqa=False,
    ),
    Device("dml", "DmlExecutionProvider", "dml", "GPU (DirectML)", own_memory=True),
    Device("coreml", "CoreMLExecutionProvider", "cpu", "Apple Neural Engine / GPU (CoreML)"),
    Device("openvino", "OpenVINOExecutionProvider", "cpu", "Intel (OpenVINO)"),
    Device("cpu", "CPUExecutionProvider", "cpu", "CPU"),
)
CPU = BUILTIN_DEVICES[-1]
WEBGPU_NAMES = ("webgpu", "webgpu-software")
# WebGPU's GroupQueryAttention computes runs of 32 tokens and more on another kernel, whose rows
# past the eighth disagree with the CPU's by up to 0.8 in the logits (measured on Mesa's
# lavapipe); runs of at most 31 agree to 0.006. Longer prompts therefore run in pieces there.
WEBGPU_MAX_RUN_ROWS = 31
KNOWN_NAMES = (*(d.name for d in BUILTIN_DEVICES[:-1]), *WEBGPU_NAMES, CPU.name)


def attention_for(name: str) -> str:
    """The converter's attention for a model meant for device `name`: plain ops where ONNX
    Runtime's GroupQueryAttention takes no float32 (CUDA), else GroupQueryAttention."""
    builtin = next((d for d in BUILTIN_DEVICES if d.name == name), None)
    return "standard" if builtin is not None and not builtin.float32_gqa else "gqa"


class DeviceError(Exception):
    """A device name that is not available on this machine."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message  # why, without the device's name (for lists)


def _webgpu_device(found: webgpu.Discovery) -> Device:
    name = "webgpu-software" if found.software else "webgpu"
    adapter = adapter_name(found.software)
    if found.software:
        label = f"WebGPU software adapter{': ' + adapter if adapter else ''} (slow)"
    else:
        vendor = found.ep_device.device.vendor if found.ep_device is not None else ""
        label = f"WebGPU: {adapter or vendor or 'GPU'}"
    return Device(
        name,
        webgpu.PROVIDER,
        "webgpu",
        label,
        own_memory=True,
        software=found.software,
        ep_device=found.ep_device,
        max_run_rows=WEBGPU_MAX_RUN_ROWS,
    )


def _software_offer() -> Device:
    adapter = adapter_name(software=True)
    return Device(
        "webgpu-software",
        webgpu.PROVIDER,
        "webgpu",
        f"WebGPU software adapter{': ' + adapter if adapter else ''} (slow; on request)",
        own_memory=True,
        software=True,
        on_request=True,
        max_run_rows=WEBGPU_MAX_RUN_ROWS,
    )


def available_devices(offers: bool = False) -> list[Device]:
    """Devices that started a test session here; CPU is always last.

    With `offers`, a WebGPU software adapter that has not been started is listed too (marked
    `on_request`), when the plugin is installed, no hardware adapter was found and a software
    Vulkan driver is present: the user may choose it, and only then is it enabled and tried.
    """
    providers = set(ort.get_available_providers())
    builtin = [
        d for d in BUILTIN_DEVICES[:-1] if d.provider in providers and device_unusable(d) is None
    ]
    found = webgpu.discover()
    extra: list[Device] = []
    if found.ep_device is not None:
        device = _webgpu_device(found)
        if device_unusable(device) is None:
            extra.append(device)
    elif offers and software_offer_problem() is None:
        extra.append(_software_offer())
    return [*builtin, *extra, CPU]


def device_unusable(device: Device) -> str | None:
    """Why no session runs on `device` here (None: one did), tried once per process."""
    if device is CPU or device.on_request:
        return None

    def start(model: bytes) -> ort.InferenceSession:
        return create_session(model, device, session_options(1))

    return device_problem(device.name, device.provider, start)


def software_offer_problem() -> str | None:
    """Why the WebGPU software adapter is not worth offering (None: it may start)."""
    if webgpu.library_path() is None:
        return f"the WebGPU plugin is not installed ({webgpu.INSTALL_HINT})"
    if sys.platform.startswith("linux") and not any(a.is_software for a in vulkan_adapters()):
        return "no Vulkan driver with a software adapter (Mesa >= 25's lavapipe)"
    return None


# Where each built-in provider can exist at all: no point telling a Linux user about DirectML.
_PLATFORMS = {"dml": ("win32",), "coreml": ("darwin",)}


def unavailable_reasons() -> dict[str, str]:
    """Why the devices chatapp knows are not offered here (for `chatapp devices`)."""
    providers = set(ort.get_available_providers())
    reasons = {
        d.name: f"this onnxruntime build has no {d.provider}"
        for d in BUILTIN_DEVICES[:-1]
        if d.provider not in providers and sys.platform in _PLATFORMS.get(d.name, (sys.platform,))
    }
    if "cuda" in reasons:
        reasons["cuda"] += " (install onnxruntime-gpu in place of onnxruntime)"
    for d in BUILTIN_DEVICES[:-1]:
        problem = device_unusable(d) if d.provider in providers else None
        if problem:
            reasons[d.name] = problem
    found = webgpu.discover()
    if found.ep_device is None and found.reason:
        reasons["webgpu"] = found.reason
    elif found.ep_device is not None:
        device = _webgpu_device(found)
        problem = device_unusable(device)
        if problem:
            reasons[device.name] = problem
    if found.ep_device is None and webgpu.library_path() is not None:
        problem = software_offer_problem()
        if problem:
            reasons["webgpu-software"] = problem
    return reasons


def find_device(name: str) -> Device:
    wanted = name.strip().lower()
    if wanted == "webgpu-software":
        return _software_webgpu()
    for device in available_devices():
        if device.name == wanted:
            return device
    if wanted not in KNOWN_NAMES:
        raise DeviceError(f"Unknown device '{name}'. Known devices: {', '.join(KNOWN_NAMES)}.")
    reason = unavailable_reasons().get(wanted)
    found = webgpu.discover()
    if wanted == "webgpu" and found.ep_device is not None and found.software:
        reason = "its only adapter is a software one: choose 'webgpu-software'"
    here = ", ".join(d.name for d in available_devices())
    raise DeviceError(
        f"The device '{name}' is not available here"
        + (f": {reason}" if reason else "")
        + f". Available: {here}."
    )


def _software_webgpu() -> Device:
    found = webgpu.discover(software=True)
    problem = found.reason if found.ep_device is None else None
    device = _webgpu_device(found) if found.ep_device is not None else None
    if device is not None:
        problem = device_unusable(device)
    if device is None or problem:
        raise DeviceError(f"WebGPU's software adapter is not available here: {problem}.", problem)
    return device


def default_threads() -> int:
    """Physical-ish cores: ONNX Runtime decodes fastest with one thread per core."""
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def check_threads(threads: int | None) -> None:
    """At most `THREADS_PER_CPU` intra-op threads per logical CPU (guards.py says why)."""
    if threads is None:
        return
    cap = max_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cap:
        raise EngineError(
            f"Threads must be from 1 to {cap} ({THREADS_PER_CPU} per CPU here); got {threads}."
        )


# The session config entry the GGUF kernels read their precision from (native/; without it the
# library multiplies "fast", or as CHATAPP_GGUF_PRECISION says, for experiments). The library's
# "chatapp.gguf.prompt" entry (CHATAPP_GGUF_PROMPT) stays an experiment's, never set here.
PRECISION_CONFIG = "chatapp.gguf.precision"


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise EngineError(f"Precision must be {' or '.join(PRECISIONS)}; got {precision!r}.")


def session_options(threads: int | None = None, precision: str | None = None) -> ort.SessionOptions:
    """A session's options with `threads` intra-op threads (None: one per core) and the GGUF
    kernels' precision (guards.PRECISIONS), always set so that the library's own default or an
    experiment's environment never decides it silently; EngineError for a count or a precision
    that cannot be."""
    check_threads(threads)
    precision = precision or default_precision()
    check_precision(precision)
    opts = ort.SessionOptions()
    opts.add_session_config_entry(PRECISION_CONFIG, precision)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or default_threads()
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # warnings about unused initializers are noise to a user
    return opts


def create_session(
    model: Path | bytes,
    device: Device,
    opts: ort.SessionOptions,
    device_graph: bytes | None = None,
) -> ort.InferenceSession:
    """A session on `device` (CPU for the ops the device lacks); raises what the provider raises.
    `device_graph`: the graph at `model` as another device runs it (int8 levels hold on the CPU
    only; no If), made by the folder read for the device."""
    register_if_needed(model, device.provider == CPU.provider, device.label, opts)
    if device.provider != CPU.provider and isinstance(model, Path) and device_graph is not None:
        # Its weights stay in the files beside the graph.
        opts.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(model.parent)
        )
        model = device_graph
    source = model if isinstance(model, bytes) else str(model)
    if device.ep_device is not None:
        opts.add_provider_for_devices([device.ep_device], {})
        return ort.InferenceSession(source, sess_options=opts)
    providers = list(dict.fromkeys([device.provider, CPU.provider]))
    return ort.InferenceSession(source, sess_options=opts, providers=providers)


def register_if_needed(
    model: Path | bytes, on_cpu: bool, device_label: str, opts: ort.SessionOptions
) -> None:
    """Register chatapp's GGUF kernels (native_kernels.py) with `opts` when the graph needs
    them; refuse with a sentence the user can act on when they cannot run here, or when a
    native node disagrees with its weight (an edited or damaged folder)."""
    if isinstance(model, bytes) or not needs_native(model):
        return
    if not on_cpu:
        raise NativeKernelsUnavailable(
            f"{model.parent.name} runs on chatapp's GGUF kernels, which run on the CPU only; to "
            f"run it on {device_label}, open its GGUF again with that device selected (or "
            "`chatapp convert --graph both`)."
        )
    path = library_path()
    if path is None:
        raise NativeKernelsUnavailable(
            f"{model.parent.name} needs chatapp's GGUF kernels, which are not built here; run "
            "`make native`, or convert the GGUF again with --graph stock."
        )
    problem = native_node_problem(model)
    if problem is not None:
        raise NativeNodeMismatch(
            f"{model.name} of {model.parent.name} is damaged: {problem}; convert its GGUF again."
        )
    opts.register_custom_ops_library(str(path))


def needs_native(model: Path) -> bool:
    """Whether the graph at `model` uses the native kernels (reads the graph, not its weights)."""
    try:
        st = model.stat()
    except OSError:
        return False
    return _declares_native(str(model), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=32)
def _declares_native(path: str, mtime_ns: int, size: int) -> bool:
    del mtime_ns, size  # the cache key: a rewritten file is read again
    return declares_native(onnx.load(path, load_external_data=False))


@dataclass
class StartedSession:
    session: ort.InferenceSession
    device: Device


def start_session(
    model_path: Path,
    device: Device,
    threads: int | None = None,
    precision: str | None = None,
    device_graph: bytes | None = None,
) -> StartedSession:
    """A session on `device`, or what its provider raised (a refusal shows as a session without
    the device's provider): whether to run on the CPU instead, and why, is decided by
    loaded_model.start_model alone. `precision`: the GGUF kernels' (`session_options`);
    `device_graph`: `create_session`'s."""
    opts = session_options(threads, precision)
    return StartedSession(create_session(model_path, device, opts, device_graph), device)
