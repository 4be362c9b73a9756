"""The ONNX graphs a model folder offers, their precision and size, and which one to open.

Optimum puts `model.onnx` at the top of the folder; onnx-community repositories put several
precisions in `onnx/` (`model.onnx`, `model_fp16.onnx`, `model_q4.onnx`, `model_quantized.onnx`,
...); older Optimum exports have `decoder_model_merged.onnx` beside `decoder_model.onnx` and
`decoder_with_past_model.onnx`. The default is the most precise one that both loops can run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.files import load_onnx_graph, resolve_inside
from chatapp.folder_format.graph import all_nodes, declares_native

GGUF = "gguf"  # the precision and file-name suffix of a native graph (model_gguf.onnx)

# Most precise first. int4 with float32 activations (q4) is more precise than with float16 (q4f16).
# "gguf": chatapp's native graph (model_gguf.onnx) on the GGUF's own blocks; it runs on the CPU
# with chatapp's library only, so it is chosen by device (model.py), not by this order.
PRECISION_ORDER = ("fp32", "fp16", "bf16", "int8", "uint8", "q4", "q4f16", "bnb4", GGUF)
# transformers.js's file-name suffixes (model_<suffix>.onnx) and what they mean.
NAME_SUFFIXES = {
    "fp32": "fp32",
    "fp16": "fp16",
    "bf16": "bf16",
    "quantized": "int8",
    "q8": "int8",
    "int8": "int8",
    "uint8": "uint8",
    "q4": "q4",
    "int4": "q4",
    "q4f16": "q4f16",
    "bnb4": "bnb4",
    GGUF: GGUF,
}
# Graph names by how a folder uses them: the plain decoder first, legacy layouts after it; a
# decoder without past inputs (Optimum's legacy decoder_model.onnx) cannot run here at all.
STEMS = ("model", "decoder_model_merged", "decoder_with_past_model", "decoder_model")
_SUFFIX = re.compile(r"^(?P<stem>.+?)_(?P<suffix>[a-z0-9]+)$")
_FLOAT_BYTES = {
    TensorProto.FLOAT: "fp32",
    TensorProto.FLOAT16: "fp16",
    TensorProto.BFLOAT16: "bf16",
}
_QUANT_4BIT_OPS = {"MatMulNBits", "GatherBlockQuantized"}
_QUANT_8BIT_OPS = {
    "MatMulInteger",
    "DynamicQuantizeMatMul",
    "QLinearMatMul",
    "MatMulIntegerToFloat",
}


@dataclass(frozen=True)
class Variant:
    """One graph in a model folder."""

    path: str  # relative to the folder, with "/" (what --onnx-file takes)
    size_bytes: int  # the .onnx file and the external data files it names
    precision: str  # from the graph's weights and types; the file name's if unreadable
    name_precision: str | None  # what the file name says, if anything

    def label(self) -> str:
        mib = self.size_bytes / 2**20
        return f"{self.path} ({self.precision}, {mib:.1f} MiB)"


def candidate_files(folder: Path) -> list[Path]:
    """Every .onnx entry at the top of the folder and in onnx/ but sub-folders. Links and
    special files count too: they are refused by name when checked (files.py), rather
    than skipped in silence."""
    found: list[Path] = []
    for sub in (folder, folder / "onnx"):
        if sub.is_dir():
            found += sorted(p for p in sub.glob("*.onnx") if p.is_symlink() or not p.is_dir())
    return found


def split_name(file_name: str) -> tuple[str, str | None]:
    """('model', 'q4') for model_q4.onnx; ('model', None) for model.onnx."""
    stem = file_name.removesuffix(".onnx")
    match = _SUFFIX.match(stem)
    if match and match.group("suffix") in NAME_SUFFIXES:
        return match.group("stem"), NAME_SUFFIXES[match.group("suffix")]
    return stem, None


def preference(folder: Path, path: Path) -> tuple[int, int, str]:
    """Sort key: most precise first (a plain name is taken as fp32), then plain layouts first."""
    stem, precision = split_name(path.name)
    rank = PRECISION_ORDER.index(precision or "fp32")
    kind = STEMS.index(stem) if stem in STEMS else len(STEMS)
    return rank, kind, path.relative_to(folder).as_posix()


def ordered_candidates(folder: Path) -> list[Path]:
    """The folder's graphs in the order they are tried when none is named."""
    return sorted(candidate_files(folder), key=lambda p: preference(folder, p))


