"""Hand-made GGUF bytes for hostile-input tests: any count, length, type or offset can be set.

`GGUFParts.from_file` reads a valid file (the tiny model) into editable parts; `to_bytes` writes
them back, computing offsets unless told otherwise, so a test changes one thing at a time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL = range(8)
STRING, ARRAY, UINT64, INT64, FLOAT64 = 8, 9, 10, 11, 12
FORMATS = {
    UINT8: "B",
    INT8: "b",
    UINT16: "H",
    INT16: "h",
    UINT32: "I",
    INT32: "i",
    FLOAT32: "f",
    BOOL: "B",
    UINT64: "Q",
    INT64: "q",
    FLOAT64: "d",
}


def gstr(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value_bytes(vtype: int, value: Any, item_type: int | None = None) -> bytes:
    if vtype == STRING:
        return gstr(value)
    if vtype == ARRAY:
        assert item_type is not None
        body = b"".join(value_bytes(item_type, v) for v in value)
        return struct.pack("<IQ", item_type, len(value)) + body
    return struct.pack("<" + FORMATS[vtype], value)


@dataclass
class KV:
    key: str
    vtype: int
    value: Any
    item_type: int | None = None
    raw: bytes | None = None  # replaces the encoded value (type field excluded)

    def to_bytes(self) -> bytes:
        body = (
            self.raw
            if self.raw is not None
            else value_bytes(self.vtype, self.value, self.item_type)
        )
        return gstr(self.key) + struct.pack("<I", self.vtype) + body


@dataclass
class Tensor:
    name: str
    dims: list[int]  # GGUF order
    type_id: int
    data: bytes
    offset: int | None = None  # None: placed after the previous one, aligned


@dataclass
class GGUFParts:
    kvs: list[KV] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    version: int = 3
    alignment: int = 32
    n_kv: int | None = None  # None: the real counts
    n_tensors: int | None = None

    @classmethod
    def from_file(cls, path: Path) -> GGUFParts:
        reader = gguf.GGUFReader(path)
        parts = cls()
        for key, f in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            vtype = int(f.types[0])
            item = int(f.types[-1]) if vtype == ARRAY else None
            parts.kvs.append(KV(key, vtype, f.contents(), item))
        for t in reader.tensors:
            dims = [int(d) for d in t.shape.tolist()]
            parts.tensors.append(Tensor(t.name, dims, int(t.tensor_type), t.data.tobytes()))
        return parts

    def kv(self, key: str) -> KV:
        return next(k for k in self.kvs if k.key == key)

    def set(self, key: str, vtype: int, value: Any, item_type: int | None = None) -> GGUFParts:
        self.kvs = [k for k in self.kvs if k.key != key] + [KV(key, vtype, value, item_type)]
        return self

    def drop(self, key: str) -> GGUFParts:
        self.kvs = [k for k in self.kvs if k.key != key]
        return self

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)

    def to_bytes(self) -> bytes:
        head = b"GGUF" + struct.pack(
            "<IQQ",
            self.version,
            len(self.tensors) if self.n_tensors is None else self.n_tensors,
            len(self.kvs) if self.n_kv is None else self.n_kv,
        )
        body = b"".join(k.to_bytes() for k in self.kvs)
        infos, data, at = b"", b"", 0
        for t in self.tensors:
            offset = at if t.offset is None else t.offset
            infos += gstr(t.name) + struct.pack("<I", len(t.dims))
            infos += struct.pack(f"<{len(t.dims)}Q", *t.dims)
            infos += struct.pack("<IQ", t.type_id, offset)
            if t.offset is None:
                pad = -len(t.data) % self.alignment
                data += t.data + b"\0" * pad
                at += len(t.data) + pad
        header = head + body + infos
        header += b"\0" * (-len(header) % self.alignment)
        return header + data

    def write(self, path: Path) -> Path:
        path.write_bytes(self.to_bytes())
        return path


def f16_bytes(values: list[float]) -> bytes:
    return np.asarray(values, dtype=np.float16).tobytes()
