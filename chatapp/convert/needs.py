"""What a conversion will take, from the GGUF header alone: the folder's size on disk and the
converter's peak memory, checked against free disk and available memory before any work.

The sizes follow what the converter writes per weight of each GGUF type (weights.py,
quant_formats.py): 4-bit cells plus a float32 scale (and minimum) per 32 weights, 8-bit cells
for the 5-, 6- and 8-bit formats, float32 for float tensors, and the output projection as a
float32 matrix when its blocks cannot take the int8 levels (16-wide blocks: Q6_K, Q2_K, Q3_K).
A native graph (`--graph native`) holds the GGUF's blocks themselves: about the GGUF's size; a
folder with both graphs the sum. The estimate is checked against real folders in
tests/convert/test_needs.py and scripts/model_sizes.py; it errs a few percent high.

Memory: the converter streams (external_data.py), so its peak is a fixed part (the interpreter,
onnx, the tokenizer: ~160 MB measured), the decoded weights of about one layer that stay alive
while the next is read (~3 bytes per weight of a layer), and what the largest single tensor
takes while it is converted: a float output projection is decoded, then transposed (~9 bytes
per weight); a layer's largest fused matrix pair takes ~5 bytes per weight. Measured on the 1B
shape (1.25 GB) and the 8B shape (2.63 GB): the formula gives 1.24 and 2.67 GB before its margin.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_blocks import NATIVE_FORMATS
from chatapp.convert.preflight import Header
from chatapp.system_memory import available_memory

# Bytes the converter writes per weight, by GGUF type (cells + scales + minimums + zero points).
BYTES_PER_WEIGHT = {
    "F32": 4.0,
    "F16": 4.0,
    "BF16": 4.0,
    "Q4_0": 0.625,
    "Q4_1": 0.766,
    "Q8_0": 1.125,
    "Q5_0": 1.125,
    "Q5_1": 1.281,
    "Q2_K": 1.0,
    "Q3_K": 0.75,
    "Q4_K": 0.766,
    "Q5_K": 1.281,
    "Q6_K": 1.25,
    "IQ4_NL": 1.125,
    "IQ4_XS": 1.125,
}
# Output projections of these types become a float32 MatMul (no int8 levels for their blocks).
FLOAT_HEAD_TYPES = ("F32", "F16", "BF16", "Q6_K", "Q2_K", "Q3_K")
FIXED_MEMORY = 200_000_000  # the interpreter, numpy, onnx and the tokenizer's libraries
LAYER_CARRY_BYTES = 3.0  # per weight of the largest layer
FLOAT_HEAD_BYTES = 9.0  # per weight of a float output projection while it is made
PAIR_BYTES = 5.0  # per weight of a layer's largest fused matrix pair while it is converted
QUANTIZED_HEAD_BYTES = 5.0  # per weight of an output projection that stays quantized
DISK_MARGIN = 1.05
MEMORY_MARGIN = 1.1
GB = 1e9


@dataclass(frozen=True)
class Needs:
    disk: int  # bytes of the finished folder
    memory: int  # the converter's peak resident memory, bytes

    def describe(self) -> str:
        return f"writes about {gb(self.disk)} and needs about {gb(self.memory)} of memory"


def gb(n: int) -> str:
    return f"{n / GB:.1f} GB" if n >= 0.095 * GB else f"{max(1, round(n / 1e6))} MB"


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def _type_name(type_id: int) -> str:
    from chatapp.convert.preflight import type_name

    return type_name(type_id)


def estimate(
    header: Header, int8_head: bool = False, graphs: tuple[tuple[str, bool], ...] = ()
) -> Needs:
    """The folder's size and the peak memory of converting the file `header` describes into
    `graphs` ((file, native) pairs, converter.graphs_to_write; none: the stock graph alone).
    Graphs are written one after the other, so their sizes add and the peak is the larger."""
    stock = _stock_estimate(header, int8_head)
    if not graphs:
        return stock
    parts = [_native_estimate(header) if native else stock for _, native in graphs]
    shared = _tokenizer_files(header)  # written once
    disk = sum(p.disk for p in parts) - (len(parts) - 1) * int(shared * DISK_MARGIN)
    return Needs(disk=disk, memory=max(p.memory for p in parts))


def _native_estimate(header: Header) -> Needs:
    """A native graph holds the GGUF's own bytes (its blocks unchanged, float tensors as float32
    where they are not matrices the kernels take), and converting it decodes no matrix: the
    fixed part, the bytes of a layer kept while the next is read and the largest tensor."""
    types = {t.name: _type_name(t.type_id) for t in header.tensors}
    disk = 0.0
    largest = 0.0
    per_layer: dict[str, float] = {}
    for t in header.tensors:
        n = _elements(t.shape)
        kind = types[t.name]
        values, size = NATIVE_FORMATS.get(kind, (0, 0))  # the GGUF's blocks as they are
        per_weight = size / values if values else BYTES_PER_WEIGHT.get(kind, 4.0)
        disk += n * per_weight
        largest = max(largest, n * per_weight)
        if t.name.startswith("blk."):
            layer = t.name.split(".")[1]
            per_layer[layer] = per_layer.get(layer, 0.0) + n * per_weight
    disk += _tokenizer_files(header)
    memory = FIXED_MEMORY + 2 * max(per_layer.values(), default=0.0) + 2 * largest
    return Needs(disk=int(disk * DISK_MARGIN), memory=int(memory * MEMORY_MARGIN))


def _stock_estimate(header: Header, int8_head: bool) -> Needs:
    """The stock graph's folder and conversion peak."""
    types = {t.name: _type_name(t.type_id) for t in header.tensors}
    shapes = {t.name: t.shape for t in header.tensors}
    tied = "output.weight" not in shapes
    head_name = "token_embd.weight" if tied else "output.weight"
    disk = 0.0
    largest_pair = 0  # the weights of the biggest fused matrix pair (gate+up) of a layer
    per_layer: dict[str, int] = {}
    for t in header.tensors:
        n = _elements(t.shape)
        if t.name.startswith("blk.") and len(t.shape) == 2:
            largest_pair = max(largest_pair, 2 * n)
            layer = t.name.split(".")[1]
            per_layer[layer] = per_layer.get(layer, 0) + n
        if t.name == "output.weight":
            continue  # the output projection is counted below
        per_weight = BYTES_PER_WEIGHT.get(types[t.name], 4.0)
        if t.name == "token_embd.weight" and per_weight == 4.0 and n > 64 << 20:
            per_weight = 2.0  # a large float table is stored as float16 (quant_embedding.py)
        disk += int(n * per_weight)
    head_elements = _elements(shapes.get(head_name, (0,)))
    float_head = types.get(head_name, "F32") in FLOAT_HEAD_TYPES and not int8_head
    if float_head:
        disk += 4 * head_elements
        head_memory = FLOAT_HEAD_BYTES * head_elements
    else:
        disk += int(head_elements * BYTES_PER_WEIGHT.get(types.get(head_name, "Q8_0"), 1.25))
        head_memory = QUANTIZED_HEAD_BYTES * head_elements
    disk += _tokenizer_files(header)
    carry = LAYER_CARRY_BYTES * max(per_layer.values(), default=0)
    memory = FIXED_MEMORY + carry + max(head_memory, PAIR_BYTES * largest_pair)
    return Needs(disk=int(disk * DISK_MARGIN), memory=int(memory * MEMORY_MARGIN))


