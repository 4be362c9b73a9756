"""A GGUF's shape from the first bytes of its header (a ranged GET of the file on the hub): the
architecture and what the KV cache takes per token. The metadata llama.cpp writes puts these
keys before the tokenizer's arrays, so the first few hundred kilobytes hold them; a header cut
short simply yields what it had."""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROBE_BYTES = 512 << 10
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class Shape:
    architecture: str | None
    n_layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    context_length: int = 0

    @property
    def complete(self) -> bool:
        return self.n_layers > 0 and self.kv_heads > 0 and self.head_dim > 0


class _Short(Exception):
    pass


def parse_shape(data: bytes) -> Shape | None:
    """The shape from a GGUF header's first bytes; None when they are no GGUF."""
    if data[:4] != b"GGUF" or len(data) < 24:
        return None
    pos = 24  # magic, version, tensor count, metadata count
    (count,) = struct.unpack_from("<Q", data, 16)
    values: dict[str, int | str] = {}

    def take(n: int) -> int:
        nonlocal pos
        if pos + n > len(data):
            raise _Short
        start, pos = pos, pos + n
        return start

    def string() -> bytes:
        (n,) = struct.unpack_from("<Q", data, take(8))
        start = take(n)
        return data[start : start + n]

    def skip(vtype: int) -> None:
        if vtype in _SCALARS:
            take(struct.calcsize(_SCALARS[vtype]))
        elif vtype == _STRING:
            string()
        elif vtype == _ARRAY:
            (item,) = struct.unpack_from("<I", data, take(4))
            (n,) = struct.unpack_from("<Q", data, take(8))
            if item in _SCALARS:
                take(struct.calcsize(_SCALARS[item]) * n)
            else:
                for _ in range(n):
                    skip(item)
        else:
            raise _Short

    try:
        for _ in range(count):
            key = string().decode("utf-8", "replace")
            (vtype,) = struct.unpack_from("<I", data, take(4))
            if key.startswith("tokenizer."):
                break  # the keys wanted come before the tokenizer's arrays
            if vtype == _STRING:
                values[key] = string().decode("utf-8", "replace")
            elif vtype in _SCALARS and vtype not in (6, 12, 7):
                (values[key],) = struct.unpack_from(
                    _SCALARS[vtype], data, take(struct.calcsize(_SCALARS[vtype]))
                )
            else:
                skip(vtype)
    except (_Short, struct.error):
        pass
    return shape_of(values)


def shape_of(values: dict[str, int | str]) -> Shape:
    arch = values.get("general.architecture")
    arch = arch if isinstance(arch, str) else None

    def number(key: str) -> int:
        value = values.get(f"{arch}.{key}")
        return value if isinstance(value, int) else 0

    heads = number("attention.head_count")
    kv_heads = number("attention.head_count_kv") or heads
    head_dim = number("attention.key_length") or (
        number("embedding_length") // heads if heads else 0
    )
    return Shape(arch, number("block_count"), kv_heads, head_dim, number("context_length"))


def probe(repo: str, file_name: str, revision: str) -> Shape | None:
    """Read the first PROBE_BYTES of the file on the hub; None when the hub does not give them
    (errors are HubError)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import hf_raise_for_status

    from chatapp.hub import http
    from chatapp.hub.errors import endpoint, hub_error

    what = f"Reading the header of {file_name}"
    http.refuse_when_offline(what)
    url = hf_hub_url(repo, file_name, revision=revision, endpoint=endpoint())
    try:
        with http.client().stream(
            "GET", url, headers=http.headers({"Range": f"bytes=0-{PROBE_BYTES - 1}"})
        ) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            data = bytearray()
            for chunk in response.iter_bytes():  # a server ignoring Range: stop early anyway
                data += chunk
                if len(data) >= PROBE_BYTES:
                    break
        return parse_shape(bytes(data[:PROBE_BYTES]))
    except Exception as exc:
        raise hub_error(exc, what) from exc
