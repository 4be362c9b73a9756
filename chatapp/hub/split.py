"""Join llama.cpp's split GGUF files (`NAME-00001-of-0000N.gguf`) into one GGUF.

chatapp's GGUF reader (convert/gguf_reader.py) reads one file, and the parts do not join by
concatenation: each part is a whole GGUF of its own (llama.cpp's gguf-split writes the model's
metadata into the first part, `split.no`, `split.count` and `split.tensors.count` into every
part, and to each part the descriptions and data of its own tensors, offsets counted from its
own data section). So this does what `llama-gguf-split --merge` does: the first part's metadata
without the `split.*` keys, every part's tensor descriptions with offsets recomputed for one
data section, then each tensor's bytes, aligned as the file says.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path

from chatapp.convert.errors import ConversionError
from chatapp.convert.preflight import read_header, tensor_bytes
from chatapp.hub.errors import HubError
from chatapp.safe_delete import open_temporary, replacing_path

_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
COPY_BLOCK = 8 << 20


def _metadata_records(buf: mmap.mmap) -> Iterator[tuple[str, int, int]]:
    """(key, start, end) of each metadata entry of the GGUF in `buf`, bounds checked."""
    size = len(buf)
    pos = 24
    (n_kv,) = struct.unpack_from("<Q", buf, 16)

    def need(n: int) -> None:
        if n < 0 or pos + n > size:
            raise HubError("A part of the split GGUF is damaged or truncated.")

    def u32() -> int:
        nonlocal pos
        need(4)
        pos += 4
        return int(struct.unpack_from("<I", buf, pos - 4)[0])

    def u64() -> int:
        nonlocal pos
        need(8)
        pos += 8
        return int(struct.unpack_from("<Q", buf, pos - 8)[0])

    def skip(vtype: int) -> None:
        nonlocal pos
        if vtype in _SCALAR_BYTES:
            need(_SCALAR_BYTES[vtype])
            pos += _SCALAR_BYTES[vtype]
        elif vtype == _STRING:
            n = u64()
            need(n)
            pos += n
        elif vtype == _ARRAY:
            item, count = u32(), u64()
            if item in _SCALAR_BYTES:
                need(_SCALAR_BYTES[item] * count)
                pos += _SCALAR_BYTES[item] * count
            elif count > size:
                raise HubError("A part of the split GGUF is damaged.")
            else:
                for _ in range(count):
                    skip(item)
        else:
            raise HubError("A part of the split GGUF is damaged (an unknown value type).")

    for _ in range(n_kv):
        start = pos
        n = u64()
        need(n)
        key = bytes(buf[pos : pos + n]).decode("utf-8", "replace")
        pos += n
        skip(u32())
        yield key, start, pos


def _tensor_record(name: str, shape: tuple[int, ...], type_id: int, offset: int) -> bytes:
    encoded = name.encode("utf-8")
    return (
        struct.pack("<Q", len(encoded))
        + encoded
        + struct.pack("<I", len(shape))
        + b"".join(struct.pack("<Q", d) for d in shape)
        + struct.pack("<IQ", type_id, offset)
    )


def join_parts(parts: list[Path], target: Path) -> str:
    """Write the parts, in order, as one GGUF at `target` (through a fresh temporary file
    renamed into place); returns the joined file's sha256."""
    try:
        headers = [read_header(p) for p in parts]
    except ConversionError as exc:
        raise HubError(f"The split GGUF cannot be joined: {exc}") from exc
    alignment = headers[0].alignment
    with parts[0].open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as first:
        (version,) = struct.unpack_from("<I", first, 4)
        kept = [
            bytes(first[start:end])
            for key, start, end in _metadata_records(first)
            if not key.startswith("split.")
        ]
    records: list[bytes] = []
    copies: list[tuple[Path, int, int]] = []  # (file, offset, bytes) in output order
    offset = 0
    for path, header in zip(parts, headers, strict=True):
        for t in header.tensors:
            n_bytes = tensor_bytes(t)
            if n_bytes is None:
                raise HubError(f"{path.name}: tensor '{t.name}' has an unknown type or shape.")
            records.append(_tensor_record(t.name, t.shape, t.type_id, offset))
            copies.append((path, header.data_start + t.offset, n_bytes))
            offset += -(-n_bytes // alignment) * alignment
    head = (
        b"GGUF"
        + struct.pack("<IQQ", version, len(records), len(kept))
        + b"".join(kept)
        + b"".join(records)
    )
    head += b"\0" * (-len(head) % alignment)
    digest = hashlib.sha256()
    with replacing_path(target) as temporary, open_temporary(temporary) as out:
        out.write(head)
        digest.update(head)
        for path, start, n_bytes in copies:
            with path.open("rb") as src:
                src.seek(start)
                left = n_bytes
                while left:
                    block = src.read(min(COPY_BLOCK, left))
                    if not block:
                        raise HubError(f"{path.name} ends before its tensors do.")
                    out.write(block)
                    digest.update(block)
                    left -= len(block)
            pad = b"\0" * (-n_bytes % alignment)
            out.write(pad)
            digest.update(pad)
    return digest.hexdigest()
