"""The converted ONNX graph: logits against the numpy reference, KV-cache plumbing, signature."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.gguf_file import DecoderSpec, GGUFModel
from chatapp.convert.int8_levels import LEVELS, STEP_LEVELS
from chatapp.folder_format.graph import (
    LEVELS_NODE_SUFFIX,
    STEP_OR_PROMPT_NODE,
    all_nodes,
    float_kernel_graph,
    levels_projection,
)
from tests.convert.reference import ReferenceModel
from tests.tiny_model import write_tiny_gguf

# Float activations everywhere (the default): exact up to float32 rounding.
EXACT = ConvertOptions()
# K-quant super-blocks are 256 wide along K.
K_DIMS: dict[str, Any] = {"hidden": 256, "ffn": 512}
SEQ = 24


class Converted:
    """A tiny GGUF, its converted folder, an ONNX Runtime session and the numpy reference."""

    def __init__(self, tmp_path: Path, options: ConvertOptions, **gguf_args: Any) -> None:
        self.gguf = write_tiny_gguf(tmp_path / "tiny.gguf", **gguf_args)
        self.folder = convert_gguf(self.gguf, tmp_path / "model", options)
        self.model = GGUFModel(self.gguf)
        self.spec: DecoderSpec = self.model.spec
        self.session = new_session(self.folder)

    def reference(self) -> ReferenceModel:
        return ReferenceModel(self.model)

    def prompt(self, length: int = SEQ, seed: int = 7) -> list[int]:
        rng = np.random.default_rng(seed)
        return [int(i) for i in rng.integers(0, self.spec.vocab_size, size=length)]

    def empty_pasts(self, batch: int = 1) -> dict[str, np.ndarray]:
        shape = (batch, self.spec.n_kv_heads, 0, self.spec.head_dim)
        return {name: np.zeros(shape, np.float32) for name in past_names(self.spec)}

    def run(
        self, ids: np.ndarray, pasts: dict[str, np.ndarray], past_len: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One step: logits [B, S, V] and the presents as the next step's pasts."""
        ids = np.atleast_2d(np.asarray(ids, dtype=np.int64))
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones((ids.shape[0], past_len + ids.shape[1]), np.int64),
            **pasts,
        }
        names = ["logits", *present_names(self.spec)]
        logits, *presents = self.session.run(names, feeds)
        return logits, dict(zip(past_names(self.spec), presents, strict=True))

    def logits(self, ids: list[int]) -> np.ndarray:
        return self.run(np.array([ids]), self.empty_pasts(), 0)[0][0]

    def step_logits(self, ids: list[int]) -> np.ndarray:
        """Logits [S, V] with every token fed alone (decode steps), the KV cache carried."""
        pasts, rows = self.empty_pasts(), []
        for n, token in enumerate(ids):
            logits, pasts = self.run(np.array([[token]]), pasts, n)
            rows.append(logits[0, -1])
        return np.stack(rows)


