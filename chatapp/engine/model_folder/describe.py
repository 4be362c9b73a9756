"""A decoder graph and its folder's configs described: the graph's inputs and outputs, its KV
tensors and layout, its vocabulary, context and end-of-sequence tokens (a ModelInfo). Pure:
what it is given was read already (model_description.read_model_folder); nothing here opens a
file.

Values read from the JSON and the graph are checked: one-line errors naming the file and the
key instead of a ValueError from `int("abc")` or a KV cache sized by `-5`. Names follow Hugging
Face's (`input_ids`, `past_key_values.%d.key`, `present.%d.key`, `logits`) unless the folder's
genai_config.json names them otherwise (model.decoder.inputs / outputs). onnxruntime-genai's
builder leaves the KV head size symbolic (`kv_cache_dim`), so the head count and size may come
from genai_config.json or config.json instead of the graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.model import KVLayout, KVTensor, ModelInfo, ModelIO
from chatapp.engine.tensor_types import FLOAT_TYPES
from chatapp.folder_format.graph import DECODE_ATTENTION

MAX_CONTEXT = 1 << 24
MAX_VOCAB = 1 << 24
MAX_LAYERS = 1024
MAX_HEADS = 4096
MAX_HEAD_DIM = 4096


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def whole_number(value: Any, where: str, low: int = 1, high: int = MAX_CONTEXT) -> int:
    """`value` as an int in [low, high]; integral floats (2048.0) are accepted."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ModelError(
            f"{where} is {_show(value)}; a whole number from {low} to {high} was expected."
        )
    return value


def token_ids(value: Any, where: str, vocab_size: int) -> list[int]:
    """An id or a list of ids, each inside the vocabulary."""
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return [whole_number(v, where, 0, max(vocab_size - 1, 0)) for v in values]


def section(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """A nested object that may be absent; anything but an object is an error."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelError(f"{where} '{key}' is {_show(value)}; a JSON object was expected.")
    return value


def check_head_counts(config: dict[str, Any], where: str) -> None:
    """config.json's head counts, before transformers reads them (0 KV heads made it fail
    with "integer modulo by zero")."""
    counts = {}
    for key in ("num_attention_heads", "num_key_value_heads"):
        if config.get(key) is not None:
            counts[key] = whole_number(config[key], f"{where}'s {key}", 1, MAX_HEADS)
    heads, kv_heads = counts.get("num_attention_heads"), counts.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ModelError(
            f"{where} has {heads} attention heads, which do not split into groups for its "
            f"{kv_heads} KV heads."
        )


def check_configs(config: dict[str, Any] | None, genai: dict[str, Any] | None) -> object:
    """config.json's head counts checked; what genai_config.json names as the decoder's file
    (None: it names none; the folder's files then say which graph)."""
    if config:
        check_head_counts(config, "config.json")
    return decoder_section(genai or {}).get("filename")


USE_CACHE_BRANCH = "use_cache_branch"  # legacy Optimum merged decoders
LOGITS_POSITIONS = "logits_positions"  # chatapp's converter (convert/decoder_graph.py)


@dataclass(frozen=True)
class DecoderNames:
    """Names of a decoder's inputs and outputs; KV names are templates with one %d (layer)."""

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str = "position_ids"
    logits: str = "logits"
    past_key: str = "past_key_values.%d.key"
    past_value: str = "past_key_values.%d.value"
    present_key: str = "present.%d.key"
    present_value: str = "present.%d.value"


def decoder_section(genai: dict[str, Any]) -> dict[str, Any]:
    """genai_config.json's model.decoder; {} when absent, an error when not an object."""
    model = section(genai, "model", "genai_config.json")
    return section(model, "decoder", "genai_config.json's model")


def decoder_names(genai: dict[str, Any]) -> DecoderNames:
    """Hugging Face's names, overridden by genai_config.json's model.decoder.inputs / outputs."""
    decoder = decoder_section(genai)
    inputs = section(decoder, "inputs", "genai_config.json's model.decoder")
    outputs = section(decoder, "outputs", "genai_config.json's model.decoder")
    default = DecoderNames()
    chosen: dict[str, str] = {}
    for field, source, key in (
        ("input_ids", inputs, "input_ids"),
        ("attention_mask", inputs, "attention_mask"),
        ("position_ids", inputs, "position_ids"),
        ("past_key", inputs, "past_key_names"),
        ("past_value", inputs, "past_value_names"),
        ("logits", outputs, "logits"),
        ("present_key", outputs, "present_key_names"),
        ("present_value", outputs, "present_value_names"),
    ):
        value = source.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise ModelError(f"genai_config.json names {key} as {value!r}, which is not a name.")
        if field.startswith(("past_", "present_")) and value.count("%d") != 1:
            raise ModelError(
                f"genai_config.json's {key} is {value!r}; a name with one %d (the layer) "
                "was expected."
            )
        chosen[field] = value
    return DecoderNames(**{**default.__dict__, **chosen})


def _template_pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(template).replace("%d", r"(\d+)") + "$")


