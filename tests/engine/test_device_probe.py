"""A device is offered only after a tiny session really ran on it (issue 24).

These use fake session starters for the failures a real machine shows (no Vulkan loader, a
provider that silently falls back to the CPU) and the real CPU provider for the success path,
so they hold on any machine, with or without a GPU or Vulkan.
"""

from __future__ import annotations

from typing import Any

import onnxruntime as ort
import pytest

from chatapp.engine import device_probe, devices
from chatapp.engine.device_probe import device_problem, explain, forget
from chatapp.engine.devices import CPU, Device, DeviceError

DAWN_NO_VULKAN = (
    "Warning: Couldn't load Vulkan: libvulkan.so.1: cannot open shared object file: "
    "No such file or directory"
)
EP_FAIL = (
    "[ONNXRuntimeError] : 11 : EP_FAIL : webgpu_context.cc:136 adapter_result.status == "
    "wgpu::RequestAdapterStatus::Success was false. Failed to get a WebGPU adapter"
)


@pytest.fixture(autouse=True)
def fresh_cache() -> Any:
    keys = ("test-ok", "test-fails", "test-fallback", "test-count", "fake-gpu")
    for key in keys:
        forget(key)
    yield
    for key in keys:
        forget(key)


def cpu_start(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def test_a_device_that_runs_the_test_graph_has_no_problem() -> None:
    assert device_problem("test-ok", "CPUExecutionProvider", cpu_start) is None


def test_a_provider_that_falls_back_to_the_cpu_is_not_usable() -> None:
    # onnxruntime-gpu on a machine without a driver: the session starts, on the CPU only.
    problem = device_problem("test-fallback", "CUDAExecutionProvider", cpu_start)
    assert problem is not None and "did not start" in problem


def test_a_start_that_raises_gives_its_reason_and_is_tried_once() -> None:
    calls: list[int] = []

    def failing(_model: bytes) -> ort.InferenceSession:
        calls.append(1)
        raise RuntimeError(EP_FAIL)

    first = device_problem("test-count", "WebGpuExecutionProvider", failing)
    second = device_problem("test-count", "WebGpuExecutionProvider", failing)
    assert first == second and first is not None and first.startswith("no Vulkan driver")
    assert calls == [1]


def test_what_native_code_prints_names_the_missing_loader() -> None:
    reason = explain(RuntimeError(EP_FAIL), DAWN_NO_VULKAN)
    assert reason == "no Vulkan driver (the Vulkan loader libvulkan.so.1 could not be loaded)"
    other = explain(ValueError("out of device memory\nat line 2"), "")
    assert other == "it failed to start (out of device memory)"


def test_native_output_during_the_probe_is_captured(capfd: pytest.CaptureFixture[str]) -> None:
    import os

    def noisy(_model: bytes) -> ort.InferenceSession:
        os.write(2, DAWN_NO_VULKAN.encode())
        raise RuntimeError(EP_FAIL)

    problem = device_problem("test-fails", "WebGpuExecutionProvider", noisy)
    assert problem is not None and "libvulkan.so.1" in problem
    assert "Couldn't load Vulkan" not in capfd.readouterr().err


def test_an_unusable_device_is_neither_offered_nor_found(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Device("cuda", "FakeGpuExecutionProvider", "cuda", "Fake GPU", own_memory=True)
    monkeypatch.setattr(devices, "BUILTIN_DEVICES", (fake, CPU))
    monkeypatch.setattr(
        devices.ort, "get_available_providers", lambda: [fake.provider, CPU.provider]
    )
    monkeypatch.setattr(device_probe, "_results", {fake.name: "no driver for the fake GPU"})
    assert [d.name for d in devices.available_devices()][-1] == "cpu"
    assert "cuda" not in [d.name for d in devices.available_devices(offers=True)]
    assert devices.unavailable_reasons()["cuda"] == "no driver for the fake GPU"
    with pytest.raises(DeviceError, match="no driver for the fake GPU"):
        devices.find_device("cuda")
