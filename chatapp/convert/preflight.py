"""Refuse a GGUF file we cannot convert from its header alone, before hashing or reading it.

Hashing a multi-gigabyte file takes minutes, and gguf's reader spends seconds on a large
vocabulary; a file whose architecture or tensor types are unsupported should be refused in well
under a second whatever its size. This walks the header (metadata and tensor descriptions, a few
megabytes at most) through a memory map, checking every length against the file size before
using it, and looks only at the architecture, the tensor types and where the tensors end.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from chatapp.convert.architectures import unsupported_message
from chatapp.convert.errors import ConversionError

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_id: int
    shape: tuple[int, ...]  # GGUF order (innermost first)
    offset: int  # relative to the start of the data section


@dataclass(frozen=True)
class Header:
    architecture: str | None
    alignment: int
    tensors: list[TensorInfo]
    data_start: int


class _Damaged(Exception):
    pass


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > self.size:
            raise _Damaged
        start = self.pos
        self.pos += n
        return start

    def u32(self) -> int:
        return int(struct.unpack_from("<I", self.buf, self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack_from("<Q", self.buf, self.take(8))[0])

    def string(self) -> bytes:
        n = self.u64()
        start = self.take(n)
        return bytes(self.buf[start : start + n])

    def skip_value(self, vtype: int) -> None:
        if vtype in _SCALARS:
            self.take(_SCALARS[vtype])
        elif vtype == _STRING:
            self.take(self.u64())
        elif vtype == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _SCALARS:
                self.take(_SCALARS[item] * count)
            elif count > self.size:  # every element takes at least one byte
                raise _Damaged
            elif item == _STRING:
                self._skip_strings(count)
            else:
                for _ in range(count):
                    self.skip_value(item)
        else:
            raise _Damaged

    def _skip_strings(self, count: int) -> None:
        # Vocabularies hold hundreds of thousands of strings: a tight loop, checked at the end
        # of each string so a lying length cannot run past the file.
        unpack, buf, size, pos = _U64.unpack_from, self.buf, self.size, self.pos
        for _ in range(count):
            if pos + 8 > size:
                raise _Damaged
            pos += 8 + unpack(buf, pos)[0]
            if pos > size:
                raise _Damaged
        self.pos = pos


_U64 = struct.Struct("<Q")


class _Refused(Exception):
    def __init__(self, architecture: str) -> None:
        self.architecture = architecture


def read_header(path: Path, architectures: tuple[str, ...] | None = None) -> Header:
    """The parts of a GGUF header the checks need; ConversionError if it is not whole.

    With `architectures`, a file of another architecture is refused as soon as its
    general.architecture entry is read (it comes first), before the vocabulary is walked.
    """
    if not path.is_file():
        raise ConversionError(f"{path} does not exist or is not a file.")
    size = path.stat().st_size
    with path.open("rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            raise ConversionError(
                f"{path.name} is not a GGUF file (it does not start with 'GGUF')."
            )
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _parse(_Cursor(buf, size), architectures)
            except _Refused as refused:
                raise ConversionError(
                    unsupported_message(path.name, refused.architecture)
                ) from None
            except (_Damaged, UnicodeDecodeError):
                raise _precise_error(path) from None


def _parse(cur: _Cursor, architectures: tuple[str, ...] | None) -> Header:
    cur.take(4)  # magic
    if cur.u32() not in (2, 3):
        raise _Damaged
    n_tensors, n_kv = cur.u64(), cur.u64()
    if n_tensors > cur.size or n_kv > cur.size:
        raise _Damaged
    arch: str | None = None
    alignment = 32
    for _ in range(n_kv):
        key = cur.string().decode("utf-8")
        vtype = cur.u32()
        if key == "general.architecture" and vtype == _STRING:
            arch = cur.string().decode("utf-8")
            if architectures is not None and arch not in architectures:
                raise _Refused(arch)
        elif key == "general.alignment" and vtype == 4:
            alignment = cur.u32()
        else:
            cur.skip_value(vtype)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string().decode("utf-8")
        n_dims = cur.u32()
        if n_dims > _MAX_DIMS:
            raise _Damaged
        shape = tuple(cur.u64() for _ in range(n_dims))
        tensors.append(TensorInfo(name, cur.u32(), shape, cur.u64()))
    if alignment <= 0 or alignment & (alignment - 1):
        raise _Damaged
    data_start = -(-cur.pos // alignment) * alignment
    return Header(arch, alignment, tensors, data_start)


def _precise_error(path: Path, fallback: str | None = None) -> ConversionError:
    """What is wrong, in the words of the bounded reader (gguf_reader.py), which parses the
    whole header (about a second for a 262k-token vocabulary): only paid for damaged files."""
    from chatapp.convert.gguf_reader import read_header as read_bounded

    try:
        read_bounded(path)
    except ConversionError as exc:
        return exc
    return ConversionError(
        fallback or f"{path.name} is damaged or truncated: its GGUF header could not be read."
    )


def type_name(type_id: int) -> str:
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"an unknown type (id {type_id})"


def tensor_bytes(t: TensorInfo) -> int | None:
    """Bytes of the tensor's data, or None when its type or shape is not a known one."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block_elems, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(t.type_id)]
    except (ValueError, KeyError):
        return None
    elements = 1
    for d in t.shape:
        elements *= d
    if not t.shape or t.shape[0] % block_elems:
        return None
    return elements // block_elems * block_bytes


def check_convertible(
    path: Path, architectures: tuple[str, ...], tensor_types: tuple[str, ...]
) -> Header:
    """Refuse, naming the reason, a file whose architecture or tensor types are unsupported."""
    header = read_header(path, architectures)
    if header.architecture is None:
        raise ConversionError(
            f"{path.name} does not say which architecture it is (general.architecture)."
        )
    for t in header.tensors:
        name = type_name(t.type_id)
        if name.startswith("an unknown type"):  # worded as gguf_reader.py words it
            raise ConversionError(
                f"{path.name}: tensor '{t.name}' has the unknown type id {t.type_id}."
            )
        if name not in tensor_types:
            raise ConversionError(
                f"Tensor '{t.name}' is stored as {name}, which this converter does not support "
                f"(supported: {', '.join(tensor_types)})."
            )
    size = path.stat().st_size
    for t in header.tensors:
        n_bytes = tensor_bytes(t)
        if n_bytes is None:
            raise _precise_error(
                path,
                f"{path.name} is damaged: tensor '{t.name}' has a shape {list(t.shape)} that "
                f"its type {type_name(t.type_id)} cannot hold.",
            )
        if header.data_start + t.offset + n_bytes > size:
            raise _precise_error(
                path,
                f"{path.name} is damaged or truncated: tensor '{t.name}' ends past the end of "
                "the file.",
            )
    return header
