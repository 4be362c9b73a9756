"""Describing model folders, and the messages for folders that cannot run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from chatapp.engine.errors import ModelError
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.model_folder.model import KVLayout
from chatapp.engine.model_folder.read import ordered_candidates


def copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_converter_folder_is_described(tiny_model_dir: Path) -> None:
    info = open_model_folder(tiny_model_dir)
    assert info.layout is KVLayout.SHARED_BUFFER
    assert info.n_layers == 2
    assert (info.kv_heads, info.head_dim) == (2, 16)
    assert info.kv_dtype == np.float32
    assert len(info.kv) == 4
    assert info.kv[0].past_name == "past_key_values.0.key"
    assert info.kv[0].present_name == "present.0.key"
    assert info.context_length == 512
    assert 2 in info.eos_token_ids
    assert info.vocab_size == 269
    assert not info.has_position_ids
    assert "KV layout shared-buffer" in info.describe()
    # One context figure, or both labelled: what the app sets aside and what the model allows.
    assert "context 512 tokens," in info.describe() and "allows" not in info.describe()
    assert "context 256 tokens (the model allows 512)" in info.describe(256)
    assert "context 512 tokens," in info.describe(512)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        open_model_folder(tmp_path / "nowhere")


def test_folder_without_onnx(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no ONNX model"):
        open_model_folder(tmp_path)


def test_folder_without_tokenizer(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="tokenizer"):
        open_model_folder(folder)


def test_folder_without_configs(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    (folder / "config.json").unlink()
    (folder / "genai_config.json").unlink()
    with pytest.raises(ModelError, match=r"config\.json"):
        open_model_folder(folder)


def test_broken_config(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    (folder / "config.json").write_text("{ not json")
    with pytest.raises(ModelError, match=r"config\.json"):
        open_model_folder(folder)


def test_corrupt_onnx_file(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    (folder / "model.onnx").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ModelError, match=r"model\.onnx"):
        open_model_folder(folder)


def _save_graph(folder: Path, inputs: list, outputs: list, name: str = "model.onnx") -> None:
    nodes = [helper.make_node("Identity", [inputs[0].name], [o.name]) for o in outputs]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(helper.make_model(graph), str(path))


def _folder_with(tmp_path: Path, tiny_model_dir: Path, inputs: list, outputs: list) -> Path:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    _save_graph(folder, inputs, outputs)
    (folder / "genai_config.json").unlink()
    return folder


def vi(name: str, shape: list, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_model_without_kv_cache_is_named(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = _folder_with(
        tmp_path,
        tiny_model_dir,
        [
            vi("input_ids", ["b", "s"], TensorProto.INT64),
            vi("attention_mask", ["b", "t"], TensorProto.INT64),
        ],
        [vi("logits", ["b", "s", 269])],
    )
    with pytest.raises(ModelError, match="no past key/value inputs"):
        open_model_folder(folder)


def test_past_without_present_is_named(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = _folder_with(
        tmp_path,
        tiny_model_dir,
        [
            vi("input_ids", ["b", "s"], TensorProto.INT64),
            vi("attention_mask", ["b", "t"], TensorProto.INT64),
            vi("past_key_values.0.key", ["b", 2, "p", 16]),
        ],
        [vi("logits", ["b", "s", 269])],
    )
    with pytest.raises(ModelError, match=r"present\.0\.key"):
        open_model_folder(folder)


def test_concat_and_static_layouts_are_detected(tiny_model_dir: Path, tmp_path: Path) -> None:
    ids, mask = (
        vi("input_ids", ["b", "s"], TensorProto.INT64),
        vi("attention_mask", ["b", "t"], TensorProto.INT64),
    )
    concat = _folder_with(
        tmp_path,
        tiny_model_dir,
        [
            ids,
            mask,
            vi("past_key_values.0.key", ["b", 2, "p", 16]),
            vi("past_key_values.0.value", ["b", 2, "p", 16]),
        ],
        [
            vi("logits", ["b", "s", 269]),
            vi("present.0.key", ["b", 2, "t", 16]),
            vi("present.0.value", ["b", 2, "t", 16]),
        ],
    )
    assert open_model_folder(concat).layout is KVLayout.CONCAT
    static = tmp_path / "static"
    shutil.copytree(concat, static)
    _save_graph(
        static,
        [
            vi("input_ids", [1, 1], TensorProto.INT64),
            vi("attention_mask", [1, 128], TensorProto.INT64),
            vi("past_key_values.0.key", [1, 2, 127, 16]),
            vi("past_key_values.0.value", [1, 2, 127, 16]),
        ],
        [
            vi("logits", [1, 1, 269]),
            vi("present.0.key", [1, 2, 128, 16]),
            vi("present.0.value", [1, 2, 128, 16]),
        ],
    )
    info = open_model_folder(static)
    assert info.layout is KVLayout.STATIC_WINDOW
    assert (info.window, info.context_length) == (1, 128)


def test_unknown_fixed_layout_names_what_was_found(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = _folder_with(
        tmp_path,
        tiny_model_dir,
        [
            vi("input_ids", [1, 1], TensorProto.INT64),
            vi("attention_mask", [1, 128], TensorProto.INT64),
            vi("past_key_values.0.key", [1, 2, 100, 16]),
            vi("past_key_values.0.value", [1, 2, 100, 16]),
        ],
        [
            vi("logits", [1, 1, 269]),
            vi("present.0.key", [1, 2, 128, 16]),
            vi("present.0.value", [1, 2, 128, 16]),
        ],
    )
    with pytest.raises(ModelError, match="past length 100 and present length 128"):
        open_model_folder(folder)


def test_optimum_folder_with_several_graphs(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    (folder / "genai_config.json").unlink()
    (folder / "onnx").mkdir()
    shutil.move(folder / "model.onnx", folder / "onnx" / "model_q4.onnx")
    shutil.copy(folder / "onnx" / "model_q4.onnx", folder / "onnx" / "model_fp16.onnx")
    assert [p.name for p in ordered_candidates(folder)] == ["model_fp16.onnx", "model_q4.onnx"]
    info = open_model_folder(folder, "onnx/model_q4.onnx")
    assert info.onnx_path.name == "model_q4.onnx"
    with pytest.raises(ModelError, match="model_int8"):
        open_model_folder(folder, "onnx/model_int8.onnx")


def test_eos_ids_are_merged_from_every_config(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_folder(tiny_model_dir, tmp_path / "m")
    gen = json.loads((folder / "generation_config.json").read_text())
    gen["eos_token_id"] = [2, 1]
    (folder / "generation_config.json").write_text(json.dumps(gen))
    assert open_model_folder(folder).eos_token_ids[:2] == (2, 1)


def test_an_input_the_app_cannot_feed_is_named(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = _folder_with(
        tmp_path,
        tiny_model_dir,
        [
            vi("input_ids", ["b", "s"], TensorProto.INT64),
            vi("attention_mask", ["b", "t"], TensorProto.INT64),
            vi("num_logits_to_keep", [], TensorProto.INT64),
            vi("past_key_values.0.key", ["b", 2, "p", 16]),
            vi("past_key_values.0.value", ["b", 2, "p", 16]),
        ],
        [
            vi("logits", ["b", "s", 269]),
            vi("present.0.key", ["b", 2, "t", 16]),
            vi("present.0.value", ["b", 2, "t", 16]),
        ],
    )
    with pytest.raises(ModelError, match="needs the input num_logits_to_keep"):
        open_model_folder(folder)
