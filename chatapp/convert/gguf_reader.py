"""A bounded GGUF parser: every count, length and offset is checked against the file before
anything is allocated for it.

gguf-py's `GGUFReader` builds a numpy array per array element and trusts declared counts, so a
117-byte file that declares a 10^9-element array took 7.3 GB before failing, and a tensor offset
near 2^64 wrapped its uint64 arithmetic. Here each declared count is first multiplied by the
smallest size one element can take and compared with the bytes left in the file (Python ints,
so nothing wraps), and fixed caps (`Limits`) bound what a well-formed but absurd file can make us
build. Tensor data is not read: each tensor is a read-only memory-mapped view, with the dtype and
shape gguf-py's reader gives (typed arrays for float/int types, raw bytes per row otherwise).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from chatapp.convert.errors import ConversionError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS


@dataclass(frozen=True)
class Limits:
    """Caps far above any real model's header, far below what would exhaust memory."""

    metadata_entries: int = 1 << 16
    tensors: int = 1 << 16
    key_bytes: int = 1 << 16
    tensor_name_bytes: int = 1 << 12
    string_bytes: int = 32 << 20  # one metadata string (chat templates are kilobytes)
    total_string_bytes: int = 256 << 20
    array_elements: int = 2_000_000  # all metadata arrays together (vocab, scores, merges)
    alignment: int = 1 << 20


LIMITS = Limits()

