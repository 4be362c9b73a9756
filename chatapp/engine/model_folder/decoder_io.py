"""A decoder graph's inputs and outputs: their names, the KV tensors and the KV head shape.

Names follow Hugging Face's (`input_ids`, `past_key_values.%d.key`, `present.%d.key`, `logits`)
unless the folder's genai_config.json names them otherwise (model.decoder.inputs / outputs).
onnxruntime-genai's builder leaves the KV head size symbolic (`kv_cache_dim`), so the head
count and size may come from genai_config.json or config.json instead of the graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import onnx

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.config_values import section

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


@dataclass(frozen=True)
class ModelIO:
    """The names the loops feed and read for one graph."""

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str | None = None  # None: the graph computes positions itself
    logits: str = "logits"
    use_cache_branch: str | None = None  # legacy merged decoders: False for the first run
    # chatapp's graphs: which new positions get logits (an overridable initializer, default
    # every position); None for other tools' graphs, which return every position's logits
    logits_positions: str | None = None


@dataclass(frozen=True)
class KVTensor:
    layer: int
    kind: str  # "key" | "value"
    past_name: str
    present_name: str


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
