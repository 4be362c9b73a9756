"""ONNX Runtime's WebGPU execution provider, shipped as a plugin (`onnxruntime-ep-webgpu`).

A plugin EP is registered at run time and offers `OrtEpDevice`s; sessions are started with
`SessionOptions.add_provider_for_devices`. Without a GPU the plugin offers nothing unless
ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 is set when it is registered: then it runs on a software
Vulkan driver (Mesa's lavapipe, >= 25). chatapp sets that variable only when the user asks for the
software adapter by name (`--device webgpu-software`) and in the tests.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import onnxruntime as ort

from chatapp.error_text import STATUS_LINE, first_line

PROVIDER = "WebGpuExecutionProvider"
SOFTWARE_ENV = "ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER"
_LIBRARY_NAME = "chatapp-webgpu"
INSTALL_HINT = "pip install onnxruntime-ep-webgpu (chatapp's [webgpu] extra)"
NO_ADAPTER_HINT = (
    "no WebGPU adapter was found (on Linux it needs a Vulkan driver: a GPU's, or Mesa 25's "
    "lavapipe for --device webgpu-software)"
)


@dataclass(frozen=True)
class Discovery:
    ep_device: Any | None  # onnxruntime.OrtEpDevice
    software: bool  # the device is a CPU: a software adapter
    reason: str | None  # why there is none


_lock = threading.Lock()
_registered: str | None = None  # None | "default" | "software"
_found: dict[str, Discovery] = {}


def library_path() -> str | None:
    try:
        import onnxruntime_ep_webgpu
    except ImportError:
        return None
    try:
        return str(onnxruntime_ep_webgpu.get_library_path())
    except RuntimeError:
        return None


def discover(software: bool = False) -> Discovery:
    """The WebGPU EP device, registering the plugin on first use (cached per mode).

    `software=False` never sets the variable, so only a hardware adapter (or a software one the
    user enabled in their own environment) is found. `software=True` sets it, re-registering the
    plugin if it was registered without: safe, because then no session can be using it.
    """
    mode = "software" if software else "default"
    with _lock:
        if mode in _found:
            return _found[mode]
        found = _discover(mode)
        _found[mode] = found
        return found


def _discover(mode: str) -> Discovery:
    global _registered
    path = library_path()
    if path is None:
        return Discovery(None, False, f"the WebGPU plugin is not installed ({INSTALL_HINT})")
    if mode == "software" and _registered == "default":
        prior = _found.get("default")
        if prior is not None and prior.ep_device is not None:
            if prior.software:  # the user's own environment already allowed it
                return prior
            return Discovery(
                None, False, "a hardware WebGPU adapter is available: choose 'webgpu' instead"
            )
        ort.unregister_execution_provider_library(_LIBRARY_NAME)
        _registered = None
    if _registered is None:
        # onnxruntime logs a warning when the software adapter is allowed; a user who asked
        # for it needs no such line (and the command line promises one line per error).
        ort.set_default_logger_severity(3)
        previous = os.environ.get(SOFTWARE_ENV)
        if mode == "software":
            os.environ[SOFTWARE_ENV] = "1"
        try:
            ort.register_execution_provider_library(_LIBRARY_NAME, path)
        except Exception as exc:  # an incompatible onnxruntime, a missing Vulkan loader...
            return Discovery(
                None, False, f"the WebGPU plugin did not load ({first_line(exc, STATUS_LINE)})"
            )
        finally:
            # Read when the plugin is registered; restored so that child processes (a
            # benchmark peer, a second window) do not inherit the choice.
            _restore(SOFTWARE_ENV, previous)
        _registered = mode
    devices = [d for d in ort.get_ep_devices() if d.ep_name == PROVIDER]
    if not devices:
        return Discovery(None, False, NO_ADAPTER_HINT)
    device = devices[0]
    return Discovery(device, device.device.type == ort.OrtHardwareDeviceType.CPU, None)


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
