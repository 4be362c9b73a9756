"""Open a model folder and describe it: graph file, KV tensors, layout, context, tokens."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from chatapp.engine.decoder_io import (
    KVTensor,
    ModelIO,
    decoder_names,
    decoder_section,
    kv_head_shape,
    kv_tensors,
    model_io,
    value_dims,
)
from chatapp.engine.errors import ModelError
from chatapp.engine.tensor_types import FLOAT_TYPES, NAMES
from chatapp.engine.variants import (
    Variant,
    candidate_files,
    describe_variant,
    load_graph,
    ordered_candidates,
    variant_order,
)

__all__ = ["KVLayout", "KVTensor", "ModelIO", "ModelInfo", "open_model_folder"]


class KVLayout(Enum):
    SHARED_BUFFER = "shared-buffer"  # GroupQueryAttention: past and present may be one buffer
    CONCAT = "concat"  # present = past + new, dynamic length (Optimum / onnx-community)
    STATIC_WINDOW = "static-window"  # fixed shapes: past [.., C-1, ..], present [.., C, ..]


@dataclass(frozen=True)
class ModelInfo:
    folder: Path
    onnx_path: Path
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

    @property
    def has_position_ids(self) -> bool:
        return self.io.position_ids is not None

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_heads * self.head_dim * np.dtype(self.kv_dtype).itemsize

    def describe(self) -> str:
        return (
            f"{self.name}: {self.n_layers} layers, {self.kv_heads} KV heads x {self.head_dim}, "
            f"context {self.context_length}, KV layout {self.layout.value}"
            + ("" if self.kv_dtype == np.float32 else f", {NAMES[self.kv_dtype]} KV")
        )


@dataclass(frozen=True)
class VariantStatus:
    """A graph of the folder, whether this app can open it and whether it is the default."""

    variant: Variant
    problem: str | None  # why it cannot be opened; None when it can
    default: bool


def onnx_candidates(folder: Path) -> list[Path]:
    """The decoder graphs a folder offers, in the order they are tried when none is named."""
    return ordered_candidates(folder)


def open_model_folder(folder: Path | str, onnx_file: str | Path | None = None) -> ModelInfo:
    """Describe the model in `folder`; ModelError says what is missing or unsupported.

    Without `onnx_file`: the graph genai_config.json names, else the most precise graph that
    this app can open (fp32 before fp16 before int8 / q4 ...), not the alphabetically first.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ModelError(f"The model folder {folder} does not exist.")
    genai = _read_json(folder / "genai_config.json")
    config = _read_json(folder / "config.json")
    candidates = _candidates(folder, onnx_file, genai)
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer.model").is_file():
        raise ModelError(f"{folder.name} has no tokenizer (tokenizer.json is missing).")
    if config is None and genai is None:
        raise ModelError(f"{folder.name} has neither config.json nor genai_config.json.")
    first_error: ModelError | None = None
    for onnx_path in candidates:
        try:
            return _open_graph(folder, onnx_path, config or {}, genai or {})
        except ModelError as exc:
            first_error = first_error or exc
    assert first_error is not None
    if len(candidates) > 1:
        raise ModelError(
            f"None of the {len(candidates)} ONNX graphs in {folder.name} can be run here; "
            f"the first: {first_error}"
        ) from first_error
    raise first_error


def folder_variants(folder: Path | str) -> list[VariantStatus]:
    """Every graph in the folder with its size and precision, whether it can be opened and
    which one opens by default: for a picker. Each graph is read once, never its weights."""
    folder = Path(folder).expanduser()
    genai = _read_json(folder / "genai_config.json") or {}
    config = _read_json(folder / "config.json") or {}
    found: list[tuple[Variant, str | None]] = []
    for path in candidate_files(folder):
        proto = load_graph(path)
        problem = None if proto else f"{path.name} is not a readable ONNX model."
        if proto is not None:
            try:
                _describe(folder, path, proto.graph, config, genai)
            except ModelError as exc:
                problem = str(exc)
        found.append((describe_variant(folder, path, proto), problem))
    runnable = [v.path for v, problem in found if problem is None]
    named = decoder_section(genai).get("filename")
    preferred = [p.relative_to(folder).as_posix() for p in ordered_candidates(folder)]
    default = named if named in runnable else next((p for p in preferred if p in runnable), None)
    found.sort(key=lambda item: variant_order(item[0]))
    return [VariantStatus(v, problem, v.path == default) for v, problem in found]


