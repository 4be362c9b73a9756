"""Which devices ONNX Runtime offers here, and how to start a session on one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort


@dataclass(frozen=True)
class Device:
    name: str  # what the user picks: "cpu", "cuda", "dml", "coreml", "openvino"
    provider: str  # the execution provider behind it
    ortvalue_device: str  # the device string OrtValue / IOBinding want
    label: str  # for menus

    def __str__(self) -> str:
        return self.name


# Known providers, in the order a user would prefer them. CoreML and OpenVINO take inputs in
# host memory, so their OrtValues live on "cpu".
KNOWN_DEVICES = (
    Device("cuda", "CUDAExecutionProvider", "cuda", "NVIDIA GPU (CUDA)"),
    Device("dml", "DmlExecutionProvider", "dml", "GPU (DirectML)"),
    Device("coreml", "CoreMLExecutionProvider", "cpu", "Apple Neural Engine / GPU (CoreML)"),
    Device("openvino", "OpenVINOExecutionProvider", "cpu", "Intel (OpenVINO)"),
    Device("cpu", "CPUExecutionProvider", "cpu", "CPU"),
)
CPU = KNOWN_DEVICES[-1]


class DeviceError(Exception):
    """A device name that is not available on this machine."""


def available_devices() -> list[Device]:
    """Devices whose execution provider is in this onnxruntime build; CPU is always last."""
    providers = set(ort.get_available_providers())
    return [d for d in KNOWN_DEVICES if d.provider in providers or d is CPU]


def find_device(name: str) -> Device:
    for device in KNOWN_DEVICES:
        if device.name == name.lower():
            if device in available_devices():
                return device
            raise DeviceError(
                f"The device '{name}' is not available here: this onnxruntime build offers "
                f"{', '.join(d.name for d in available_devices())}."
            )
    known = ", ".join(d.name for d in KNOWN_DEVICES)
    raise DeviceError(f"Unknown device '{name}'. Known devices: {known}.")


def default_threads() -> int:
    """Physical-ish cores: ONNX Runtime decodes fastest with one thread per core."""
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def session_options(threads: int | None = None) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or default_threads()
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # warnings about unused initializers are noise to a user

    return opts


@dataclass
class StartedSession:
    session: ort.InferenceSession
    device: Device
    fallback_reason: str | None  # why the requested device was not used


def start_session(model_path: Path, device: Device, threads: int | None = None) -> StartedSession:
    """A session on `device`; if that device fails to start, on the CPU with the reason kept."""
    opts = session_options(threads)
    if device is CPU:
        return StartedSession(_create(model_path, opts, [CPU.provider]), CPU, None)
    try:
        session = _create(model_path, opts, [device.provider, CPU.provider])
    except Exception as exc:  # providers fail in many ways (drivers, memory, unsupported ops)
        reason = f"{device.label} failed to start ({_first_line(exc)}); running on the CPU."
        return StartedSession(_create(model_path, opts, [CPU.provider]), CPU, reason)
    if device.provider not in session.get_providers():
        reason = f"{device.label} is not usable with this model; running on the CPU."
        return StartedSession(session, CPU, reason)
    return StartedSession(session, device, None)


def _create(
    model_path: Path, opts: ort.SessionOptions, providers: list[str]
) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_path), sess_options=opts, providers=providers)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
