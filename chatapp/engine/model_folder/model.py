"""Open a model folder and describe it: graph file, KV tensors, layout, context, tokens."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx

from chatapp.engine.errors import FolderFileError, ModelError
from chatapp.engine.model_folder.config_values import (
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_VOCAB,
    check_head_counts,
    section,
    token_ids,
    whole_number,
)
from chatapp.engine.model_folder.decoder_io import (
    KVTensor,
    ModelIO,
    decoder_names,
    decoder_section,
    kv_head_shape,
    kv_tensors,
    model_io,
    value_dims,
)
from chatapp.engine.model_folder.files import (
    check_tokenizer_files,
    load_onnx_graph,
    read_json_file,
    resolve_inside,
)
from chatapp.engine.model_folder.variants import (
    GGUF,
    Variant,
    candidate_files,
    describe_variant,
    ordered_candidates,
    read_candidate,
    split_name,
    variant_order,
)
from chatapp.engine.native_kernels import NOT_BUILT, library_path, native_preferred
from chatapp.engine.tensor_types import FLOAT_TYPES, NAMES
from chatapp.folder_format.graph import all_nodes

__all__ = [
    "FolderRead",
    "KVLayout",
    "KVTensor",
    "ModelIO",
    "ModelInfo",
    "open_model_folder",
    "read_model_folder",
]


class KVLayout(Enum):
    SHARED_BUFFER = "shared-buffer"  # GroupQueryAttention: past and present may be one buffer
    CONCAT = "concat"  # present = past + new, dynamic length (Optimum / onnx-community)
    STATIC_WINDOW = "static-window"  # fixed shapes: past [.., C-1, ..], present [.., C, ..]


@dataclass(frozen=True)
class ModelInfo:
    folder: Path
    onnx_path: Path  # links resolved: the regular file inside the folder that is run
    name: str
    layout: KVLayout
    kv: tuple[KVTensor, ...]
    n_layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: np.dtype  # float32, float16 or bfloat16 (ml_dtypes): the KV is kept in it
    vocab_size: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    input_names: tuple[str, ...]
    io: ModelIO  # the input / output names the loops use
    logits_dtype: np.dtype  # what the graph returns; sampled as float32
    window: int | None = None  # static-window models: tokens per run
    op_types: frozenset[str] = frozenset()  # every node's op type, subgraphs included

    @property
    def has_position_ids(self) -> bool:
        return self.io.position_ids is not None

    @property
    def onnx_file(self) -> str:
        """The graph's path inside the folder, with "/" (what --onnx-file takes)."""
        return self.onnx_path.relative_to(self.folder.resolve()).as_posix()

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_heads * self.head_dim * np.dtype(self.kv_dtype).itemsize

    def describe(self, allocated: int | None = None) -> str:
        """One line; `allocated`: the context an engine set aside, said beside the model's own
        when smaller (the window's "/ 8192" then matches the status bar's words)."""
        context = (
            f"context {allocated} tokens (the model allows {self.context_length})"
            if allocated and allocated < self.context_length
            else f"context {self.context_length} tokens"
        )
        return (
            f"{self.name}: {self.n_layers} layers, {self.kv_heads} KV heads x {self.head_dim}, "
            f"{context}, KV layout {self.layout.value}"
            + ("" if self.kv_dtype == np.float32 else f", {NAMES[self.kv_dtype]} KV")
        )


class FolderRead(NamedTuple):
    """What `read_model_folder` read: the description, and the files it was read from."""

    info: ModelInfo
    graph: onnx.ModelProto  # the graph chosen, without its weights
    config: dict[str, Any]  # config.json ({} without one)
    generation: dict[str, Any]  # generation_config.json ({} without one)


@dataclass(frozen=True)
class VariantStatus:
    """A graph of the folder, whether this app can open it and whether it is the default."""

    variant: Variant
    problem: str | None  # why it cannot be opened; None when it can
    default: bool


def onnx_candidates(folder: Path) -> list[Path]:
    """The decoder graphs a folder offers, in the order they are tried when none is named."""
    return ordered_candidates(folder)


def open_model_folder(
    folder: Path | str, onnx_file: str | Path | None = None, on_cpu: bool = True
) -> ModelInfo:
    """Describe the model in `folder` (as `read_model_folder`, without the graph)."""
    return read_model_folder(folder, onnx_file, on_cpu).info


