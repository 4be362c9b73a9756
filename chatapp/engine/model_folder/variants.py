"""The ONNX graphs a model folder offers, for a picker and `chatapp variants`: their precision
and size, whether each can be opened and which one opens by default (the files themselves and
the order they are tried in: read.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto

from chatapp.engine.errors import FolderFileError, ModelError
from chatapp.engine.model_folder.read import (
    GGUF,
    PRECISION_ORDER,
    STEMS,
    candidate_files,
    check_configs,
    describe_graph,
    external_data_files,
    graph_candidates,
    load_onnx_graph,
    read_json_file,
    resolve_inside,
    split_name,
)
from chatapp.engine.native_kernels import NOT_BUILT, library_path, native_preferred
from chatapp.folder_format.graph import all_nodes, declares_native

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


def read_candidate(
    folder: Path, path: Path
) -> tuple[Path | None, onnx.ModelProto | None, ModelError | None]:
    """(the regular file inside the folder, its graph without external weights, why not):
    the path and file checks of read.py come first, so nothing outside is read."""
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


@dataclass(frozen=True)
class VariantStatus:
    """A graph of the folder, whether this app can open it and whether it is the default."""

    variant: Variant
    problem: str | None  # why it cannot be opened; None when it can
    default: bool


def folder_variants(folder: Path | str, on_cpu: bool = True) -> list[VariantStatus]:
    """Every graph in the folder with its size and precision, whether it can be opened and
    which one opens by default (on the CPU or a device): for a picker. Each graph is read once,
    never its weights, and only after the same checks `read_model_folder` makes."""
    folder = Path(folder).expanduser()
    genai = read_json_file(folder, "genai_config.json") or {}
    config = read_json_file(folder, "config.json") or {}
    generation = read_json_file(folder, "generation_config.json") or {}
    found: list[tuple[Variant, Path | None, ModelError | None]] = []
    for path in candidate_files(folder):
        real, proto, error = read_candidate(folder, path)
        if proto is not None and real is not None:
            try:
                op_types = frozenset(node.op_type for node in all_nodes(proto.graph))
                describe_graph(folder, real, proto.graph, op_types, config, genai, generation)
            except ModelError as exc:
                error = exc
        variant = describe_variant(folder, path, real, proto)
        if error is None and variant.precision == GGUF and library_path() is None:
            error = ModelError(NOT_BUILT)
        found.append((variant, real, error))
    errors = {real: error for _, real, error in found if real}
    default = _default_graph(folder, genai, errors, on_cpu)
    found.sort(key=lambda item: variant_order(item[0]))
    statuses = []
    for variant, real, error in found:
        problem = None if error is None else str(error)
        statuses.append(VariantStatus(variant, problem, real is not None and real == default))
    return statuses


def default_graph_name(folder: Path | str, on_cpu: bool = True) -> str | None:
    """The graph `read_model_folder` tries first without a name, relative to the folder with
    "/" (as Variant.path), from the file names alone (no graph is read); None when the folder
    cannot say."""
    folder = Path(folder).expanduser()
    try:
        genai = read_json_file(folder, "genai_config.json") or {}
        decoder_file = check_configs(None, genai)
        candidates = graph_candidates(folder, None, decoder_file, native_preferred(on_cpu))
        first = candidates[0].relative_to(folder.resolve())
    except (ModelError, OSError, IndexError, ValueError):
        return None
    return first.as_posix()


def _default_graph(
    folder: Path, genai: dict[str, Any], errors: dict[Path, ModelError | None], on_cpu: bool
) -> Path | None:
    """The graph `read_model_folder` opens without a name; None when it would refuse."""
    try:
        decoder_file = check_configs(None, genai)
        candidates = graph_candidates(folder, None, decoder_file, native_preferred(on_cpu))
    except ModelError:
        return None
    for path in candidates:
        if path not in errors or isinstance(errors[path], FolderFileError):
            return None  # not listed (genai names another folder), or the open stops there
        if errors[path] is None:
            return path
    return None