def kv_tensors(
    file_name: str, names: DecoderNames, inputs: set[str], outputs: set[str]
) -> list[KVTensor]:
    """Every past input with its present output, ordered by layer then key before value."""
    found: list[KVTensor] = []
    for kind, past, present in (
        ("key", names.past_key, names.present_key),
        ("value", names.past_value, names.present_value),
    ):
        pattern = _template_pattern(past)
        for name in inputs:
            match = pattern.match(name)
            if not match:
                continue
            layer = int(match.group(1))
            present_name = present % layer
            if present_name not in outputs:
                raise ModelError(f"{file_name} has the input {name} but no output {present_name}.")
            found.append(KVTensor(layer, kind, name, present_name))
    if not found:
        raise ModelError(
            f"{file_name} has no past key/value inputs (such as {names.past_key % 0}): "
            "a model without a KV cache cannot be run by this app."
        )
    found.sort(key=lambda t: (t.layer, t.kind != "key"))
    layers = sorted({t.layer for t in found})
    if layers != list(range(len(layers))) or len(found) != 2 * len(layers):
        raise ModelError(
            f"{file_name} has past inputs for layers {layers} that do not pair up as one key "
            "and one value per layer."
        )
    return found


def model_io(
    file_name: str,
    names: DecoderNames,
    graph_inputs: set[str],
    graph_outputs: set[str],
    kv: list[KVTensor],
    overridable: frozenset[str] | set[str] = frozenset(),
) -> ModelIO:
    """The names the loops use; an input this app could not feed is refused by name.
    `overridable`: initializers the graph also lists as inputs (fed only when known)."""
    for needed in (names.input_ids, names.attention_mask):
        if needed not in graph_inputs:
            raise ModelError(
                f"{file_name} has no '{needed}' input; it is not a decoder with a KV cache."
            )
    if names.logits not in graph_outputs:
        raise ModelError(f"{file_name} has no '{names.logits}' output.")
    io = ModelIO(
        input_ids=names.input_ids,
        attention_mask=names.attention_mask,
        position_ids=names.position_ids if names.position_ids in graph_inputs else None,
        logits=names.logits,
        use_cache_branch=USE_CACHE_BRANCH if USE_CACHE_BRANCH in graph_inputs else None,
        logits_positions=LOGITS_POSITIONS if LOGITS_POSITIONS in overridable else None,
    )
    known = {io.input_ids, io.attention_mask, io.position_ids, io.use_cache_branch}
    known |= {t.past_name for t in kv}
    unknown = sorted(graph_inputs - known)
    if unknown:
        raise ModelError(
            f"{file_name} needs the input{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)}, which this app does not know how to feed."
        )
    return io


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kv_head_shape(
    file_name: str,
    past_name: str,
    dims: list[int | str],
    config: dict[str, Any],
    genai: dict[str, Any],
) -> tuple[int, int]:
    """(KV heads, head size): from the graph, else genai_config.json, else config.json."""
    decoder = decoder_section(genai)
    heads_from_configs = (
        _int(decoder.get("num_key_value_heads"))
        or _int(config.get("num_key_value_heads"))
        or _int(config.get("num_attention_heads"))
    )
    attention_heads = _int(decoder.get("num_attention_heads")) or _int(
        config.get("num_attention_heads")
    )
    hidden = _int(decoder.get("hidden_size")) or _int(config.get("hidden_size"))
    size_from_configs = (
        _int(decoder.get("head_size"))
        or _int(config.get("head_dim"))
        or (hidden // attention_heads if hidden and attention_heads else None)
    )
    heads = dims[1] if isinstance(dims[1], int) else heads_from_configs
    size = dims[3] if isinstance(dims[3], int) else size_from_configs
    if heads is None or size is None:
        raise ModelError(
            f"{past_name} in {file_name} does not state its head count and size "
            f"(shape {dims}), and neither genai_config.json nor config.json gives them."
        )
    return heads, size


def value_dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    dims: list[int | str] = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else d.dim_param or "?")
    return dims


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


def describe_graph(
    folder: Path,
    onnx_path: Path,
    graph: onnx.GraphProto,
    op_types: frozenset[str],
    config: dict[str, Any],
    genai: dict[str, Any],
    generation: dict[str, Any],
) -> ModelInfo:
    """The model `graph` (the file `onnx_path` of `folder`, whose nodes, subgraphs included, run
    `op_types`) is, with its folder's configs; ModelError says what it lacks."""
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
    layout, window = _layout(op_types, past_dims, present_dims, value_dims(inputs[io.input_ids]))
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
        op_types=op_types,
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
    op_types: frozenset[str],
    past: list[int | str],
    present: list[int | str],
    ids: list[int | str],
) -> tuple[KVLayout, int | None]:
    # The native DecodeAttention takes GroupQueryAttention's inputs and KV buffers.
    if "GroupQueryAttention" in op_types or DECODE_ATTENTION in op_types:
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
