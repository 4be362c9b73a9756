"""The sampling a model starts with: its generation_config.json, else a preset by size."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chatapp.engine.model_description import (
    describe_count,
    estimate_parameters,
    matching_preset,
    model_sampling,
    preset_for,
    sampling_from_config,
)
from chatapp.engine.sampling import PRESETS

SMOLLM2_135M = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}
LLAMA_3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}


def _folder(tmp_path: Path, config: dict | None, generation: object = None) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    if generation is not None:
        text = generation if isinstance(generation, str) else json.dumps(generation)
        (folder / "generation_config.json").write_text(text)
    return folder


def test_parameter_estimates_match_the_published_sizes() -> None:
    assert estimate_parameters(SMOLLM2_135M) == pytest.approx(134.5e6, rel=0.01)
    assert estimate_parameters(LLAMA_3_8B) == pytest.approx(8.03e9, rel=0.01)
    assert estimate_parameters({"hidden_size": "big"}) is None
    assert estimate_parameters(None) is None
    assert [describe_count(n) for n in (134_514_432, 1_235_814_400, 8_030_261_248)] == [
        "135M",
        "1.2B",
        "8B",
    ]


def test_small_models_get_the_precise_preset_large_ones_balanced(tmp_path: Path) -> None:
    assert preset_for(135_000_000) == "precise" and preset_for(None) == "precise"
    assert preset_for(8_000_000_000) == "balanced"
    small = model_sampling(_folder(tmp_path, SMOLLM2_135M))
    assert small.settings.greedy and small.preset == "precise"
    assert "Precise preset" in small.source and "135M" in small.source
    assert small.notice is None
    shutil.rmtree(tmp_path / "model")
    large = model_sampling(_folder(tmp_path, LLAMA_3_8B))
    assert large.preset == "balanced" and large.settings.temperature == 0.7
    assert "8B" in large.source


def test_the_graph_size_stands_in_for_a_missing_config(tmp_path: Path) -> None:
    folder = _folder(tmp_path, None)
    assert model_sampling(folder, graph_bytes=540_000_000).preset == "precise"
    assert model_sampling(folder, graph_bytes=16_000_000_000).preset == "balanced"


def test_generation_config_with_sampling_values_is_followed(tmp_path: Path) -> None:
    # Llama 3.x Instruct's file: top_k and the penalty come from transformers' defaults.
    folder = _folder(tmp_path, LLAMA_3_8B, {"do_sample": True, "temperature": 0.6, "top_p": 0.9})
    got = model_sampling(folder)
    s = got.settings
    assert (s.temperature, s.top_p, s.top_k, s.repetition_penalty) == (0.6, 0.9, 50, 1.0)
    assert got.source == "its generation_config.json" and got.preset is None


def test_do_sample_false_means_the_most_likely_token(tmp_path: Path) -> None:
    folder = _folder(tmp_path, LLAMA_3_8B, {"do_sample": False, "repetition_penalty": 1.05})
    s = model_sampling(folder).settings
    assert s.greedy and s.repetition_penalty == 1.05


def test_a_file_chatapp_wrote_without_sampling_keys_is_no_advice() -> None:
    chatapp_written = {"bos_token_id": 1, "eos_token_id": [2], "do_sample": False}
    assert sampling_from_config(chatapp_written, written_by_chatapp=True) is None
    assert sampling_from_config(chatapp_written, written_by_chatapp=False).greedy
    assert sampling_from_config({"eos_token_id": 2}, written_by_chatapp=False) is None
    # Keys without do_sample are taken as meant.
    assert sampling_from_config({"temperature": 0.8}, False).temperature == 0.8
    assert sampling_from_config({"temperature": 0}, False).greedy


@pytest.mark.parametrize(
    ("generation", "words"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "not a JSON object"),
        ({"do_sample": True, "temperature": -1}, "temperature is -1"),
        ({"do_sample": True, "temperature": 1e9}, "outside 0 to 2"),
        ({"do_sample": True, "top_p": 0}, "top_p is 0"),
        ({"do_sample": True, "top_k": 2.5}, "not a whole number"),
        ({"do_sample": True, "repetition_penalty": "high"}, "not a number"),
        ({"do_sample": "yes"}, "not true or false"),
    ],
)
def test_a_bad_file_is_left_aside_with_a_notice(
    tmp_path: Path, generation: object, words: str
) -> None:
    got = model_sampling(_folder(tmp_path, SMOLLM2_135M, generation))
    assert got.preset == "precise" and got.settings == PRESETS["precise"]
    assert got.notice is not None and words in got.notice
    assert "not followed" in got.notice and "Precise preset" in got.notice


def test_a_link_out_of_the_folder_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"do_sample": True, "temperature": 1.5}))
    folder = _folder(tmp_path, SMOLLM2_135M)
    (folder / "generation_config.json").symlink_to(secret)
    got = model_sampling(folder)
    assert got.settings == PRESETS["precise"] and got.notice is not None
    assert "outside the model folder" in got.notice


def test_presets_are_recognised() -> None:
    for name, settings in PRESETS.items():
        assert matching_preset(settings) == name
    assert matching_preset(PRESETS["balanced"].__class__(temperature=0.33)) is None


@pytest.mark.default_model
def test_the_default_model_starts_greedy(default_model_dir: Path) -> None:
    got = model_sampling(default_model_dir)
    assert got.preset == "precise" and got.settings.greedy and got.notice is None


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    from chatapp.engine.model_folder.read import MAX_JSON_BYTES

    folder = _folder(tmp_path, SMOLLM2_135M)
    with (folder / "generation_config.json").open("wb") as fh:
        fh.truncate(MAX_JSON_BYTES + 1)  # sparse: nothing is written, nothing must be read
    got = model_sampling(folder)
    assert got.settings == PRESETS["precise"] and got.notice is not None
    assert "refused" in got.notice
