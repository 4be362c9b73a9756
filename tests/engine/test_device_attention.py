"""A device whose ONNX Runtime has no float32 GroupQueryAttention (CUDA) is refused a float32
GQA graph, with the reason and its fix, and runs a standard-attention graph in both loops.

On an H100 (docs/engine.md, "Measured on CUDA") such a graph placed its attention (134 nodes)
on the CPU and the IO-Binding loop gave other tokens than the naive one from the first token
on; the standard-attention graph of the same GGUF ran every layer on the GPU with equal tokens.
Here a device with that property is emulated on the CPU provider."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine import loaded_model as engine_module
from chatapp.engine.devices import CPU, attention_for
from chatapp.engine.engine import Engine
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.sampling import SamplingSettings

GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)
NO_FLOAT32_GQA = dataclasses.replace(
    CPU, name="gpu-like", label="GPU-like device", own_memory=True, float32_gqa=False
)


@pytest.fixture
def gpu_like(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "find_device", lambda _name: NO_FLOAT32_GQA)


@pytest.fixture(scope="module")
def standard_dir(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("standard") / "m"
    return convert_gguf(varied_gguf, out, ConvertOptions(graph="stock", attention="standard"))


@pytest.fixture(scope="module")
def gqa_dir(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gqa") / "m"
    return convert_gguf(varied_gguf, out, ConvertOptions(graph="stock"))


def test_the_converter_is_asked_for_standard_attention_for_cuda_only() -> None:
    assert attention_for("cuda") == "standard"
    for name in ("cpu", "webgpu", "webgpu-software", "dml", "openvino", "unknown"):
        assert attention_for(name) == "gqa"


def test_a_folder_lists_its_op_types(gqa_dir: Path, standard_dir: Path) -> None:
    assert "GroupQueryAttention" in open_model_folder(gqa_dir).op_types
    assert "GroupQueryAttention" not in open_model_folder(standard_dir).op_types


def test_a_float32_gqa_graph_is_refused_with_its_fix(gqa_dir: Path, gpu_like: None) -> None:
    engine = Engine(gqa_dir, "gpu-like", threads=1, max_context=64)
    assert engine.device is CPU
    reason = engine.fallback_reason or ""
    assert "GPU-like device runs GroupQueryAttention only in float16" in reason
    assert "--attention standard" in reason and "Running on the CPU" in reason
    tokens = engine.generate_ids([1, 5, 9, 2, 7], GREEDY, ignore_eos=True).run().token_ids
    assert len(tokens) == GREEDY.max_new_tokens


def test_a_standard_attention_graph_runs_there_in_both_loops(
    standard_dir: Path, gpu_like: None
) -> None:
    engine = Engine(standard_dir, "gpu-like", threads=1, max_context=64)
    assert engine.device is NO_FLOAT32_GQA and engine.fallback_reason is None
    runs = {
        mode: engine.generate_ids([1, 5, 9, 2, 7], GREEDY, mode, ignore_eos=True).run()
        for mode in ("naive", "iobinding")
    }
    assert runs["naive"].token_ids == runs["iobinding"].token_ids
    on_cpu = Engine(standard_dir, "cpu", threads=1, max_context=64)
    expected = on_cpu.generate_ids([1, 5, 9, 2, 7], GREEDY, ignore_eos=True).run().token_ids
    assert runs["naive"].token_ids == expected
