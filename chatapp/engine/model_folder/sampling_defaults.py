"""The sampling a model starts with: what its folder's generation_config.json says, or else a
preset chosen by the model's size. No Qt.

A 135M-parameter model answers "What is the capital of France?" with "Paris" when it picks the
most likely token, and with inventions at temperature 0.7; larger models cope with sampling
and their authors often ship the settings they tested in generation_config.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.read import read_json_file
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.manifest import MANIFEST_FILE

GENERATION_CONFIG = "generation_config.json"
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty")
# Models below this many parameters get the Precise preset, the rest Balanced.
SMALL_MODEL_PARAMETERS = 1_000_000_000

PRESET_LABELS = {"precise": "Precise", "balanced": "Balanced", "creative": "Creative"}
PRESETS = {
    # Greedy; the mild penalty keeps a small model out of loops (a poem by the 135M model
    # repeats "a place where the sea is a place" without it).
    "precise": SamplingSettings(temperature=0.0, top_k=40, top_p=0.95, repetition_penalty=1.1),
    "balanced": SamplingSettings(temperature=0.7, top_k=40, top_p=0.9, repetition_penalty=1.1),
    "creative": SamplingSettings(temperature=1.0, top_k=100, top_p=0.95, repetition_penalty=1.1),
}
PRESET_TIPS = {
    "precise": "Always the most likely token, with a mild repetition penalty: the right answers "
    "small models know",
    "balanced": "Some variety (temperature 0.7, top-p 0.9): for models of a billion "
    "parameters and more",
    "creative": "More variety (temperature 1.0, top-p 0.95): stories and ideas, more mistakes",
}


def chosen_sampling(preset: str | None = None, **chosen: Any) -> SamplingSettings:
    """The one place a preset (the window's buttons; `generate --greedy` is "precise") and the
    values a person named become settings: greedy is temperature 0 with the rest of the preset
    kept, its repetition penalty too (1 turns it off, in the window and on the command line)."""
    base = PRESETS[preset] if preset is not None else SamplingSettings()
    return replace(base, **chosen)


# The range the window's controls offer; a file asking for more is not followed.
LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_k": (0.0, 1000.0),
    "top_p": (0.01, 1.0),
    "repetition_penalty": (1.0, 2.0),
}
# What transformers assumes for a key the file leaves out when do_sample is true.
HF_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0}


@dataclass(frozen=True)
class ModelSampling:
    """The sampling a model suggests and where that comes from, in words for the user."""

    settings: SamplingSettings
    source: str  # "its generation_config.json" or "the Precise preset for ... parameters"
    preset: str | None  # the preset `settings` equals, if any
    parameters: int | None = None  # estimated from config.json (or the graph's size)
    notice: str | None = None  # why a generation_config.json was not followed


def matching_preset(settings: SamplingSettings) -> str | None:
    """The preset whose sampling values `settings` has (max tokens and seed aside)."""
    for name, preset in PRESETS.items():
        if all(_same(getattr(settings, f), getattr(preset, f)) for f in SAMPLING_FIELDS):
            return name
    return None


def preset_for(parameters: int | None) -> str:
    if parameters is not None and parameters >= SMALL_MODEL_PARAMETERS:
        return "balanced"
    return "precise"


def model_sampling(folder: Path | str, graph_bytes: int | None = None) -> ModelSampling:
    """What the model in `folder` should sample with. A bad generation_config.json is left
    aside with a notice (the preset applies); nothing here raises for a folder's content."""
    folder = Path(folder)
    try:
        generation, unreadable = read_json_file(folder, GENERATION_CONFIG), None
    except ModelError as exc:
        generation, unreadable = None, exc
    return sampling_of(
        folder,
        _json(folder, "config.json"),
        generation,
        graph_bytes,
        unreadable,
        made_by_chatapp=_made_by_chatapp(folder),
    )


def sampling_of(
    folder: Path,
    config: dict[str, Any] | None,
    generation: dict[str, Any] | None,
    graph_bytes: int | None = None,
    unreadable: Exception | None = None,
    made_by_chatapp: bool = False,
) -> ModelSampling:
    """`model_sampling` for a folder whose config.json, generation_config.json and manifest
    were read already (None or {}: the folder has none; `unreadable`: why the second could
    not be; `made_by_chatapp`: the manifest names chatapp's converter)."""
    parameters = estimate_parameters(config or None)
    if parameters is None and graph_bytes:
        parameters = graph_bytes // 2  # about 16 bits per weight: a guess for the preset only
    problem: Exception | None = unreadable
    from_file = None
    if generation and problem is None:
        try:
            from_file = sampling_from_config(generation, made_by_chatapp)
        except ValueError as exc:
            problem = exc
    if from_file is not None:
        preset = matching_preset(from_file)
        return ModelSampling(from_file, f"its {GENERATION_CONFIG}", preset, parameters)
    name = preset_for(parameters)
    size = f"a model of about {describe_count(parameters)} parameters" if parameters else "it"
    source = f"the {PRESET_LABELS[name]} preset, suggested for {size}"
    notice = None
    if problem is not None:
        notice = f"{GENERATION_CONFIG} of {folder.name} is not followed: {problem} Using {source}."
    return ModelSampling(PRESETS[name], source, name, parameters, notice)


def sampling_from_config(
    config: dict[str, Any], written_by_chatapp: bool
) -> SamplingSettings | None:
    """The sampling a generation_config.json asks for; None when it says nothing about it.

    do_sample false means the most likely token (transformers' meaning); true means sampling
    with the file's values and transformers' defaults for the rest. Without do_sample, sampling
    keys are taken as meant. chatapp's converter writes `do_sample: false` only because that
    is transformers' default, not as advice: such a file without sampling keys says nothing.
    ValueError names a value out of range."""
    keys = {k: config[k] for k in SAMPLING_FIELDS if config.get(k) is not None}
    values = {k: _checked(k, v) for k, v in keys.items()}
    do_sample = config.get("do_sample")
    if do_sample is not None and not isinstance(do_sample, bool):
        raise ValueError(f"do_sample is {do_sample!r}, not true or false.")
    if do_sample is None or (do_sample is False and written_by_chatapp and not keys):
        if not keys:
            return None
        do_sample = values.get("temperature", 1.0) > 0
    base = PRESETS["precise"]
    if not do_sample:
        return replace(
            base, temperature=0.0, repetition_penalty=values.get("repetition_penalty", 1.0)
        )
    merged = {**HF_SAMPLING_DEFAULTS, **values}
    return replace(
        base,
        temperature=float(merged["temperature"]),
        top_k=int(merged["top_k"]),
        top_p=float(merged["top_p"]),
        repetition_penalty=float(merged["repetition_penalty"]),
    )


def estimate_parameters(config: dict[str, Any] | None) -> int | None:
    """Weights of a decoder described by a Hugging Face config.json (None if it cannot say):
    attention and gated MLP per layer, the embedding, and the output head unless tied."""
    if not config:
        return None
    try:
        hidden = _count(config, "hidden_size")
        layers = _count(config, "num_hidden_layers")
        inner = _count(config, "intermediate_size")
        vocab = _count(config, "vocab_size")
        heads = _count(config, "num_attention_heads")
        kv_heads = _count(config, "num_key_value_heads", heads)
        head_dim = _count(config, "head_dim", hidden // heads)
    except ValueError:
        return None
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    per_layer = attention + 3 * hidden * inner + 2 * hidden
    tied = config.get("tie_word_embeddings", True) is not False
    return layers * per_layer + vocab * hidden * (1 if tied else 2)


def describe_count(parameters: int) -> str:
    """135M, 1.2B, 8B."""
    if parameters >= 10**9:
        value, unit = parameters / 10**9, "B"
    else:
        value, unit = parameters / 10**6, "M"
    return f"{value:.1f}".rstrip("0").rstrip(".") + unit if value < 10 else f"{value:.0f}{unit}"


def _checked(key: str, value: Any) -> float:
    low, high = LIMITS[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} is {value!r}, not a number.")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{key} is {value}, outside {low:g} to {high:g}.")
    if key == "top_k" and not float(value).is_integer():
        raise ValueError(f"top_k is {value}, not a whole number.")
    return float(value)


def _count(config: dict[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 1 << 24:
        raise ValueError(key)
    return value


def _json(folder: Path, name: str) -> dict[str, Any] | None:
    try:
        return read_json_file(folder, name)
    except ModelError:
        return None


def _made_by_chatapp(folder: Path) -> bool:
    manifest = _json(folder, MANIFEST_FILE)
    return manifest is not None and manifest.get("converter") == "chatapp"


def _same(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) < 1e-6
