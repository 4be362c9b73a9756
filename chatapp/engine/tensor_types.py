"""Element types of a model's KV cache and logits: float32, float16 and bfloat16.

numpy has no bfloat16; `ml_dtypes` (installed with onnx) gives host arrays one. onnxruntime's
Python API neither takes nor returns such arrays, so bfloat16 tensors cross as OrtValues made
over the array's own memory (`ortvalue_from_numpy_with_onnx_type`) and are read back through
their data pointer. float32 and float16 go through the ordinary numpy paths.
"""

from __future__ import annotations

import ctypes
from typing import Any

import ml_dtypes
import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from chatapp.engine.devices import Device

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_TYPES: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.BFLOAT16: BFLOAT16,
}
NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", BFLOAT16: "bfloat16"}


def is_bfloat16(dtype: Any) -> bool:
    return bool(np.dtype(dtype) == BFLOAT16)


def ort_element_type(dtype: Any) -> Any:
    """What `OrtValue.ortvalue_from_shape_and_type` takes for this dtype."""
    return TensorProto.BFLOAT16 if is_bfloat16(dtype) else np.dtype(dtype).type


def host_value(array: np.ndarray) -> ort.OrtValue:
    """A CPU OrtValue over `array`'s memory (no copy): writes by a run land in the array."""
    if is_bfloat16(array.dtype):
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            array.view(np.uint16), TensorProto.BFLOAT16
        )
    return ort.OrtValue.ortvalue_from_numpy(array)


def host_copy(value: ort.OrtValue) -> np.ndarray:
    """The tensor as a new host array (bfloat16 as ml_dtypes.bfloat16)."""
    if value.data_type() != "tensor(bfloat16)":
        if value.device_name() == "cpu":
            return np.array(value.numpy())
        out = ort.OrtValue.ortvalue_from_shape_and_type(
            value.shape(), value.element_type(), "cpu", 0
        )
        ort.copy_tensors([value], [out])
        copied: np.ndarray = out.numpy()
        return copied
    shape = value.shape()
    out_array = np.empty(shape, dtype=BFLOAT16)
    if out_array.size == 0:
        return out_array
    if value.device_name() == "cpu":
        raw = (ctypes.c_uint16 * out_array.size).from_address(value.data_ptr())
        out_array.view(np.uint16).reshape(-1)[:] = np.frombuffer(memoryview(raw), dtype=np.uint16)
    else:
        ort.copy_tensors([value], [host_value(out_array)])
    return out_array


def as_float32(logits: np.ndarray) -> np.ndarray:
    """Logits as float32 for the sampler; float32 input is returned as is (no copy)."""
    return logits if logits.dtype == np.float32 else logits.astype(np.float32)


def needs_ortvalues(*dtypes: Any) -> bool:
    """session.run cannot feed or return these (bfloat16): run with OrtValues instead."""
    return any(is_bfloat16(d) for d in dtypes)


def run_with_host_arrays(
    session: ort.InferenceSession, names: list[str], feeds: dict[str, np.ndarray]
) -> list[np.ndarray]:
    """`session.run` for models with bfloat16 inputs or outputs: host arrays in and out."""
    values = {name: host_value(np.ascontiguousarray(a)) for name, a in feeds.items()}
    return [host_copy(v) for v in session.run_with_ort_values(names, values)]


def upload(device: Device, array: np.ndarray) -> ort.OrtValue:
    """A copy of `array` in the device's memory (on the CPU: the array itself)."""
    if not is_bfloat16(array.dtype):
        return device.upload(array)
    host = host_value(np.ascontiguousarray(array))
    if not device.own_memory:
        return host
    value = device.allocate(list(array.shape), TensorProto.BFLOAT16)
    if array.size:
        ort.copy_tensors([host], [value])
    return value


def download(device: Device, value: ort.OrtValue) -> np.ndarray:
    """A host copy of a tensor that may live on the device."""
    if value.data_type() == "tensor(bfloat16)":
        return host_copy(value)
    return device.download(value)
