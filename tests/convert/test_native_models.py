"""Models converted with --native: the logits of the numpy reference, both loops' tokens as the
stock graph's, the GGUF's bytes per weight, and a clear refusal where the kernels cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.gguf_blocks import NATIVE_DOMAIN, NATIVE_GATHER, NATIVE_OP
from chatapp.convert.gguf_file import GGUFModel
from chatapp.engine import devices, loaded_model
from chatapp.engine.bench.floor import onnx_step_bytes
from chatapp.engine.devices import CPU, Device, needs_native
from chatapp.engine.engine import Engine
from chatapp.engine.loaded_model import DevicePlan, start_model
from chatapp.engine.model_description import read_model
from chatapp.engine.native_kernels import NativeKernelsUnavailable, library_path
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.graph import DECODE_ATTENTION, all_nodes
from tests.convert import test_graph
from tests.convert.test_graph import STEP_TOLERANCE, Converted, assert_matches_reference
from tests.convert.test_graph import reference_logits as reference_of
from tests.tiny_model import write_tiny_gguf

NATIVE = ConvertOptions(graph="native")
BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")
# The default model's mix (Q4_1 layers, tied Q8_0 embedding) and the 1B Q4_K_M mix (Q4_K layers,
# Q6_K ffn_down and output), at tiny sizes (K-quant super-blocks need K a multiple of 256).
MIXES: dict[str, dict[str, Any]] = {
    "q4_1": {"qtype": "Q4_1", "embed_qtype": "Q8_0"},
    "q4_k_m": {
        "qtype": "Q4_K",
        "embed_qtype": "Q4_K",
        "hidden": 256,
        "ffn": 512,
        "tied": False,
        "tensor_types": {"ffn_down": "Q6_K", "output": "Q6_K"},
    },
}


@pytest.fixture(autouse=True)
def sessions_with_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Converted's sessions, as the engine's, register the library when the graph needs it."""

    def new_session(folder: Path) -> ort.InferenceSession:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        devices.register_if_needed(folder / "model.onnx", True, "the CPU", opts)
        return ort.InferenceSession(
            str(folder / "model.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
        )

    monkeypatch.setattr(test_graph, "new_session", new_session)


def op_types(folder: Path) -> dict[str, int]:
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    counts: dict[str, int] = {}
    for node in all_nodes(graph):
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


@BUILT
@pytest.mark.parametrize("mix", list(MIXES))
def test_native_logits_match_reference(tmp_path: Path, mix: str) -> None:
    c = Converted(tmp_path, NATIVE, **MIXES[mix])
    ops = op_types(c.folder)
    # The layers once, steps and prompts alike on the library's DecodeAttention (a prompt's
    # rows in a step's float order): qkv, o, gate_up, down each; the head once.
    assert ops.get(NATIVE_OP, 0) == 4 * c.spec.n_layers + 1
    assert ops.get(DECODE_ATTENTION) == c.spec.n_layers
    assert "GroupQueryAttention" not in ops and "If" not in ops
    assert ops.get(NATIVE_GATHER) == 1  # the embedding, on the same kind of bytes
    assert "MatMulNBits" not in ops and "GatherBlockQuantized" not in ops
    ids = c.prompt()
    want = reference_of(c, ids)
    assert_matches_reference(c.logits(ids), want)  # a prompt: the float path
    assert_matches_reference(c.step_logits(ids), want, rel_tol=STEP_TOLERANCE)  # one-row steps


@BUILT
def test_native_weights_are_the_gguf_bytes(tmp_path: Path) -> None:
    c = Converted(tmp_path, NATIVE, **MIXES["q4_k_m"])
    graph = onnx.load(str(c.folder / "model.onnx")).graph
    stored = {t.name: t for t in graph.initializer}
    for node in all_nodes(graph):
        if node.domain == NATIVE_DOMAIN and node.input[1].startswith("layers.0.mlp.down."):
            raw = onnx.numpy_helper.to_array(stored[node.input[1]])
            want = GGUFModel(c.gguf).tensor("blk.0.ffn_down.weight").data
            np.testing.assert_array_equal(raw.reshape(-1), np.asarray(want).reshape(-1))
            return
    raise AssertionError("no native down projection in layer 0")


@BUILT
@pytest.mark.parametrize("mix", list(MIXES))
def test_both_loops_give_the_stock_graphs_tokens(tmp_path: Path, mix: str) -> None:
    (tmp_path / "stock").mkdir()
    stock = Converted(tmp_path / "stock", ConvertOptions(), **MIXES[mix])
    native = convert_gguf(stock.gguf, tmp_path / "native", NATIVE)
    start = stock.prompt(6, seed=3)
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=10)
    tokens = {}
    for name, folder in (("stock", stock.folder), ("native", native)):
        engine = Engine(folder, threads=2, max_context=64)
        for mode in ("naive", "iobinding"):
            run = engine.generate_ids(start, settings, mode, ignore_eos=True).run()
            tokens[name, mode] = run.token_ids
    assert len(set(map(tuple, tokens.values()))) == 1, tokens