def new_session(folder: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(
        str(folder / "model.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
    )


def past_names(spec: DecoderSpec) -> list[str]:
    return [f"past_key_values.{i}.{k}" for i in range(spec.n_layers) for k in ("key", "value")]


def present_names(spec: DecoderSpec) -> list[str]:
    return [f"present.{i}.{k}" for i in range(spec.n_layers) for k in ("key", "value")]


def reference_logits(c: Converted, ids: list[int]) -> np.ndarray:
    # Random K-quant weights make large activations: exp(-gate) may overflow to inf, harmlessly.
    with np.errstate(over="ignore"):
        return c.reference().logits(ids)


def assert_matches_reference(
    got: np.ndarray, want: np.ndarray, rel_tol: float = 1e-4
) -> tuple[float, float]:
    """Max |diff| small against the logit scale, and the same argmax at every position."""
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    assert scale > 1.0, "the reference logits are degenerate"
    assert diff <= rel_tol * scale, f"max |logit diff| {diff:.3g} vs logit scale {scale:.3g}"
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    return diff, scale


# --- agreement with the numpy reference -------------------------------------------------------


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0", "F16", "F32", "BF16"])
def test_logits_match_reference(tmp_path: Path, qtype: str) -> None:
    c = Converted(tmp_path, EXACT, qtype=qtype)
    ids = c.prompt()
    want = reference_logits(c, ids)
    assert_matches_reference(c.logits(ids), want)
    assert_matches_reference(c.step_logits(ids), want, STEP_TOLERANCE)


def level_nodes(graph: onnx.GraphProto) -> dict[str, set[str]]:
    """Projections on exact int8 levels, by where they are: "main", or an If branch's name."""
    found: dict[str, set[str]] = {}
    for node in graph.node:
        projection = levels_projection(node)
        if projection:
            found.setdefault("main", set()).add(projection)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                for where, names in level_nodes(attr.g).items():
                    found.setdefault(attr.g.name if where == "main" else where, set()).update(names)
    return found


def head_rows(c: Converted) -> tuple[int, int]:
    """How many int8 rows (levels) the output projection's MatMulNBits gets in a prompt and in
    a one-token step, read from the running graph."""
    model = onnx.load(str(c.folder / "model.onnx"))
    made_by = {out: node for node in model.graph.node for out in node.output}
    head = next(n for n in model.graph.node if levels_projection(n) == "lm_head")
    rows = made_by[head.input[0]].input[0]  # the stacked rows, before they are merged
    model.graph.output.append(onnx.helper.make_tensor_value_info(rows, TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString())
    ids = c.prompt(6)

    def count(new: list[int], pasts: dict[str, np.ndarray], past_len: int) -> int:
        mask = np.ones((1, past_len + len(new)), np.int64)
        feeds = {"input_ids": np.array([new]), "attention_mask": mask, **pasts}
        return int(session.run([rows], feeds)[0].shape[0])

    _, pasts = c.run(np.array([ids]), c.empty_pasts(), 0)
    return count(ids, c.empty_pasts(), 0), count(ids[:1], pasts, len(ids))


@pytest.mark.parametrize("levels", ["decode", "all", "head"])
def test_int8_levels_where_asked_and_exact(tmp_path: Path, levels: str) -> None:
    """The output projection always runs on exact int8 levels. "decode" (the default) puts the
    layers on them in single-token steps only (an If; prompts keep the float kernel), "all" in
    every run, "head" nowhere else. Prompts and steps match the reference either way."""
    c = Converted(tmp_path, ConvertOptions(int8_levels=levels), qtype="Q4_1")
    graph = onnx.load(str(c.folder / "model.onnx"), load_external_data=False).graph
    found = level_nodes(graph)
    layers = {
        where: {name for name in names if name.startswith("layers.")}
        for where, names in found.items()
    }
    assert "lm_head" in found["main"]
    if levels == "decode":
        assert set(found) == {"main", "step"}  # the prompt branch has none
        assert len(layers["step"]) == 4 * c.spec.n_layers and not layers["main"]
        # One output projection: three levels in prompts, two in steps.
        assert head_rows(c) == (LEVELS, STEP_LEVELS)
    else:
        assert set(found) == {"main"}
        assert bool(layers["main"]) is (levels == "all")
        assert head_rows(c) == (LEVELS, LEVELS)
    ids = c.prompt()
    want = reference_logits(c, ids)
    assert_matches_reference(c.logits(ids), want)
    assert_matches_reference(
        c.step_logits(ids), want, STEP_TOLERANCE if levels == "decode" else 1e-4
    )


# Two levels leave up to 1 / (4 * 127^2) = 1.6e-5 of each block's largest activation unrounded;
# the tiny model's random weights make that 1.2e-4 of its logit scale (the default model: max
# |logit diff| 0.012, top-1 100%, docs/converter.md). A wrong branch or weight is off by O(1).
STEP_TOLERANCE = 5e-4


def test_device_copy_runs_the_prompt_branch_for_everything(tmp_path: Path) -> None:
    """Sessions on other devices get the graph without the If (an If runs on the CPU in most
    providers, which would move the KV cache through the host) and without int8 levels."""
    c = Converted(tmp_path, EXACT, qtype="Q4_1")
    read = onnx.load(c.folder / "model.onnx", load_external_data=False)
    before = read.SerializeToString()
    copy = float_kernel_graph(read)
    assert read.SerializeToString() == before  # the graph read is left as it was
    assert copy is not None
    graph = onnx.load_from_string(copy).graph
    assert not any(n.op_type == "If" for n in all_nodes(graph))
    levels = [n for n in all_nodes(graph) if levels_projection(n)]
    assert [levels_projection(n) for n in levels] == ["lm_head"]
    assert [a.i for n in levels for a in n.attribute if a.name == "accuracy_level"] == [0]
    c.session = ort.InferenceSession(copy)
    ids = c.prompt()
    want = reference_logits(c, ids)
    assert_matches_reference(c.logits(ids), want)
    assert_matches_reference(c.step_logits(ids), want)


def test_steps_take_the_step_branch(tmp_path: Path) -> None:
    """What runs, from onnxruntime's own profile: a one-token step goes through the levels'
    MatMulNBits in the layers, a prompt through the float ones."""
    c = Converted(tmp_path, EXACT, qtype="Q4_1")
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "profile")
    session = ort.InferenceSession(str(c.folder / "model.onnx"), opts)
    c.session = session
    ids = c.prompt(6)
    _, pasts = c.run(np.array([ids]), c.empty_pasts(), 0)
    prompt_done = time.perf_counter_ns() // 1000
    c.run(np.array([[ids[0]]]), pasts, len(ids))
    events = json.loads(Path(session.end_profiling()).read_text())
    ran = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    start = min(e["ts"] for e in events if e.get("name") == "model_run")
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    assert len(runs) == 2 and runs[0] == start and prompt_done > 0

    def levelled(names: list[str]) -> set[str]:
        return {n for n in names if n.startswith("layers.") and LEVELS_NODE_SUFFIX in n}

    prompt = levelled([e["name"] for e in ran if e["ts"] < runs[1]])
    step = levelled([e["name"] for e in ran if e["ts"] >= runs[1]])
    assert not prompt
    assert len(step) == 4 * c.spec.n_layers


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K"])
def test_k_quant_logits_match_reference(tmp_path: Path, qtype: str) -> None:
    c = Converted(tmp_path, EXACT, qtype=qtype, **K_DIMS)
    ids = c.prompt()
    want = reference_logits(c, ids)
    assert_matches_reference(c.logits(ids), want)
    assert_matches_reference(c.step_logits(ids), want, STEP_TOLERANCE)


@pytest.mark.parametrize(
    ("embed_qtype", "dims"),
    [
        ("Q4_0", {}),  # GatherBlockQuantized, 4-bit
        ("Q4_1", {}),  # float table (block minimums)
        ("F16", {}),
        ("Q4_K", K_DIMS),
        ("Q6_K", K_DIMS),  # GatherBlockQuantized, 8-bit with zero points, 16-wide blocks
    ],
)
def test_embedding_formats_match_reference(
    tmp_path: Path, embed_qtype: str, dims: dict[str, Any]
) -> None:
    c = Converted(tmp_path, EXACT, qtype="Q8_0", embed_qtype=embed_qtype, **dims)
    ids = c.prompt()
    assert_matches_reference(c.logits(ids), reference_logits(c, ids))


@pytest.mark.parametrize(
    ("hidden", "n_heads", "n_kv_heads"),
    [(64, 4, 4), (64, 4, 1), (128, 4, 2), (128, 2, 1)],
    ids=["mha", "mqa", "gqa-head32", "head64"],
)
def test_head_layouts_match_reference(
    tmp_path: Path, hidden: int, n_heads: int, n_kv_heads: int
) -> None:
    c = Converted(tmp_path, EXACT, hidden=hidden, n_heads=n_heads, n_kv_heads=n_kv_heads)
    assert c.spec.head_dim == hidden // n_heads
    ids = c.prompt()
    assert_matches_reference(c.logits(ids), reference_logits(c, ids))


def test_untied_output_weight(tmp_path: Path) -> None:
    c = Converted(tmp_path, EXACT, tied=False)
    assert not c.spec.tied_embeddings
    ids = c.prompt()
    got = c.logits(ids)
    ref = c.reference()
    assert_matches_reference(got, ref.logits(ids))
    # ...and the graph really reads output.weight, not the embedding table.
    ref.head = ref.embed
    assert np.abs(got - ref.logits(ids)).max() > 1.0


@pytest.mark.parametrize(
    "options",
    [ConvertOptions(lm_head_int8=True), ConvertOptions(accuracy_level=4, lm_head_int8=True)],
    ids=["int8-lm-head", "int8-everywhere"],
)
@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q4_K"])
def test_int8_activations_keep_argmax(tmp_path: Path, qtype: str, options: ConvertOptions) -> None:
    dims = K_DIMS if qtype.endswith("_K") else {}
    c = Converted(tmp_path, options, qtype=qtype, **dims)
    ids = c.prompt(64)
    got, want = c.logits(ids), reference_logits(c, ids)
    agreement = float((got.argmax(-1) == want.argmax(-1)).mean())
    assert agreement >= 0.9, f"top-1 agreement {agreement:.0%}"
    # Int8 activations are approximate, but not by much.
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


# --- KV cache ---------------------------------------------------------------------------------


def test_incremental_decoding_matches_full_pass(tmp_path: Path) -> None:
    c = Converted(tmp_path, EXACT)
    ids = c.prompt(14)
    full = c.logits(ids)
    chunks = [ids[:6], ids[6:9], *([t] for t in ids[9:])]  # prefill, 3-token chunk, singles
    pasts, past_len, steps = c.empty_pasts(), 0, []
    for chunk in chunks:
        logits, pasts = c.run(np.array([chunk]), pasts, past_len)
        past_len += len(chunk)
        assert logits.shape == (1, len(chunk), c.spec.vocab_size)
        for name, value in pasts.items():
            assert value.shape == (1, c.spec.n_kv_heads, past_len, c.spec.head_dim), name
        steps.append(logits[0])
    incremental = np.concatenate(steps)
    np.testing.assert_allclose(incremental, full, rtol=0, atol=1e-4 * np.abs(full).max())
    np.testing.assert_array_equal(incremental.argmax(-1), full.argmax(-1))


def test_past_and_present_can_share_one_buffer(tmp_path: Path) -> None:
    """The shared-buffer layout: one [B, kvH, MAX, D] buffer bound as both past and present."""
    c = Converted(tmp_path, EXACT)
    ids = c.prompt(12)
    full = c.logits(ids)
    max_len = 32
    shape = (1, c.spec.n_kv_heads, max_len, c.spec.head_dim)
    buffers = {
        i: {kind: ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32)) for kind in kinds}
        for i, kinds in ((i, ("key", "value")) for i in range(c.spec.n_layers))
    }
    steps, pos = [], 0
    for chunk in [ids[:5], ids[5:8], *([t] for t in ids[8:])]:
        binding = c.session.io_binding()
        binding.bind_cpu_input("input_ids", np.array([chunk], np.int64))
        binding.bind_cpu_input("attention_mask", np.ones((1, pos + len(chunk)), np.int64))
        binding.bind_output("logits")
        for i, pair in buffers.items():
            for kind, value in pair.items():
                binding.bind_ortvalue_input(f"past_key_values.{i}.{kind}", value)
                binding.bind_ortvalue_output(f"present.{i}.{kind}", value)
        c.session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        steps.append(outputs[0].numpy()[0])
        # The presents are the very buffers that went in: nothing was reallocated.
        assert outputs[1].data_ptr() == buffers[0]["key"].data_ptr()
        assert outputs[1].shape() == list(shape)
        pos += len(chunk)
    incremental = np.concatenate(steps)
    np.testing.assert_allclose(incremental, full, rtol=0, atol=1e-4 * np.abs(full).max())
    np.testing.assert_array_equal(incremental.argmax(-1), full.argmax(-1))
    # The cache rows beyond what was written stay untouched.
    assert not buffers[0]["key"].numpy()[:, :, len(ids) :].any()
    assert buffers[0]["key"].numpy()[:, :, : len(ids)].any()


