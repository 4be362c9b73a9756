"""Refuse weights holding NaN or infinity, streaming through the file in fixed-size chunks.

A quantized weight is `scale * code (+ min)` per block, with small integer codes: it is finite
exactly when its block's float16 scale (and min) fields are. So for the block formats listed in
`SCALE_FIELDS` only those few bytes per block are looked at; float tensors are checked value by
value; any other format is dequantized chunk by chunk with gguf-py. The file is read with plain
reads into one reused buffer (no memory map), so memory stays at one chunk whatever the model's
size, and one bad value stops the scan with the tensor's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_reader import TensorInfo

CHUNK_BYTES = 8 << 20
# Byte offsets of the float16 scale/min fields inside one block of each GGML block format
# (ggml-common.h's block_* structs). The tests check each against gguf-py's dequantization.
SCALE_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
    "IQ2_XXS": (0,),
    "IQ2_XS": (0,),
    "IQ2_S": (0,),
    "IQ3_XXS": (0,),
    "IQ3_S": (0,),
    "IQ1_S": (0,),
    "IQ4_NL": (0,),
    "IQ4_XS": (0,),
    "TQ1_0": (52,),
    "TQ2_0": (64,),
}
FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
INTEGER_TYPES = ("I8", "I16", "I32", "I64")

Progress = Callable[[float], None]


def check_finite(
    path: Path, tensors: Iterable[TensorInfo], progress: Progress | None = None
) -> None:
    """ConversionError naming the first tensor with a NaN or infinite value."""
    infos = list(tensors)
    total = sum(t.n_bytes for t in infos) or 1
    done = 0
    buffer = bytearray(CHUNK_BYTES)
    with path.open("rb", buffering=0) as fh:
        for info in infos:
            if info.qtype not in INTEGER_TYPES and not _tensor_is_finite(fh, info, buffer):
                raise ConversionError(
                    f"{path.name}: tensor '{info.name}' holds NaN or infinite values; the "
                    "model is damaged."
                )
            done += info.n_bytes
            if progress is not None:
                progress(done / total)


def _tensor_is_finite(fh: BinaryIO, info: TensorInfo, buffer: bytearray) -> bool:
    step = CHUNK_BYTES // info.block_bytes * info.block_bytes  # whole blocks (or values)
    fh.seek(info.offset)
    left = info.n_bytes
    while left:
        size = min(step, left)
        view = memoryview(buffer)[:size]
        if fh.readinto(view) != size:  # type: ignore[attr-defined]  # typeshed's BinaryIO lacks it
            raise ConversionError(f"{info.name}: the file ended while its data was read.")
        if not _chunk_is_finite(np.frombuffer(view, dtype=np.uint8), info):
            return False
        left -= size
    return True


def _chunk_is_finite(raw: np.ndarray, info: TensorInfo) -> bool:
    dtype = FLOAT_DTYPES.get(info.qtype)
    if dtype is not None:
        return bool(np.isfinite(raw.view(dtype)).all())
    if info.qtype == "BF16":
        exponent = raw.view(np.uint16) & 0x7F80
        return not bool((exponent == 0x7F80).any())
    blocks = raw.reshape(-1, info.block_bytes)
    fields = SCALE_FIELDS.get(info.qtype)
    if fields is not None:
        for at in fields:
            scale = np.ascontiguousarray(blocks[:, at : at + 2]).view(np.float16)
            if not np.isfinite(scale).all():
                return False
        return True
    return _dequantized_is_finite(blocks, info)


def _dequantized_is_finite(blocks: np.ndarray, info: TensorInfo) -> bool:
    """Formats without a simple scale field (e.g. Q8_K, IQ1_M, MXFP4): gguf-py's numbers."""
    import gguf

    qtype = gguf.GGMLQuantizationType[info.qtype]
    try:
        values = gguf.quants.dequantize(blocks.reshape(-1), qtype)
    except (NotImplementedError, ValueError):
        return True  # cannot tell here; the converter refuses formats it does not read anyway
    return bool(np.isfinite(values).all())
