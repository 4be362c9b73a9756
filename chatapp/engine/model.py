"""Open a model folder and describe it: graph file, KV tensors, layout, context, tokens."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from chatapp.engine.errors import ModelError

ONNX_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}
_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


class KVLayout(Enum):
    SHARED_BUFFER = "shared-buffer"  # GroupQueryAttention: past and present may be one buffer
    CONCAT = "concat"  # present = past + new, dynamic length (Optimum / onnx-community)
    STATIC_WINDOW = "static-window"  # fixed shapes: past [.., C-1, ..], present [.., C, ..]


@dataclass(frozen=True)
class KVTensor:
    layer: int
    kind: str  # "key" | "value"
    past_name: str
    present_name: str


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
    kv_dtype: type
    vocab_size: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    input_names: tuple[str, ...]
    window: int | None = None  # static-window models: tokens per run

    @property
    def has_position_ids(self) -> bool:
        return "position_ids" in self.input_names

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_heads * self.head_dim * np.dtype(self.kv_dtype).itemsize

    def describe(self) -> str:
        return (
            f"{self.name}: {self.n_layers} layers, {self.kv_heads} KV heads x {self.head_dim}, "
            f"context {self.context_length}, KV layout {self.layout.value}"
        )


def onnx_candidates(folder: Path) -> list[Path]:
    """The decoder graphs a folder offers: model.onnx, or onnx/model*.onnx (Optimum)."""
    found = [folder / "model.onnx"] if (folder / "model.onnx").is_file() else []
    sub = folder / "onnx"
    if sub.is_dir():
        found += sorted(p for p in sub.glob("*.onnx") if p.name.startswith("model"))
    return found


def open_model_folder(folder: Path | str, onnx_file: str | Path | None = None) -> ModelInfo:
    """Describe the model in `folder`; ModelError says what is missing or unsupported."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ModelError(f"The model folder {folder} does not exist.")
    genai = _read_json(folder / "genai_config.json")
    config = _read_json(folder / "config.json")
    onnx_path = _pick_onnx(folder, onnx_file, genai)
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer.model").is_file():
        raise ModelError(f"{folder.name} has no tokenizer (tokenizer.json is missing).")
    if config is None and genai is None:
        raise ModelError(f"{folder.name} has neither config.json nor genai_config.json.")
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:
        raise ModelError(f"{onnx_path.name} is not a readable ONNX model ({exc}).") from exc
    return _describe(folder, onnx_path, proto.graph, config or {}, genai or {})


def _pick_onnx(folder: Path, onnx_file: str | Path | None, genai: dict[str, Any] | None) -> Path:
    if onnx_file is not None:
        path = folder / onnx_file
        if not path.is_file():
            raise ModelError(f"{folder.name} has no {onnx_file}.")
        return path
    if genai:
        name = genai.get("model", {}).get("decoder", {}).get("filename")
        if name and (folder / name).is_file():
            return folder / name
    candidates = onnx_candidates(folder)
    if not candidates:
        raise ModelError(f"{folder.name} holds no ONNX model (model.onnx or onnx/model*.onnx).")
    # Optimum folders often carry several precisions; plain model.onnx is the full-precision one.
    preferred = [p for p in candidates if p.name == "model.onnx"]
    return (preferred or candidates)[0]


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path.name} in {path.parent.name} is not valid JSON ({exc}).") from exc
    return data if isinstance(data, dict) else None


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    dims: list[int | str] = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else d.dim_param or "?")
    return dims


def _describe(
    folder: Path,
    onnx_path: Path,
    graph: onnx.GraphProto,
    config: dict[str, Any],
    genai: dict[str, Any],
) -> ModelInfo:
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    for needed in ("input_ids", "attention_mask"):
        if needed not in inputs:
            raise ModelError(
                f"{onnx_path.name} has no '{needed}' input; it is not a decoder with a KV cache."
            )
    if "logits" not in outputs:
        raise ModelError(f"{onnx_path.name} has no 'logits' output.")
    kv: list[KVTensor] = []
    for name in inputs:
        match = _PAST.match(name)
        if match:
            layer, kind = int(match.group(1)), match.group(2)
            present = f"present.{layer}.{kind}"
            if present not in outputs:
                raise ModelError(f"{onnx_path.name} has the input {name} but no output {present}.")
            kv.append(KVTensor(layer, kind, name, present))
    if not kv:
        raise ModelError(
            f"{onnx_path.name} has no past_key_values.* inputs: a model without a KV cache "
            "cannot be run by this app."
        )
    kv.sort(key=lambda t: (t.layer, t.kind != "key"))
    n_layers = max(t.layer for t in kv) + 1
    first = inputs[kv[0].past_name]
    past_dims, present_dims = _dims(first), _dims(outputs[kv[0].present_name])
    if len(past_dims) != 4:
        raise ModelError(
            f"{kv[0].past_name} has rank {len(past_dims)}; "
            "[batch, heads, length, head_dim] was expected."
        )
    kv_heads, head_dim = past_dims[1], past_dims[3]
    if not isinstance(kv_heads, int) or not isinstance(head_dim, int):
        raise ModelError(f"{kv[0].past_name} does not state its head count and size.")
    elem = first.type.tensor_type.elem_type
    kv_dtype = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16}.get(elem)
    if kv_dtype is None:
        raise ModelError(
            f"{kv[0].past_name} has element type {elem}; float32 or float16 KV was expected."
        )
    layout, window = _layout(graph, past_dims, present_dims, _dims(inputs["input_ids"]))
    logits_dims = _dims(outputs["logits"])
    vocab = (
        logits_dims[-1] if isinstance(logits_dims[-1], int) else int(config.get("vocab_size", 0))
    )
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
    )


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