# GGUF metadata value types and the struct format of the fixed-size ones.
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL = range(8)
_STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = 8, 9, 10, 11, 12
_SCALAR_FORMATS = {
    _UINT8: "B",
    _INT8: "b",
    _UINT16: "H",
    _INT16: "h",
    _UINT32: "I",
    _INT32: "i",
    _FLOAT32: "f",
    _BOOL: "B",
    _UINT64: "Q",
    _INT64: "q",
    _FLOAT64: "d",
}
_NUMPY_DTYPES = {
    _UINT8: "<u1",
    _INT8: "<i1",
    _UINT16: "<u2",
    _INT16: "<i2",
    _UINT32: "<u4",
    _INT32: "<i4",
    _FLOAT32: "<f4",
    _BOOL: "<u1",
    _UINT64: "<u8",
    _INT64: "<i8",
    _FLOAT64: "<f8",
}
_TYPED_TENSORS = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: str  # GGML type name, e.g. "Q4_1"
    dims: tuple[int, ...]  # GGUF order: the fastest-varying dimension first
    n_elements: int
    n_bytes: int
    offset: int  # absolute position of the data in the file
    block_elements: int
    block_bytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order: (rows/out_features, ..., in_features)."""
        return tuple(reversed(self.dims))


@dataclass
class GGUFHeader:
    path: Path
    version: int
    file_size: int
    alignment: int
    data_start: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)


class _Cursor:
    """Reads little-endian values from a buffer, refusing to go past its end."""

    def __init__(self, buf: Any, size: int, name: str, limits: Limits) -> None:
        self.buf = buf
        self.size = size
        self.pos = 0
        self.name = name
        self.limits = limits
        self.string_bytes = 0
        self.array_elements = 0

    def fail(self, problem: str) -> ConversionError:
        return ConversionError(f"{self.name} is damaged or truncated: {problem}.")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"{what} runs past the end of the file")

    def scalar(self, fmt: str, what: str) -> Any:
        width = struct.calcsize("<" + fmt)
        self.need(width, what)
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += width
        return value

    def string(self, what: str, cap: int) -> str:
        length = self.scalar("Q", f"the length of {what}")
        if length > cap:
            raise self.fail(f"{what} declares {length} bytes (at most {cap} are accepted)")
        self.need(length, what)
        self.string_bytes += length
        if self.string_bytes > self.limits.total_string_bytes:
            raise self.fail("its metadata strings add up to more than we accept")
        raw = bytes(self.buf[self.pos : self.pos + length])
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None


def read_header(path: Path | str, limits: Limits = LIMITS) -> tuple[GGUFHeader, np.memmap]:
    """Parse and check the header of `path`; returns it with a read-only map of the file."""
    path = Path(path)
    name = path.name
    if not path.exists():
        raise ConversionError(f"{path} does not exist.")
    if not path.is_file():
        raise ConversionError(f"{path} is not a regular file (a folder or a device?).")
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(4)
    if head != GGUF_MAGIC:
        raise ConversionError(f"{name} is not a GGUF file (it does not start with 'GGUF').")
    try:
        mm = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{name} could not be read ({exc}).") from exc
    cur = _Cursor(mm, size, name, limits)
    cur.pos = 4
    version = cur.scalar("I", "the version")
    if version & 0xFFFF == 0 and version:
        raise ConversionError(f"{name} is a big-endian GGUF; only little-endian files are read.")
    if version not in SUPPORTED_VERSIONS:
        raise ConversionError(
            f"{name} is GGUF version {version}; this converter reads versions "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))}."
        )
    n_tensors = cur.scalar("Q", "the tensor count")
    n_kv = cur.scalar("Q", "the metadata count")
    # Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor
    # description at least 8 + 4 + 8 + 4 + 8: a count that cannot fit is refused before use.
    left = size - cur.pos
    if n_kv > limits.metadata_entries or n_kv * 13 > left:
        raise cur.fail(f"it declares {n_kv} metadata entries")
    if n_tensors > limits.tensors or n_kv * 13 + n_tensors * 32 > left:
        raise cur.fail(f"it declares {n_tensors} tensors")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key", limits.key_bytes)
        if key in metadata:
            raise cur.fail(f"the metadata key '{key}' appears twice")
        value_type = cur.scalar("I", f"the type of '{key}'")
        metadata[key] = _value(cur, value_type, key)
    alignment = _alignment(metadata, name, limits)
    infos = [_tensor_info(cur, name) for _ in range(n_tensors)]
    data_start = -(-cur.pos // alignment) * alignment
    header = GGUFHeader(path, version, size, alignment, data_start, metadata)
    header.tensors = _place_tensors(infos, header, name)
    return header, mm


def _value(cur: _Cursor, value_type: int, key: str) -> Any:
    if value_type == _STRING:
        return cur.string(f"the value of '{key}'", cur.limits.string_bytes)
    if value_type == _ARRAY:
        return _array(cur, key)
    fmt = _SCALAR_FORMATS.get(value_type)
    if fmt is None:
        raise cur.fail(f"'{key}' has the unknown value type {value_type}")
    value = cur.scalar(fmt, f"the value of '{key}'")
    return bool(value) if value_type == _BOOL else value


def _array(cur: _Cursor, key: str) -> list[Any]:
    item_type = cur.scalar("I", f"the element type of '{key}'")
    count = cur.scalar("Q", f"the length of '{key}'")
    cur.array_elements += count
    if cur.array_elements > cur.limits.array_elements:
        raise cur.fail(
            f"the metadata array '{key}' declares {count} elements "
            f"(at most {cur.limits.array_elements} in all are accepted)"
        )
    if item_type == _ARRAY:
        raise cur.fail(f"'{key}' is an array of arrays, which GGUF models do not use")
    if item_type == _STRING:
        cur.need(count * 8, f"the array '{key}'")  # every string has an 8-byte length
        return [cur.string(f"an element of '{key}'", cur.limits.string_bytes) for _ in range(count)]
    dtype = _NUMPY_DTYPES.get(item_type)
    if dtype is None:
        raise cur.fail(f"'{key}' has the unknown element type {item_type}")
    width = np.dtype(dtype).itemsize
    cur.need(count * width, f"the array '{key}'")
    values = np.frombuffer(cur.buf, dtype=dtype, count=count, offset=cur.pos)
    cur.pos += count * width
    items = values.tolist()
    return [bool(v) for v in items] if item_type == _BOOL else items


def _alignment(metadata: dict[str, Any], name: str, limits: Limits) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 0 < value <= limits.alignment
        or value & (value - 1)
    ):
        raise ConversionError(
            f"{name} has general.alignment = {value!r}; a power of two up to "
            f"{limits.alignment} was expected."
        )
    return value


@dataclass(frozen=True)
class _RawTensor:
    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int


def _tensor_info(cur: _Cursor, name: str) -> _RawTensor:
    tensor_name = cur.string("a tensor name", cur.limits.tensor_name_bytes)
    n_dims = cur.scalar("I", f"the rank of '{tensor_name}'")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(f"tensor '{tensor_name}' has {n_dims} dimensions (1 to {MAX_DIMS} exist)")
    dims = tuple(cur.scalar("Q", f"the shape of '{tensor_name}'") for _ in range(n_dims))
    type_id = cur.scalar("I", f"the type of '{tensor_name}'")
    offset = cur.scalar("Q", f"the offset of '{tensor_name}'")
    return _RawTensor(tensor_name, dims, type_id, offset)


def _place_tensors(raw: list[_RawTensor], header: GGUFHeader, name: str) -> list[TensorInfo]:
    """Sizes from shapes and types, then: aligned, inside the file, not overlapping."""
    infos: list[TensorInfo] = []
    seen: set[str] = set()
    for t in raw:
        where = f"{name}: tensor '{t.name}'"
        if t.name in seen:
            raise ConversionError(f"{name} is damaged: the tensor '{t.name}' appears twice.")
        seen.add(t.name)
        try:
            qtype = GGMLQuantizationType(t.type_id)
            block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ConversionError(f"{where} has the unknown type id {t.type_id}.") from None
        if any(d < 1 for d in t.dims):
            raise ConversionError(f"{where} has the shape {list(t.dims)}, with an empty side.")
        n_elements = 1
        for d in t.dims:
            n_elements *= d
        if t.dims[0] % block_elements:
            raise ConversionError(
                f"{where} has rows of {t.dims[0]} values, not a whole number of "
                f"{qtype.name} blocks ({block_elements} values each)."
            )
        n_bytes = n_elements // block_elements * block_bytes
        if t.offset % header.alignment:
            raise ConversionError(
                f"{where} starts at offset {t.offset}, not a multiple of the file's alignment "
                f"({header.alignment})."
            )
        start = header.data_start + t.offset
        if start + n_bytes > header.file_size:
            raise ConversionError(
                f"{name} is damaged or truncated: tensor '{t.name}' ends past the end of the "
                f"file (byte {start + n_bytes} of {header.file_size})."
            )
        infos.append(
            TensorInfo(
                t.name, qtype.name, t.dims, n_elements, n_bytes, start, block_elements, block_bytes
            )
        )
    ordered = sorted(infos, key=lambda i: i.offset)
    for before, after in pairwise(ordered):
        if before.offset + before.n_bytes > after.offset:
            raise ConversionError(
                f"{name} is damaged: the data of tensors '{before.name}' and '{after.name}' "
                "overlap."
            )
    return infos


def tensor_view(mm: np.memmap, info: TensorInfo) -> np.ndarray:
    """The tensor's data, not copied: typed for float/int types, bytes per row otherwise."""
    raw = mm[info.offset : info.offset + info.n_bytes]
    typed = _TYPED_TENSORS.get(info.qtype)
    if typed is not None:
        return raw.view(typed).reshape(info.shape)
    row_bytes = info.dims[0] // info.block_elements * info.block_bytes
    return raw.reshape((*info.shape[:-1], row_bytes))
