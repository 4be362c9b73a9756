"""bfloat16 KV and logits in both loops.

No tool makes a bfloat16 decoder that onnxruntime's CPU provider can run (the genai builder's
bf16 targets CUDA; its CPU graph needs a bfloat16 Where), so the test model is the tiny
concat-layout model with its float inputs and outputs cast to bfloat16 at the graph's edge:
the loops see exactly what a bfloat16 model gives them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.modes import MODES
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.tensor_types import BFLOAT16, as_float32, host_copy, host_value

CONTEXT = 96


def cast_edges_to_bfloat16(path: Path) -> None:
    model = onnx.load(str(path))
    graph = model.graph
    renames: dict[str, str] = {}
    before, after = [], []
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = renames[value.name] = f"{value.name}.float"
            before.append(helper.make_node("Cast", [value.name], [inner], to=TensorProto.FLOAT))
            value.type.tensor_type.elem_type = TensorProto.BFLOAT16
    outputs: dict[str, str] = {}
    for value in graph.output:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = outputs[value.name] = f"{value.name}.float"
            after.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.BFLOAT16))
            value.type.tensor_type.elem_type = TensorProto.BFLOAT16
    for node in graph.node:
        node.input[:] = [renames.get(n, outputs.get(n, n)) for n in node.input]
        node.output[:] = [outputs.get(n, n) for n in node.output]
    nodes = [*before, *graph.node, *after]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def folders(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bf16")
    fp32 = convert_gguf(tiny_gguf, root / "fp32", ConvertOptions(attention="standard"))
    bf16 = shutil.copytree(fp32, root / "bf16")
    cast_edges_to_bfloat16(bf16 / "model.onnx")
    return {"fp32": fp32, "bf16": bf16}


def engine(folder: Path, mode: str) -> Engine:
    return Engine(folder, mode=mode, threads=1, max_context=CONTEXT)


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


def test_bfloat16_types_are_read_from_the_graph(folders: dict[str, Path]) -> None:
    info = open_model_folder(folders["bf16"])
    assert info.kv_dtype == BFLOAT16 and info.logits_dtype == BFLOAT16
    assert info.kv_bytes_per_token() == open_model_folder(folders["fp32"]).kv_bytes_per_token() // 2
    assert "bfloat16 KV" in info.describe()


def test_both_loops_agree_and_follow_float32(folders: dict[str, Path]) -> None:
    ids = [7, 90, 33, 180, 41, 12, 250, 99]
    reference = engine(folders["fp32"], "naive").loop().forward(ids, all_logits=True).logits
    for mode in MODES:
        loop = engine(folders["bf16"], mode).loop()
        first = loop.forward(ids[:5], all_logits=True)
        assert first.logits.dtype == BFLOAT16  # kept in the model's type until sampled
        rows = [as_float32(first.logits)]
        for t in ids[5:]:
            rows.append(as_float32(loop.forward([t]).logits)[None, :].copy())
        got = np.concatenate(rows)
        # bfloat16 keeps 8 bits of mantissa: the KV and logits round to ~0.4 %.
        np.testing.assert_allclose(got, reference, atol=0.05 * np.abs(reference).max())
    tokens = {
        mode: engine(folders["bf16"], mode).generate_ids(ids, greedy(20), ignore_eos=True).run()
        for mode in MODES
    }
    assert tokens["naive"].token_ids == tokens["iobinding"].token_ids == tokens["nocache"].token_ids
    assert len(tokens["naive"].token_ids) == 20
    assert np.isfinite(tokens["iobinding"].prompt_perplexity)


def test_a_diverging_turn_cuts_the_bfloat16_cache(folders: dict[str, Path]) -> None:
    for mode in ("naive", "iobinding"):
        e = engine(folders["bf16"], mode)
        e.generate_ids([1, 2, 3, 4, 5, 6], greedy(3), ignore_eos=True).run()
        warm = e.generate_ids([1, 2, 3, 40, 41], greedy(6), ignore_eos=True).run()
        assert warm.reused_tokens == 3
        fresh = engine(folders["bf16"], mode)
        cold = fresh.generate_ids([1, 2, 3, 40, 41], greedy(6), ignore_eos=True).run()
        assert warm.token_ids == cold.token_ids, mode


def test_bfloat16_host_values_round_trip() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4).astype(BFLOAT16)
    value = host_value(array)
    assert value.data_type() == "tensor(bfloat16)"
    assert value.data_ptr() == array.ctypes.data  # no copy
    back = host_copy(value)
    np.testing.assert_array_equal(back.astype(np.float32), array.astype(np.float32))