def read_model_folder(
    folder: Path | str, onnx_file: str | Path | None = None, on_cpu: bool = True
) -> FolderRead:
    """Describe the model in `folder`, with the graph and configs read for it (the graph
    without its weights: the memory estimate reads its initializers' sizes from it);
    ModelError says what is missing or unsupported.

    Without `onnx_file`: the graph genai_config.json names, else the most precise graph that
    this app can open (fp32 before fp16 before int8 / q4 ...), not the alphabetically first;
    and a native graph beside it (model_gguf.onnx, chatapp's GGUF kernels) before either when
    the session runs `on_cpu` with the library usable, never otherwise (see `by_device`).
    Every file it names is opened only inside the folder (see model_folder/files.py): a graph or an
    external data file that is missing, a link out or not a regular file refuses the folder
    rather than being skipped for the next graph.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        if folder.exists():
            raise ModelError(
                f"{folder} is a file, not a model folder (a .gguf file is converted first: "
                "File > Open GGUF, or `chatapp convert`)."
            )
        raise ModelError(f"The model folder {folder} does not exist.")
    genai = read_json_file(folder, "genai_config.json")
    config = read_json_file(folder, "config.json")
    generation = read_json_file(folder, "generation_config.json") or {}
    if config:
        check_head_counts(config, "config.json")
    candidates = _candidates(folder, onnx_file, genai)
    if onnx_file is None:
        candidates = by_device(folder, candidates, native_preferred(on_cpu))
    check_tokenizer_files(folder)
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer.model").is_file():
        raise ModelError(f"{folder.name} has no tokenizer (tokenizer.json is missing).")
    if config is None and genai is None:
        raise ModelError(f"{folder.name} has neither config.json nor genai_config.json.")
    first_error: ModelError | None = None
    for onnx_path in candidates:
        try:
            proto = load_onnx_graph(onnx_path)
            info = _describe(folder, onnx_path, proto.graph, config or {}, genai or {}, generation)
            return FolderRead(info, proto, config or {}, generation)
        except FolderFileError:
            raise
        except ModelError as exc:
            first_error = first_error or exc
    assert first_error is not None
    if len(candidates) > 1:
        raise ModelError(
            f"None of the {len(candidates)} ONNX graphs in {folder.name} can be run here; "
            f"the first: {first_error}"
        ) from first_error
    raise first_error


def folder_variants(folder: Path | str, on_cpu: bool = True) -> list[VariantStatus]:
    """Every graph in the folder with its size and precision, whether it can be opened and
    which one opens by default (on the CPU or a device): for a picker. Each graph is read once,
    never its weights, and only after the same checks `open_model_folder` makes."""
    folder = Path(folder).expanduser()
    genai = read_json_file(folder, "genai_config.json") or {}
    config = read_json_file(folder, "config.json") or {}
    generation = read_json_file(folder, "generation_config.json") or {}
    found: list[tuple[Variant, Path | None, ModelError | None]] = []
    for path in candidate_files(folder):
        real, proto, error = read_candidate(folder, path)
        if proto is not None and real is not None:
            try:
                _describe(folder, real, proto.graph, config, genai, generation)
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
    """The graph `open_model_folder` tries first without a name, relative to the folder with
    "/" (as Variant.path), from the file names alone (no graph is read); None when the folder
    cannot say."""
    folder = Path(folder).expanduser()
    try:
        genai = read_json_file(folder, "genai_config.json") or {}
        candidates = by_device(folder, _candidates(folder, None, genai), native_preferred(on_cpu))
        first = candidates[0].relative_to(folder.resolve())
    except (ModelError, OSError, IndexError, ValueError):
        return None
    return first.as_posix()


def _default_graph(
    folder: Path, genai: dict[str, Any], errors: dict[Path, ModelError | None], on_cpu: bool
) -> Path | None:
    """The graph `open_model_folder` opens without a name; None when it would refuse."""
    try:
        candidates = by_device(folder, _candidates(folder, None, genai), native_preferred(on_cpu))
    except ModelError:
        return None
    for path in candidates:
        if path not in errors or isinstance(errors[path], FolderFileError):
            return None  # not listed (genai names another folder), or the open stops there
        if errors[path] is None:
            return path
    return None


def _candidates(
    folder: Path, onnx_file: str | Path | None, genai: dict[str, Any] | None
) -> list[Path]:
    """The graphs to try, in order: each a regular file inside the folder, links resolved.
    All are checked before any is read, so a link out among them refuses the folder."""
    if onnx_file is not None:
        return [resolve_inside(folder, onnx_file, "--onnx-file")]
    name = decoder_section(genai or {}).get("filename")
    if name is not None:
        # Named means meant: a missing or misplaced file is an error, not another graph instead.
        if not isinstance(name, str):
            raise ModelError(f"genai_config.json's decoder filename is {name!r}, not a name.")
        return [resolve_inside(folder, name, "genai_config.json's decoder filename")]
    found = ordered_candidates(folder)
    if not found:
        raise ModelError(f"{folder.name} holds no ONNX model (model.onnx or onnx/model*.onnx).")
    resolved: list[Path] = []
    for path in found:
        real = resolve_inside(folder, path.relative_to(folder), folder.name)
        if real not in resolved:  # a link to another graph of the folder is tried once
            resolved.append(real)
    return resolved


def by_device(folder: Path, candidates: list[Path], prefer_native: bool) -> list[Path]:
    """The candidates with the folder's native graphs (model_gguf.onnx: `chatapp convert
    --graph both` writes one beside the stock model.onnx that genai_config.json names) first
    where they are preferred (the CPU with the library usable), else left out; a folder with
    no other graph keeps its own, so that the session says what to do (native_kernels.py)."""
    native = []
    for path in candidate_files(folder):
        if split_name(path.name)[1] == GGUF:
            real = resolve_inside(folder, path.relative_to(folder), folder.name)
            if real not in native:
                native.append(real)
    others = [p for p in candidates if p not in native]
    if prefer_native:
        return native + others
    return others or candidates


def _float_type(value: onnx.ValueInfoProto, what: str) -> np.dtype:
    elem = value.type.tensor_type.elem_type
    dtype = FLOAT_TYPES.get(elem)
    if dtype is None:
        try:
            name = onnx.TensorProto.DataType.Name(elem) if elem else "unknown"
        except ValueError:  # a number no ONNX type has
            name = str(elem)
        raise ModelError(
            f"{value.name} has element type {name}; float32, float16 or bfloat16 {what} "
            "was expected."
        )
    return dtype


def _describe(
    folder: Path,
    onnx_path: Path,
    graph: onnx.GraphProto,
    config: dict[str, Any],
    genai: dict[str, Any],
    generation: dict[str, Any],
) -> ModelInfo:
    initializers = {i.name for i in graph.initializer}  # old IR versions list them as inputs
    inputs = {i.name: i for i in graph.input if i.name not in initializers}
    outputs = {o.name: o for o in graph.output}
    names = decoder_names(genai)
    file_name = onnx_path.name
    try:
        kv = kv_tensors(file_name, names, set(inputs), set(outputs))
    except ModelError as exc:
        if file_name.startswith("decoder_model."):  # Optimum's legacy decoder without past
            raise ModelError(
                f"{exc} Open decoder_model_merged.onnx or decoder_with_past_model.onnx instead."
            ) from exc
        raise
    overridable = {i.name for i in graph.input if i.name in initializers}
    io = model_io(file_name, names, set(inputs), set(outputs), kv, overridable)
    n_layers = max(t.layer for t in kv) + 1
    if n_layers > MAX_LAYERS:
        raise ModelError(f"{file_name} has {n_layers} layers; at most {MAX_LAYERS} are supported.")
    first = inputs[kv[0].past_name]
    past_dims, present_dims = value_dims(first), value_dims(outputs[kv[0].present_name])
    for value_name, dims in ((kv[0].past_name, past_dims), (kv[0].present_name, present_dims)):
        if len(dims) != 4:
            raise ModelError(
                f"{value_name} has rank {len(dims)}; [batch, heads, length, head_dim] was expected."
            )
    kv_heads, head_dim = kv_head_shape(file_name, kv[0].past_name, past_dims, config, genai)
    whole_number(kv_heads, f"{file_name}: the KV head count", 1, MAX_HEADS)
    whole_number(head_dim, f"{file_name}: the head size", 1, MAX_HEAD_DIM)
    kv_dtype = _float_type(first, "KV")
    logits_dtype = _float_type(outputs[io.logits], "logits")
    layout, window = _layout(graph, past_dims, present_dims, value_dims(inputs[io.input_ids]))
    vocab = _vocab(file_name, value_dims(outputs[io.logits]), config, genai)
    context = _context_length(config, genai, present_dims, layout)
    return ModelInfo(
        folder=folder,
        onnx_path=onnx_path,
        name=_model_name(folder, config),
        layout=layout,
        kv=tuple(kv),
        n_layers=n_layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_dtype=kv_dtype,
        vocab_size=vocab,
        context_length=context,
        eos_token_ids=_eos_ids(generation, config, genai, vocab),
        input_names=tuple(inputs),
        window=window,
        io=io,
        logits_dtype=logits_dtype,
        op_types=frozenset(node.op_type for node in all_nodes(graph)),
    )


def _vocab(
    file_name: str, logits: list[int | str], config: dict[str, Any], genai: dict[str, Any]
) -> int:
    if not logits:
        raise ModelError(f"{file_name}: the logits have no shape.")
    if isinstance(logits[-1], int):
        return whole_number(logits[-1], f"{file_name}: the vocabulary size", 1, MAX_VOCAB)
    for where, value in (
        ("config.json's vocab_size", config.get("vocab_size")),
        ("genai_config.json's model.vocab_size", _genai_model(genai).get("vocab_size")),
    ):
        if value is not None:
            return whole_number(value, f"{file_name}: the vocabulary size ({where})", 1, MAX_VOCAB)
    raise ModelError("The logits' vocabulary size is neither in the graph nor in the configs.")


def _layout(
    graph: onnx.GraphProto,
    past: list[int | str],
    present: list[int | str],
    ids: list[int | str],
) -> tuple[KVLayout, int | None]:
    if any(n.op_type == "GroupQueryAttention" for n in all_nodes(graph)):
        return KVLayout.SHARED_BUFFER, None
    if isinstance(past[2], int) and isinstance(present[2], int):
        window = ids[1] if len(ids) > 1 and isinstance(ids[1], int) else None
        if window is None or present[2] - past[2] != window or not 0 < window <= present[2]:
            raise ModelError(
                f"Fixed-shape KV cache with past length {past[2]} and present length {present[2]} "
                f"for {ids[1] if len(ids) > 1 else '?'} input tokens is not a layout this app "
                "knows."
            )
        return KVLayout.STATIC_WINDOW, window
    if isinstance(past[2], str) and isinstance(present[2], str):
        return KVLayout.CONCAT, None
    raise ModelError(
        f"KV cache shapes past {past} / present {present} are not a layout this app knows."
    )


def _context_length(
    config: dict[str, Any], genai: dict[str, Any], present: list[int | str], layout: KVLayout
) -> int:
    if layout is KVLayout.STATIC_WINDOW:
        return whole_number(present[2], "the KV cache length of the graph")  # the fixed slots
    for where, value in (
        ("genai_config.json's model.context_length", _genai_model(genai).get("context_length")),
        ("config.json's max_position_embeddings", config.get("max_position_embeddings")),
        ("config.json's n_positions", config.get("n_positions")),
    ):
        if value is not None:
            return whole_number(value, where)
    return 2048


def _genai_model(genai: dict[str, Any]) -> dict[str, Any]:
    return section(genai, "model", "genai_config.json")


def _model_name(folder: Path, config: dict[str, Any]) -> str:
    name = config.get("_name_or_path") or ""
    return str(name).rstrip("/").split("/")[-1] or folder.name


def _eos_ids(
    gen: dict[str, Any], config: dict[str, Any], genai: dict[str, Any], vocab: int
) -> tuple[int, ...]:
    ids: list[int] = []
    for where, value in (
        ("generation_config.json's eos_token_id", gen.get("eos_token_id")),
        ("config.json's eos_token_id", config.get("eos_token_id")),
        ("genai_config.json's model.eos_token_id", _genai_model(genai).get("eos_token_id")),
    ):
        for i in token_ids(value, where, vocab):
            if i not in ids:
                ids.append(i)
    return tuple(ids)
