"""Logits that are not finite (damaged weights: issue 37) stop the answer with one line naming
the model, instead of an empty answer with no word."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.errors import ModelError
from chatapp.engine.generation import check_finite_row
from chatapp.engine.native_kernels import library_path
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.graph import all_nodes
from tests.tiny_model import write_tiny_gguf

GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=4)
F16 = {"nan": 0x7E00, "inf": 0x7C00, "-inf": 0xFC00}


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gguf = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tied=False, seed=1)
    out = tmp_path_factory.mktemp("native") / "m"
    return convert_gguf(gguf, out, ConvertOptions(graph="native"))


def with_block_scale(native: Path, tmp_path: Path, value: int, which: str) -> Path:
    """A copy whose first GGUF block of one native weight has its f16 scale set to `value`."""
    folder = tmp_path / "damaged"
    shutil.copytree(native, folder)
    model = onnx.load(str(folder / "model.onnx"))
    weights = {t.name: t for t in model.graph.initializer}
    nodes = [n for n in all_nodes(model.graph) if n.op_type == "GgufMatMul"]
    node = nodes[0] if which == "first_layer" else nodes[-1]
    name = node.input[1]
    blocks = numpy_helper.to_array(weights[name]).copy()
    blocks[0, 0:2] = np.array([value], dtype="<u2").view(np.uint8)
    weights[name].CopyFrom(numpy_helper.from_array(blocks, name))
    onnx.save(model, str(folder / "model.onnx"))
    return folder


@pytest.mark.skipif(library_path() is None, reason="native kernels not built")
@pytest.mark.parametrize("value", list(F16))
@pytest.mark.parametrize("which", ["first_layer", "last_projection"])
def test_a_damaged_block_scale_stops_the_answer_naming_the_model(
    native: Path, tmp_path: Path, value: str, which: str
) -> None:
    engine = Engine(with_block_scale(native, tmp_path, F16[value], which), threads=1)
    with pytest.raises(ModelError, match=r"^damaged computed values that are not numbers"):
        engine.generate_ids([3, 4, 5, 6], GREEDY, ignore_eos=True).run()


def test_a_stock_weight_that_is_nan_stops_the_answer(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "nan"
    shutil.copytree(tiny_model_dir, folder)
    model = onnx.load(str(folder / "model.onnx"))
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    target = max(floats, key=lambda t: int(np.prod(t.dims)))  # a weight, not a shape constant
    array = numpy_helper.to_array(target).copy()
    array.flat[0] = np.nan
    target.CopyFrom(numpy_helper.from_array(array, target.name))
    onnx.save(model, str(folder / "model.onnx"))
    engine = Engine(folder, threads=1, max_context=64)
    with pytest.raises(ModelError, match="not numbers"):
        engine.generate_ids([3, 4, 5, 6], GREEDY, ignore_eos=True).run()


def test_a_finite_row_passes_and_any_nan_or_infinity_does_not() -> None:
    row = np.linspace(-30, 30, 1000, dtype=np.float32)
    check_finite_row(row, "Tiny")
    for bad in (np.nan, np.inf, -np.inf):
        damaged = row.copy()
        damaged[500] = bad
        with pytest.raises(ModelError, match=r"^Tiny computed"):
            check_finite_row(damaged, "Tiny")