def graph_precision(model: onnx.ModelProto) -> str | None:
    """fp32 / fp16 / bf16 / int8 / uint8 / q4 / q4f16 / bnb4 / gguf from what the graph holds."""
    graph = model.graph
    # Legacy merged decoders and chatapp's step/prompt split keep their nodes in If branches.
    ops = {n.op_type for n in all_nodes(graph)}
    float_bytes: Counter[str] = Counter()
    int8_bytes: Counter[int] = Counter()
    for init in graph.initializer:
        count = 1
        for d in init.dims:
            count *= d
        if init.data_type in _FLOAT_BYTES:
            float_bytes[_FLOAT_BYTES[init.data_type]] += count
        elif init.data_type in (TensorProto.INT8, TensorProto.UINT8):
            int8_bytes[init.data_type] += count
    io_floats = [
        _FLOAT_BYTES[v.type.tensor_type.elem_type]
        for v in (*graph.input, *graph.output)
        if v.type.tensor_type.elem_type in _FLOAT_BYTES
    ]
    activation = Counter(io_floats).most_common(1)[0][0] if io_floats else None
    floats = activation or (float_bytes.most_common(1)[0][0] if float_bytes else None)
    if declares_native(model):
        return GGUF
    if "MatMulBnb4" in ops:
        return "bnb4"
    if ops & _QUANT_4BIT_OPS:
        return "q4f16" if floats == "fp16" else "q4"
    if ops & _QUANT_8BIT_OPS and int8_bytes:
        return "uint8" if int8_bytes.most_common(1)[0][0] == TensorProto.UINT8 else "int8"
    return floats


def external_data_files(model: onnx.ModelProto, onnx_path: Path) -> list[Path]:
    """The external data files the graph names (only those inside its own folder)."""
    names: set[str] = set()
    for init in model.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            for entry in init.external_data:
                if entry.key == "location":
                    names.add(entry.value)
    base = onnx_path.parent.resolve()
    files = []
    for name in sorted(names):
        path = (base / name).resolve()
        if path.is_relative_to(base) and path.is_file():
            files.append(path)
    return files


def read_candidate(
    folder: Path, path: Path
) -> tuple[Path | None, onnx.ModelProto | None, ModelError | None]:
    """(the regular file inside the folder, its graph without external weights, why not):
    the path and file checks of files.py come first, so nothing outside is read."""
    try:
        real = resolve_inside(folder, path.relative_to(folder), folder.name)
    except ModelError as exc:
        return None, None, exc
    try:
        return real, load_onnx_graph(real), None
    except ModelError as exc:
        return real, None, exc


def describe_variant(
    folder: Path, path: Path, real: Path | None, model: onnx.ModelProto | None
) -> Variant:
    """Size and precision of one graph, from `read_candidate`'s file and proto (a refused
    file has no size: it is not looked at)."""
    size = real.stat().st_size if real is not None else 0
    _, from_name = split_name(path.name)
    relative = path.relative_to(folder).as_posix()
    if model is None or real is None:
        return Variant(relative, size, from_name or "?", from_name)
    size += sum(p.stat().st_size for p in external_data_files(model, real))
    return Variant(relative, size, graph_precision(model) or from_name or "?", from_name)


def variant_order(variant: Variant) -> tuple[int, int, str]:
    """Most precise first, then plain layouts before legacy ones (`chatapp variants` order)."""
    stem, _ = split_name(Path(variant.path).name)
    kind = STEMS.index(stem) if stem in STEMS else len(STEMS)
    rank = PRECISION_ORDER.index(variant.precision) if variant.precision in PRECISION_ORDER else 99
    return rank, kind, variant.path


def list_variants(
    folder: Path | str, before_each: Callable[[int, int, str], None] | None = None
) -> list[Variant]:
    """The folder's graphs, most precise first (reads each graph, not its weights: about half a
    second for a large one). `before_each(done, total, name)` is called before each read (for
    progress; raising from it stops the listing)."""
    folder = Path(folder).expanduser()
    files = candidate_files(folder)
    found = []
    for done, path in enumerate(files):
        if before_each is not None:
            before_each(done, len(files), path.relative_to(folder).as_posix())
        found.append(describe_variant(folder, path, *read_candidate(folder, path)[:2]))
    return sorted(found, key=variant_order)