def test_stock_folders_never_need_the_library(tmp_path: Path) -> None:
    c = Converted(tmp_path, ConvertOptions(), **MIXES["q4_1"])
    assert not needs_native(c.folder / "model.onnx")


def test_without_the_library_a_native_folder_is_refused_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    folder = convert_gguf(gguf, tmp_path / "model", NATIVE)  # converting needs no library
    assert needs_native(folder / "model.onnx")
    monkeypatch.setattr(devices, "library_path", lambda: None)
    with pytest.raises(NativeKernelsUnavailable, match="make native") as caught:
        Engine(folder, threads=1)
    assert "\n" not in str(caught.value)


def test_a_device_session_falls_back_to_the_cpu_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = convert_gguf(write_tiny_gguf(tmp_path / "t.gguf"), tmp_path / "m", NATIVE)
    gpu = Device("cuda", "CUDAExecutionProvider", "cuda", "a test GPU", own_memory=True)
    if library_path() is None:  # the CPU fallback needs the library too; check the refusal only
        with pytest.raises(NativeKernelsUnavailable, match="CPU only"):
            devices.register_if_needed(
                folder / "model.onnx", False, gpu.label, ort.SessionOptions()
            )
        return
    monkeypatch.setattr(loaded_model, "find_device", lambda _name: gpu)
    model = start_model(read_model(folder, device="cuda"), DevicePlan("cuda", threads=1))
    assert model.device is CPU
    assert model.fallback_reason is not None and "CPU only" in model.fallback_reason


@pytest.mark.parametrize("mix", list(MIXES))
def test_a_step_reads_the_gguf_bytes_of_its_matrices(tmp_path: Path, mix: str) -> None:
    """bench's floor counts a tied table once, whole (the head reads it), an untied embedding as
    one row: the native nodes' weights cost a step exactly their matrices' GGUF bytes."""
    gguf = write_tiny_gguf(tmp_path / "t.gguf", **MIXES[mix])
    folder = convert_gguf(gguf, tmp_path / "n", NATIVE)
    graph = onnx.load(str(folder / "model.onnx")).graph
    native_inputs = {
        i
        for n in all_nodes(graph)
        if n.domain == NATIVE_DOMAIN and n.op_type != DECODE_ATTENTION  # the matrices' nodes
        for i in n.input
    }
    read = onnx_step_bytes(folder / "model.onnx")
    native_read = sum(size for name, size in read.items() if name in native_inputs)
    model = GGUFModel(gguf)
    matrices = [t for t in model.tensors.values() if len(t.shape) == 2]
    step_bytes = sum(np.asarray(t.data).nbytes for t in matrices)
    if "output.weight" in model.tensors:  # untied: the embedding is gathered, one row a step
        table = np.asarray(model.tensor("token_embd.weight").data)
        step_bytes -= table.nbytes - table.nbytes // model.tensor("token_embd.weight").shape[0]
    assert native_read == step_bytes
