"""A native folder whose nodes disagree with their weights (issue 37) is refused at load with
one sentence naming the node, or, where only a run can tell, the answer stops with one line:
never "unexpected RuntimeError ... (a bug)"."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.devices import PRECISION_CONFIG
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError, ModelError
from chatapp.engine.guards import PRECISION_LABELS, PRECISIONS
from chatapp.engine.native_kernels import NativeNodeMismatch, library_path
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.graph import NATIVE_DOMAIN, all_nodes
from tests.tiny_model import write_tiny_gguf

pytestmark = pytest.mark.skipif(library_path() is None, reason="native kernels not built")
GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=3)

Edit = Callable[[onnx.NodeProto, dict[str, onnx.TensorProto]], None]


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gguf = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tied=False, seed=1)
    return convert_gguf(
        gguf, tmp_path_factory.mktemp("native") / "m", ConvertOptions(graph="native")
    )


def attr(name: str, value: int | bytes) -> Edit:
    def edit(node: onnx.NodeProto, _weights: dict[str, onnx.TensorProto]) -> None:
        for a in node.attribute:
            if a.name == name and isinstance(value, bytes):
                a.s = value
            elif a.name == name:
                a.i = value

    return edit


def drop_attr(name: str) -> Edit:
    def edit(node: onnx.NodeProto, _weights: dict[str, onnx.TensorProto]) -> None:
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept)

    return edit


def weight_as(dtype: type) -> Edit:
    def edit(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> None:
        tensor = weights[node.input[1]]
        array: np.ndarray = numpy_helper.to_array(tensor).astype(dtype)
        tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))

    return edit


def weight_bytes_cut(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> None:
    tensor = weights[node.input[1]]
    tensor.raw_data = tensor.raw_data[: len(tensor.raw_data) // 2]


def weight_from_nowhere(node: onnx.NodeProto, _weights: dict[str, onnx.TensorProto]) -> None:
    node.input[1] = "no_such_weight"


def k_and_weight_reshaped(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> None:
    """K doubled, N halved and the weight reshaped to agree: only the input disagrees."""
    tensor = weights[node.input[1]]
    array = numpy_helper.to_array(tensor)
    rows, width = array.shape
    tensor.CopyFrom(numpy_helper.from_array(array.reshape(rows // 2, width * 2), tensor.name))
    for a in node.attribute:
        if a.name == "K":
            a.i *= 2
        elif a.name == "N":
            a.i //= 2


def edited(native: Path, tmp_path: Path, edit: Edit) -> Path:
    folder = tmp_path / "edited"
    shutil.copytree(native, folder)
    model = onnx.load(str(folder / "model.onnx"))
    weights = {t.name: t for t in model.graph.initializer}
    node = next(
        n for n in all_nodes(model.graph) if n.domain == NATIVE_DOMAIN and n.op_type == "GgufMatMul"
    )
    weight = node.input[1]
    edit(node, weights)
    # A native graph runs its layers twice (step and prompt branches) on shared weights: the
    # other readers of the weight take the edited node's attributes.
    for other in all_nodes(model.graph):
        if other is not node and other.op_type == "GgufMatMul" and other.input[1] == weight:
            del other.attribute[:]
            other.attribute.extend(node.attribute)
    onnx.save(model, str(folder / "model.onnx"))
    return folder


LOAD_REFUSALS: dict[str, tuple[Edit, str]] = {
    "k_doubled": (attr("K", 128), "K=128"),  # the tiny model's K is 64
    "n_larger": (attr("N", 160), "N=160"),
    "other_format": (attr("qtype", b"Q8_0"), "says Q8_0"),
    "unknown_format": (attr("qtype", b"Q3_XYZ"), "format 'Q3_XYZ'"),
    "k_not_whole_blocks": (attr("K", 48), "multiple of 32"),
    "k_zero": (attr("K", 0), "K=0"),
    "no_qtype": (drop_attr("qtype"), "attributes qtype, K and N"),
    "float_weight": (weight_as(np.float32), "float"),
    "weight_bytes_cut": (weight_bytes_cut, "the folder holds"),
    "weight_not_an_initializer": (weight_from_nowhere, "no initializer"),
}


@pytest.mark.parametrize("case", list(LOAD_REFUSALS))
def test_a_node_that_disagrees_with_its_weight_is_refused_at_load(
    native: Path, tmp_path: Path, case: str
) -> None:
    edit, names = LOAD_REFUSALS[case]
    folder = edited(native, tmp_path, edit)
    with pytest.raises(NativeNodeMismatch) as refused:
        Engine(folder, threads=1, max_context=64)
    message = str(refused.value)
    assert names in message and "GgufMatMul" in message and "\n" not in message
    assert message.endswith("convert its GGUF again.")


def test_a_node_only_a_run_can_fault_stops_the_answer_in_one_line(
    native: Path, tmp_path: Path
) -> None:
    engine = Engine(edited(native, tmp_path, k_and_weight_reshaped), threads=1, max_context=64)
    with pytest.raises(ModelError, match=r"could not be run \(GgufMatMul: .*not K\)") as failed:
        engine.generate_ids([3, 4, 5], GREEDY, ignore_eos=True).run()
    assert "\n" not in str(failed.value) and "Non-zero status" not in str(failed.value)


def test_the_intact_folder_loads_and_answers(native: Path) -> None:
    engine = Engine(native, threads=1, max_context=64)
    assert len(engine.generate_ids([3, 4, 5], GREEDY, ignore_eos=True).run().token_ids) == 3


def test_the_precision_reaches_the_session_and_each_holds_across_loops(native: Path) -> None:
    """The engine's precision reaches the library through the session's config entry, is named
    in the kernels line, and within one precision both cached loops give the same tokens; fast
    and exact logits differ by no more than 8-bit rounding can move the tiny model's (a
    twentieth of the largest logit: far above the rounding's, far below a different model);
    an unknown precision is refused in words."""
    prompt = list(range(3, 30))
    logits = {}
    for precision in PRECISIONS:
        engine = Engine(native, threads=1, max_context=64, precision=precision)
        options = engine.session.get_session_options()
        assert options.get_session_config_entry(PRECISION_CONFIG) == precision
        assert engine.precision_in_effect == precision
        assert engine.kernels.endswith(", " + PRECISION_LABELS[precision])
        logits[precision] = engine.loop().forward(prompt).logits.copy()  # a fresh cache
        answers = [
            engine.generate_ids(prompt, GREEDY, mode, ignore_eos=True).run().token_ids
            for mode in ("naive", "iobinding")
        ]
        assert answers[0] == answers[1]
    difference = np.abs(logits["fast"] - logits["exact"]).max()
    assert 0 < difference < 0.05 * np.abs(logits["exact"]).max()  # the two really differ
    with pytest.raises(EngineError, match="Precision must be fast or exact"):
        Engine(native, threads=1, max_context=64, precision="int16")