def _tokenizer_files(header: Header) -> int:
    """Tokenizer files and configuration: about twice the header (mostly the vocabulary), plus
    RoPE tables and small initializers."""
    return 2 * header.data_start + (16 << 20)


def free_disk(folder: Path) -> int:
    return shutil.disk_usage(folder).free


@dataclass(frozen=True)
class Preflight:
    """The estimate beside what the machine has, as said before a conversion."""

    needs: Needs
    free_disk: int
    available_memory: int | None  # None where the system does not say (not Linux)

    def line(self, name: str) -> str:
        memory = (
            f" ({gb(self.available_memory)} available)" if self.available_memory is not None else ""
        )
        return (
            f"{name}: the model folder takes about {gb(self.needs.disk)} of disk "
            f"({gb(self.free_disk)} free); converting needs about {gb(self.needs.memory)} "
            f"of memory{memory}."
        )


def check(needs: Needs, src: Path, out_parent: Path) -> Preflight:
    """Refuse, in one sentence, a conversion the disk or the memory cannot hold. (A folder
    that --force replaces stays until the new one is complete: it is not counted as free.)"""
    free = free_disk(out_parent)
    if needs.disk > free:
        raise ConversionError(
            f"Converting {src.name} needs {gb(needs.disk)} of disk, {gb(free)} are free in "
            f"{out_parent}; free some space or choose another folder."
        )
    available = available_memory()
    if available is not None and needs.memory > available:
        raise ConversionError(
            f"Converting {src.name} needs about {gb(needs.memory)} of memory, "
            f"{gb(available)} are available; close other programs and try again."
        )
    return Preflight(needs, free, available)