def _candidates(
    folder: Path, onnx_file: str | Path | None, genai: dict[str, Any] | None
) -> list[Path]:
    if onnx_file is not None:
        path = folder / onnx_file
        if not path.is_file():
            raise ModelError(f"{folder.name} has no {onnx_file}.")
        return [path]
    if genai:
        name = decoder_section(genai).get("filename")
        if isinstance(name, str) and name and (folder / name).is_file():
            return [folder / name]
    candidates = ordered_candidates(folder)
    if not candidates:
        raise ModelError(f"{folder.name} holds no ONNX model (model.onnx or onnx/model*.onnx).")
    return candidates


def _open_graph(
    folder: Path, onnx_path: Path, config: dict[str, Any], genai: dict[str, Any]
) -> ModelInfo:
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf and onnx raise many kinds for a damaged file
        raise ModelError(f"{onnx_path.name} is not a readable ONNX model ({exc}).") from exc
    return _describe(folder, onnx_path, proto.graph, config, genai)


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path.name} in {path.parent.name} is not valid JSON ({exc}).") from exc
    return data if isinstance(data, dict) else None


def _float_type(value: onnx.ValueInfoProto, what: str) -> np.dtype:
    elem = value.type.tensor_type.elem_type
    dtype = FLOAT_TYPES.get(elem)
    if dtype is None:
        name = onnx.TensorProto.DataType.Name(elem) if elem else "unknown"
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
    io = model_io(file_name, names, set(inputs), set(outputs), kv)
    n_layers = max(t.layer for t in kv) + 1
    first = inputs[kv[0].past_name]
    past_dims, present_dims = value_dims(first), value_dims(outputs[kv[0].present_name])
    if len(past_dims) != 4:
        raise ModelError(
            f"{kv[0].past_name} has rank {len(past_dims)}; "
            "[batch, heads, length, head_dim] was expected."
        )
    kv_heads, head_dim = kv_head_shape(file_name, kv[0].past_name, past_dims, config, genai)
    kv_dtype = _float_type(first, "KV")
    logits_dtype = _float_type(outputs[io.logits], "logits")
    layout, window = _layout(graph, past_dims, present_dims, value_dims(inputs[io.input_ids]))
    logits_dims = value_dims(outputs[io.logits])
    vocab = logits_dims[-1] if isinstance(logits_dims[-1], int) else _vocab(config, genai)
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
        eos_token_ids=_eos_ids(folder, config, genai),
        input_names=tuple(inputs),
        window=window,
        io=io,
        logits_dtype=logits_dtype,
    )


def _vocab(config: dict[str, Any], genai: dict[str, Any]) -> int:
    model = genai.get("model") if isinstance(genai.get("model"), dict) else {}
    for value in (config.get("vocab_size"), model.get("vocab_size")):
        if isinstance(value, int) and value > 0:
            return value
    raise ModelError("The logits' vocabulary size is neither in the graph nor in the configs.")


def _layout(
    graph: onnx.GraphProto,
    past: list[int | str],
    present: list[int | str],
    ids: list[int | str],
) -> tuple[KVLayout, int | None]:
    if any(n.op_type == "GroupQueryAttention" for n in graph.node):
        return KVLayout.SHARED_BUFFER, None
    if isinstance(past[2], int) and isinstance(present[2], int):
        window = ids[1] if isinstance(ids[1], int) else None
        if window is None or present[2] - past[2] != window:
            raise ModelError(
                f"Fixed-shape KV cache with past length {past[2]} and present length {present[2]} "
                f"for {ids[1]} input tokens is not a layout this app knows."
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
        return int(present[2])  # the fixed number of slots
    for value in (
        genai.get("model", {}).get("context_length"),
        config.get("max_position_embeddings"),
        config.get("n_positions"),
    ):
        if value:
            return int(value)
    return 2048


def _model_name(folder: Path, config: dict[str, Any]) -> str:
    name = config.get("_name_or_path") or ""
    return str(name).rstrip("/").split("/")[-1] or folder.name


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]


def _eos_ids(folder: Path, config: dict[str, Any], genai: dict[str, Any]) -> tuple[int, ...]:
    gen = _read_json(folder / "generation_config.json") or {}
    ids: list[int] = []
    for value in (
        gen.get("eos_token_id"),
        config.get("eos_token_id"),
        genai.get("model", {}).get("eos_token_id"),
    ):
        for i in _as_ids(value):
            if i not in ids:
                ids.append(i)
    return tuple(ids)
