"""Initializers written to model.onnx.data as the graph is built, one tensor at a time.

Before, the whole model was built in memory and `onnx.save_model(save_as_external_data=True)`
then wrote it out: peak memory grew with the model (4.7 GB for a 1.1B-parameter file; an 8B one
passed 18 GB). Here each initializer's bytes go to the file the moment the graph builder makes
them, and the graph keeps only the reference (location, offset, length), so memory is bounded by
the largest single tensor.

The result is the file onnx.save_model would write, byte for byte: the same tensors go outside
(those whose raw data, as `sys.getsizeof` counts it, reaches onnx's size threshold of 1024), in
the graph's initializer order, one after the other without padding, and each reference carries
the same three entries. A model whose initializers stay below `inline_below` bytes in all (the
tiny test models) is still saved as one file: its tensors are held until the total passes that
size, and only then written out.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

# onnx.save_model's default: tensors whose raw data is at least this big (as sys.getsizeof counts
# a bytes object: its length plus the object's header) go to the external file.
SIZE_THRESHOLD = 1024
_BYTES_HEADER = sys.getsizeof(b"")


def goes_outside(n_bytes: int) -> bool:
    return n_bytes + _BYTES_HEADER >= SIZE_THRESHOLD


class ExternalData:
    """Where an OnnxGraph puts its initializers' bytes (see OnnxGraph.stream_to)."""

    def __init__(self, path: Path, inline_below: int) -> None:
        self.path = path
        self.location = path.name
        self.inline_below = inline_below
        self.total = 0  # bytes of every initializer made so far
        self.written = 0  # bytes in the file
        self.digest = hashlib.sha256()  # of the file, as written (saves reading it back)
        self._file: BinaryIO | None = None
        self._held: list[TensorProto] = []  # made before the total reached inline_below

    @property
    def used(self) -> bool:
        """Whether the model keeps its weights in the external file."""
        return self._file is not None

    def tensor(self, array: np.ndarray, name: str) -> TensorProto:
        """The initializer for a C-contiguous `array`: its bytes written out, or held."""
        self.total += array.nbytes
        if self._file is None:
            tensor = numpy_helper.from_array(array, name)
            self._held.append(tensor)
            if self.total >= self.inline_below:
                self._start()
            return tensor
        if not goes_outside(array.nbytes) or array.dtype.kind not in "biuf":
            return numpy_helper.from_array(array, name)
        tensor = TensorProto()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        offset = self._write(array.reshape(-1).view(np.uint8).data)
        _refer(tensor, self.location, offset, array.nbytes)
        return tensor

    def adopt(self, tensor: TensorProto) -> None:
        """An initializer made before streaming began (its bytes still inside it)."""
        self.total += len(tensor.raw_data)
        if self._file is None:
            self._held.append(tensor)
            if self.total >= self.inline_below:
                self._start()
        elif tensor.HasField("raw_data") and goes_outside(len(tensor.raw_data)):
            self._move_out(tensor)

    def finish(self, model: onnx.ModelProto) -> None:
        """Move out any initializer that reached the graph without passing through here (one
        appended to the graph directly), so that the rule holds for all of them."""
        if self._file is None:
            return
        for tensor in model.graph.initializer:
            if tensor.HasField("raw_data") and goes_outside(len(tensor.raw_data)):
                self._move_out(tensor)

    def _start(self) -> None:
        """Open the file and move the held tensors' bytes into it, in order."""
        self._file = self.path.open("wb")
        for tensor in self._held:
            if tensor.HasField("raw_data") and goes_outside(len(tensor.raw_data)):
                self._move_out(tensor)
        self._held = []

    def _move_out(self, tensor: TensorProto) -> None:
        offset = self._write(tensor.raw_data)
        set_external_data(tensor, self.location, offset, len(tensor.raw_data))
        tensor.ClearField("raw_data")

    def _write(self, data: bytes | memoryview) -> int:
        assert self._file is not None
        offset = self.written
        self._file.write(data)
        self.digest.update(data)
        self.written += len(data)
        return offset

    def close(self) -> None:
        self._held = []
        if self._file is not None and not self._file.closed:
            self._file.close()


def _refer(tensor: TensorProto, location: str, offset: int, length: int) -> None:
    """The reference onnx's set_external_data writes (location, offset, length), without
    needing the bytes in the tensor first."""
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)


def save_graph(model: onnx.ModelProto, path: Path) -> None:
    """Write model.onnx; tensors already outside stay where they are."""
    # Not onnx.save_model's external-data path: nothing is left to move out.
    onnx.save_model(model, str(path))
