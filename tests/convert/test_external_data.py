"""Initializers streamed to model.onnx.data give the files onnx.save_model writes, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto

from chatapp.convert.external_data import ExternalData, goes_outside, save_graph
from chatapp.convert.onnx_graph import OnnxGraph

DATA = "model.onnx.data"


def build(g: OnnxGraph) -> onnx.ModelProto:
    """A graph whose initializers straddle onnx's 1024-byte threshold, in several dtypes."""
    rng = np.random.default_rng(0)
    x = g.add_input("x", TensorProto.FLOAT, [4])
    y = x
    big = rng.standard_normal((256, 64)).astype(np.float32)
    # 990 bytes + the bytes object's header stay inside; 991 and more go outside.
    for name, array in [
        ("small", rng.standard_normal(4).astype(np.float32)),
        ("scalar", np.array(3, np.int64)),
        ("just_below", rng.integers(0, 255, 990, dtype=np.uint8)),
        ("at_threshold", rng.integers(0, 255, 991, dtype=np.uint8)),
        ("float16", rng.standard_normal((64, 32)).astype(np.float16)),
        ("big", big),
        ("bools", rng.integers(0, 2, 2048).astype(bool)),
        ("big_again", big.copy()),  # equal values: stored once
    ]:
        y = g.op1("Identity", [g.const(name, array)])
    g.add_output(y, TensorProto.FLOAT, [4])
    return g.model("test", {})


def streamed(tmp: Path, inline_below: int, early: bool = False) -> tuple[Path, ExternalData]:
    tmp.mkdir()
    g = OnnxGraph()
    if early:  # initializers made before streaming starts are handed over in order
        g.const("early", np.arange(600, dtype=np.float32))
    external = ExternalData(tmp / DATA, inline_below)
    g.stream_to(external)
    model = build(g)
    external.close()
    if external.used:
        save_graph(model, tmp / "model.onnx")
    else:
        onnx.save_model(model, str(tmp / "model.onnx"))
    return tmp, external


def saved_whole(tmp: Path, external: bool, early: bool = False) -> Path:
    tmp.mkdir()
    g = OnnxGraph()
    if early:
        g.const("early", np.arange(600, dtype=np.float32))
    model = build(g)
    if external:
        onnx.save_model(
            model,
            str(tmp / "model.onnx"),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=DATA,
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(tmp / "model.onnx"))
    return tmp


def test_threshold_matches_onnx() -> None:
    assert not goes_outside(990)
    assert goes_outside(991)


@pytest.mark.parametrize("early", [False, True])
def test_streamed_files_equal_onnx_save_model(tmp_path: Path, early: bool) -> None:
    ours, external = streamed(tmp_path / "ours", 0, early)
    theirs = saved_whole(tmp_path / "theirs", True, early)
    assert external.used
    for name in ("model.onnx", DATA):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    data = (ours / DATA).read_bytes()
    assert external.digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert external.written == len(data)
    model = onnx.load(str(ours / "model.onnx"))  # reads the weights back from the file
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert values["big"].shape == (256, 64) and "big_again" not in values
    assert values["at_threshold"].size == 991


def test_small_models_stay_one_file(tmp_path: Path) -> None:
    ours, external = streamed(tmp_path / "ours", 1 << 20)
    theirs = saved_whole(tmp_path / "theirs", False)
    assert not external.used
    assert not (ours / DATA).exists()
    assert (ours / "model.onnx").read_bytes() == (theirs / "model.onnx").read_bytes()


def test_spills_once_the_total_passes_the_limit(tmp_path: Path) -> None:
    """Held tensors move out, in order, the moment the total reaches the limit."""
    ours, external = streamed(tmp_path / "ours", 3000)  # passed within the first tensors
    theirs = saved_whole(tmp_path / "theirs", True)
    assert external.used
    for name in ("model.onnx", DATA):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


def test_an_initializer_added_directly_still_goes_outside(tmp_path: Path) -> None:
    g = OnnxGraph()
    external = ExternalData(tmp_path / DATA, 0)
    g.stream_to(external)
    model = build(g)
    direct = onnx.numpy_helper.from_array(np.arange(1000, dtype=np.float32), "direct")
    model.graph.initializer.append(direct)
    external.finish(model)
    external.close()
    save_graph(model, tmp_path / "model.onnx")
    (tensor,) = [t for t in model.graph.initializer if t.name == "direct"]
    assert not tensor.HasField("raw_data") and tensor.data_location == TensorProto.EXTERNAL
    loaded = onnx.load(str(tmp_path / "model.onnx"))
    values = {t.name: onnx.numpy_helper.to_array(t) for t in loaded.graph.initializer}
    assert (values["direct"] == np.arange(1000, dtype=np.float32)).all()
    assert external.digest.hexdigest() == hashlib.sha256((tmp_path / DATA).read_bytes()).hexdigest()
