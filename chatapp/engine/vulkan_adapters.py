"""Names of the Vulkan adapters on this machine, for device labels ("llvmpipe", "NVIDIA H100").

ONNX Runtime's WebGPU plugin says which hardware device it is attached to (vendor, type) but not
which adapter Dawn picked. On Linux Dawn runs over Vulkan, so asking the Vulkan loader for its
physical devices gives the name a user recognises. Best effort: any failure means "no names".
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from functools import cache

# VkPhysicalDeviceType
INTEGRATED_GPU, DISCRETE_GPU, VIRTUAL_GPU, CPU = 1, 2, 3, 4
_INSTANCE_CREATE_INFO = 1  # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
_NAME_OFFSET, _NAME_SIZE = 20, 256  # deviceName in VkPhysicalDeviceProperties
_PROPERTIES_SIZE = 4096  # larger than VkPhysicalDeviceProperties on every platform


@dataclass(frozen=True)
class Adapter:
    name: str
    kind: int  # VkPhysicalDeviceType
    vendor_id: int

    @property
    def is_software(self) -> bool:
        return self.kind == CPU


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = (
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pApplicationInfo", ctypes.c_void_p),
        ("enabledLayerCount", ctypes.c_uint32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", ctypes.c_uint32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    )


@cache
def vulkan_adapters() -> tuple[Adapter, ...]:
    """Every Vulkan physical device, in the loader's order; () where Vulkan is absent."""
    if not sys.platform.startswith("linux"):
        return ()
    try:
        return _enumerate(ctypes.CDLL("libvulkan.so.1"))
    except (OSError, AttributeError, UnicodeDecodeError):
        return ()


def _enumerate(vk: ctypes.CDLL) -> tuple[Adapter, ...]:
    instance = ctypes.c_void_p()
    vk.vkCreateInstance.argtypes = (
        ctypes.POINTER(_InstanceCreateInfo),
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
    )
    info = _InstanceCreateInfo(sType=_INSTANCE_CREATE_INFO)
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != 0:
        return ()
    try:
        vk.vkEnumeratePhysicalDevices.argtypes = (
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_void_p,
        )
        vk.vkGetPhysicalDeviceProperties.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
        count = ctypes.c_uint32()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * count.value)()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        adapters = []
        for handle in handles[: count.value]:
            props = ctypes.create_string_buffer(_PROPERTIES_SIZE)
            vk.vkGetPhysicalDeviceProperties(handle, props)
            _api, _driver, vendor, _device, kind = (ctypes.c_uint32 * 5).from_buffer(props)
            raw = props.raw[_NAME_OFFSET : _NAME_OFFSET + _NAME_SIZE].split(b"\0")[0]
            adapters.append(Adapter(raw.decode("utf-8"), int(kind), int(vendor)))
        return tuple(adapters)
    finally:
        vk.vkDestroyInstance.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
        vk.vkDestroyInstance(instance, None)


def adapter_name(software: bool) -> str | None:
    """The adapter Dawn would take: the CPU one for a software device, else the best GPU."""
    adapters = vulkan_adapters()
    if software:
        picks = [a for a in adapters if a.is_software]
    else:
        rank = {DISCRETE_GPU: 0, INTEGRATED_GPU: 1, VIRTUAL_GPU: 2}
        picks = sorted((a for a in adapters if a.kind in rank), key=lambda a: rank[a.kind])
    return picks[0].name if picks else None