def test_batch_rows_are_independent(tmp_path: Path) -> None:
    c = Converted(tmp_path, EXACT)
    a, b = c.prompt(10, seed=1), c.prompt(10, seed=2)
    batch, _ = c.run(np.array([a, b]), c.empty_pasts(batch=2), 0)
    assert batch.shape == (2, 10, c.spec.vocab_size)
    np.testing.assert_allclose(batch[0], c.logits(a), rtol=0, atol=1e-4)
    np.testing.assert_allclose(batch[1], c.logits(b), rtol=0, atol=1e-4)


# --- graph signature and operators -------------------------------------------------------------


def dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in _shape(value)]


def _shape(value: onnx.ValueInfoProto) -> list[Any]:
    return list(value.type.tensor_type.shape.dim)


def elem_type(value: onnx.ValueInfoProto) -> int:
    return int(value.type.tensor_type.elem_type)


def test_genai_signature(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    spec = GGUFModel(tiny_gguf).spec
    graph = onnx.load(str(tiny_model_dir / "model.onnx"), load_external_data=False).graph
    inputs = {v.name: v for v in graph.input}
    outputs = {v.name: v for v in graph.output}
    assert list(inputs) == ["input_ids", "attention_mask", *past_names(spec), "logits_positions"]
    assert list(outputs) == ["logits", *present_names(spec)]
    # logits_positions is optional: an initializer too, empty (every position), so
    # onnxruntime-genai, which does not feed it, gets [B, S, vocab] as from any builder.
    defaults = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    assert defaults["logits_positions"].dtype == np.int64
    assert defaults["logits_positions"].shape == (0,)

    int64, f32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT
    assert elem_type(inputs["input_ids"]) == int64
    assert elem_type(inputs["attention_mask"]) == int64
    assert dims(inputs["input_ids"]) == ["batch_size", "sequence_length"]
    assert dims(inputs["attention_mask"]) == ["batch_size", "total_sequence_length"]
    assert elem_type(outputs["logits"]) == f32
    assert dims(outputs["logits"]) == ["batch_size", "logits_length", spec.vocab_size]
    for name in past_names(spec):
        assert elem_type(inputs[name]) == f32
        past = dims(inputs[name])
        assert len(past) == 4
        assert past[0] == "batch_size" and isinstance(past[2], str)
        assert past[1:4:2] == [spec.n_kv_heads, spec.head_dim]
    for name in present_names(spec):
        assert elem_type(outputs[name]) == f32
        present = dims(outputs[name])
        assert present[1:4:2] == [spec.n_kv_heads, spec.head_dim]
        assert isinstance(present[2], str)

    # What ONNX Runtime itself reports matches.
    session = new_session(tiny_model_dir)
    got = {i.name: (i.type, len(i.shape)) for i in session.get_inputs()}
    assert got["input_ids"] == ("tensor(int64)", 2)
    assert got["past_key_values.0.key"] == ("tensor(float)", 4)
    assert session.get_outputs()[0].name == "logits"


def test_graph_uses_fused_contrib_ops(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    spec = GGUFModel(tiny_gguf).spec
    model = onnx.load(str(tiny_model_dir / "model.onnx"), load_external_data=False)
    # The main graph and the prompt branch: what a prompt runs (steps: the step branch).
    split = next(n for n in model.graph.node if n.name == STEP_OR_PROMPT_NODE)
    prompt = next(a.g for a in split.attribute if a.name == "else_branch")
    nodes = [*model.graph.node, *prompt.node]
    count: dict[tuple[str, str], int] = {}
    for n in nodes:
        count[(n.domain, n.op_type)] = count.get((n.domain, n.op_type), 0) + 1
    ms = "com.microsoft"
    assert count.get((ms, "GroupQueryAttention")) == spec.n_layers
    # Every linear layer (fused qkv, o, fused gate/up, down) is a MatMulNBits.
    assert count.get((ms, "MatMulNBits"), 0) >= 4 * spec.n_layers
    assert ("", "MatMul") in count  # Q4_1's block minimums: blocksum(x) @ M^T
    assert count.get(("", "SimplifiedLayerNormalization")) == 1
    assert count.get((ms, "SkipSimplifiedLayerNormalization")) == 2 * spec.n_layers
    assert ("", "LayerNormalization") not in count
    assert (ms, "GatherBlockQuantized") in count  # the Q8_0 embedding stays 8-bit

    gqa = next(n for n in nodes if n.op_type == "GroupQueryAttention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gqa.attribute}
    assert attrs["num_heads"] == spec.n_heads
    assert attrs["kv_num_heads"] == spec.n_kv_heads
    assert attrs["do_rotary"] == 1
    assert list(gqa.output[1:]) == ["prompt/present.0.key", "prompt/present.0.value"]
    assert list(split.output[1:3]) == ["present.0.key", "present.0.value"]
    assert list(gqa.input[3:5]) == ["past_key_values.0.key", "past_key_values.0.value"]

    for node in nodes:
        if node.op_type == "MatMulNBits":
            a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
            assert a["bits"] in (4, 8) and a["block_size"] in (16, 32)
    imports = {o.domain: o.version for o in model.opset_import}
    assert ms in imports
