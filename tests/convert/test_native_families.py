"""Every family and every GGUF type through the native graph (`ConvertOptions(graph="native")`):
the numpy reference's logits for prompts (the kernels' float path) and single-token steps (their
integer path), both loops' greedy tokens as the stock graph's, and tensors of types the kernels do
not take keeping their stock nodes in the same graph (docs/converter.md, "Native kernels")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.gguf_blocks import NATIVE_DOMAIN, NATIVE_FORMATS, NATIVE_GATHER, NATIVE_OP
from chatapp.convert.gguf_file import GGUFModel
from chatapp.engine.engine import Engine
from chatapp.engine.native_kernels import library_path
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.graph import DECODE_ATTENTION, all_nodes
from scripts.shaped_gguf import SHAPES, Shape, plan, write_shaped_gguf
from tests.convert.reference import ReferenceModel
from tests.convert.test_families import CONTEXT, LAYOUTS, assert_matches, full_pass, prompt
from tests.convert.test_graph import STEP_TOLERANCE
from tests.tiny_families import FAMILIES, write_family_gguf

BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")
NATIVE = ConvertOptions(graph="native")
K_DIMS: dict[str, Any] = {"hidden": 256, "ffn": 512}  # K-quant super-blocks: K % 256 == 0

# llama.cpp's presets at tiny sizes, spread over the families: the layers' type, the embedding's
# and the head's (tied or not), and the preset's mixes (a Q6_K attn_v / ffn_down / head).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "Q4_0": ("llama3", {"qtype": "Q4_0", "embed_qtype": "Q4_0"}),
    "Q4_1": ("qwen2", {"qtype": "Q4_1"}),  # tied Q8_0 embedding, as the default model
    "Q5_0": ("gemma2", {"qtype": "Q5_0", "embed_qtype": "Q5_0"}),
    "Q5_1": (  # Q5_1 embedding, untied Q8_0 head
        "qwen3",
        {"qtype": "Q5_1", "embed_qtype": "Q5_1", "tied": False, "tensor_types": {"output": "Q8_0"}},
    ),
    "Q4_1 + Q6_K head": (
        "llama3",
        {
            **K_DIMS,
            "qtype": "Q4_1",
            "embed_qtype": "Q4_1",
            "tied": False,
            "tensor_types": {"output": "Q6_K"},
        },
    ),
    "Q8_0 untied head": ("phi3", {"tied": False}),
    "Q4_0 + Q8_0 head": (
        "llama-biases",
        {"qtype": "Q4_0", "embed_qtype": "Q4_0", "tied": False, "tensor_types": {"output": "Q8_0"}},
    ),
    "Q4_K_M": (
        "gemma3",
        {
            **K_DIMS,
            "head_dim": 64,
            "qtype": "Q4_K",
            "embed_qtype": "Q6_K",  # tied: the head reads the same Q6_K bytes
            "tensor_types": {"attn_v": "Q6_K", "ffn_down": "Q6_K"},
        },
    ),
    "Q5_K_M": (
        "phi4-mini",  # fused qkv and gate+up split by rows of K-quant blocks
        {
            **K_DIMS,
            "qtype": "Q5_K",
            "embed_qtype": "Q5_K",
            "tied": False,
            "tensor_types": {"output": "Q6_K"},
        },
    ),
    "Q6_K": (  # attn_output's rows of 4 x 32 take no super-block: Q8_0, as llama.cpp falls back
        "llama-head-dim",
        {**K_DIMS, "qtype": "Q6_K", "embed_qtype": "Q6_K", "tensor_types": {"attn_output": "Q8_0"}},
    ),
    "IQ4_XS": (
        "qwen2",
        {
            **K_DIMS,
            "qtype": "IQ4_XS",
            "embed_qtype": "IQ4_XS",
            "tied": False,
            "tensor_types": {"output": "Q6_K"},
        },
    ),
    # Qwen2.5-0.5B's Q4_K_M (hidden 896: no whole super-blocks): Q5_0 with biases, Q8_0 attn_v
    # on the more-bits layers (q, k, v in three nodes), Q4_K / Q6_K ffn_down, tied Q8_0.
    "Q4_K_M, rows of 64": (
        "qwen2",
        {"ffn": 256, "qtype": "Q5_0", "tensor_types": {"attn_v": "Q8_0", "ffn_down": "Q6_K"}},
    ),
    # Types without a kernel keep their stock node beside the native ones in one graph.
    "stock types beside": (
        "llama3",
        {
            **K_DIMS,
            "qtype": "Q4_K",
            "embed_qtype": "F16",
            "tied": False,
            "tensor_types": {
                "attn_k": "Q2_K",
                "attn_v": "Q3_K",
                "ffn_up": "F16",
                "ffn_down": "BF16",
                "output": "F32",
            },
        },
    ),
    "Q3_K layers, Q6_K head": (
        "gemma2",
        {**K_DIMS, "qtype": "Q3_K", "embed_qtype": "Q6_K", "tensor_types": {"attn_output": "Q4_K"}},
    ),
}


def native_qtypes(folder: Path) -> dict[str, set[str]]:
    """qtype attributes of the native nodes, by op type."""
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    found: dict[str, set[str]] = {}
    for node in all_nodes(graph):
        if node.domain == NATIVE_DOMAIN and node.op_type != DECODE_ATTENTION:
            qtype = next(a.s.decode() for a in node.attribute if a.name == "qtype")
            found.setdefault(node.op_type, set()).add(qtype)
    return found


def file_qtypes(gguf: Path) -> tuple[set[str], set[str]]:
    """The matrices' types with a kernel and without one (the embedding's included)."""
    types = {t.qtype for t in GGUFModel(gguf).tensors.values() if len(t.shape) == 2}
    return types & set(NATIVE_FORMATS), types - set(NATIVE_FORMATS)


def step_logits(engine: Engine, ids: list[int], mode: str) -> np.ndarray:
    """A 5-token prefill, then single-token steps (the kernels' integer path)."""
    loop = engine.loop(mode)
    loop.reset()
    rows = [loop.forward(ids[:5], all_logits=True).logits.copy()]
    rows += [loop.forward([t]).logits[None, :].copy() for t in ids[5:]]
    return np.concatenate(rows)


def assert_native_matches(gguf: Path, folder: Path, label: str) -> None:
    """Prompts and steps of both loops against the reference; 16 tokens stay inside
    Phi-4-mini's original context (one set of RoPE factors for every cached key)."""
    reference = ReferenceModel(gguf)
    ids = prompt(16, seed=2)
    want = reference.logits(ids)
    assert_matches(full_pass(folder, ids), want, f"{label} prompt")
    engine = Engine(folder, threads=1, max_context=CONTEXT)
    for mode in ("naive", "iobinding"):
        got = step_logits(engine, ids, mode)
        scale = float(np.abs(want).max())
        diff = float(np.abs(got - want).max())
        print(f"\n{label} {mode} steps: max |logit diff| {diff:.2e} (logits up to {scale:.1f})")
        assert diff <= STEP_TOLERANCE * scale, (label, mode)
        np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


@BUILT
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_on_native_kernels(tmp_path: Path, family: str) -> None:
    gguf = write_family_gguf(tmp_path / "m.gguf", family)
    folder = convert_gguf(gguf, tmp_path / "native", NATIVE)
    assert native_qtypes(folder) == {NATIVE_OP: {"Q8_0"}, NATIVE_GATHER: {"Q8_0"}}
    assert_native_matches(gguf, folder, family)


@BUILT
@pytest.mark.parametrize("layout", [name for name in LAYOUTS if name != "gqa"])
@pytest.mark.parametrize("family", ["llama-biases", "qwen3", "gemma2", "gemma3", "phi4-mini"])
def test_every_kv_layout_on_native_kernels(tmp_path: Path, family: str, layout: str) -> None:
    """Standard attention and the static layouts (one token, or windows of 4) around the same
    native projections."""
    gguf = write_family_gguf(tmp_path / "m.gguf", family)
    folder = convert_gguf(gguf, tmp_path / layout, replace(LAYOUTS[layout], graph="native"))
    assert NATIVE_OP in native_qtypes(folder)
    ids = prompt(16, seed=2)
    want = ReferenceModel(gguf).logits(ids)
    got = step_logits(Engine(folder, threads=1, max_context=CONTEXT), ids, "iobinding")
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= STEP_TOLERANCE * scale, (family, layout)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


@BUILT
@pytest.mark.parametrize("family", list(FAMILIES))
def test_both_loops_give_the_stock_graphs_tokens(tmp_path: Path, family: str) -> None:
    gguf = write_family_gguf(tmp_path / "m.gguf", family)
    start = prompt(6, seed=3)
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)
    tokens = {}
    for name, options in (("stock", ConvertOptions()), ("native", NATIVE)):
        engine = Engine(convert_gguf(gguf, tmp_path / name, options), threads=1, max_context=64)
        for mode in ("naive", "iobinding"):
            tokens[name, mode] = (
                engine.generate_ids(start, settings, mode, ignore_eos=True).run().token_ids
            )
    assert len({tuple(t) for t in tokens.values()}) == 1, tokens
    assert tokens["native", "naive"] == ReferenceModel(gguf).greedy(start, 8)


@BUILT
@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_on_native_kernels(tmp_path: Path, preset: str) -> None:
    family, changes = PRESETS[preset]
    gguf = write_family_gguf(tmp_path / "m.gguf", family, **changes)
    folder = convert_gguf(gguf, tmp_path / "native", NATIVE)
    with_kernel, without = file_qtypes(gguf)
    found = native_qtypes(folder)
    assert set().union(*found.values()) == with_kernel, found  # every such type on the kernels
    if without:  # ... and the rest on stock nodes in the same graph
        graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
        stock = {n.op_type for n in all_nodes(graph)} & {"MatMulNBits", "MatMul"}
        assert stock, preset
    assert_native_matches(gguf, folder, preset)


# --- llama.cpp's Q4_K_M mix for a hidden size of whole 32-blocks only (Gemma 3 270M: 640) ------

SMALL_GEMMA = Shape(
    "test gemma3",
    6,
    320,
    512,
    2,
    1,
    1e6,
    256,
    True,
    arch="gemma3",
    head_dim=128,
    vocab=600,
    window=8,
)


def test_gemma3_270m_shape_has_llama_cpps_q4_k_m_mix() -> None:
    """Rows of 640 values are no whole super-blocks: Q4_K falls back to Q5_0, Q6_K to Q8_0, and
    the tied embedding (the output's rules) is Q8_0; rows of 1024 and 2048 keep K-quants."""
    shape = SHAPES["gemma3-270m"]
    types = {t.name: t.qtype.name for t in plan(shape, "Q4_K_M", shape.vocab)}
    assert types["token_embd.weight"] == "Q8_0" and "output.weight" not in types
    assert types["blk.3.attn_q.weight"] == types["blk.3.ffn_up.weight"] == "Q5_0"
    assert types["blk.3.attn_output.weight"] == types["blk.3.ffn_down.weight"] == "Q4_K"
    more_bits = [i for i in range(18) if types[f"blk.{i}.ffn_down.weight"] == "Q6_K"]
    assert more_bits == [0, 1, 4, 7, 10, 13, 15, 16, 17]
    assert [i for i in range(18) if types[f"blk.{i}.attn_v.weight"] == "Q8_0"] == more_bits
    assert types["blk.0.attn_q_norm.weight"] == "F32"


@BUILT
def test_gemma3_q4_k_m_mix_on_native_kernels(tmp_path: Path, tiny_gguf: Path) -> None:
    """The mix of the real Gemma 3 270M file (Q5_0, Q8_0, Q4_K, Q6_K in one graph, tied Q8_0
    head over a token list padded with unused tokens) against the reference."""
    gguf = tmp_path / "gemma.gguf"
    write_shaped_gguf(gguf, SMALL_GEMMA, "Q4_K_M", tokenizer_source=tiny_gguf)
    model = GGUFModel(gguf)
    assert model.spec.vocab_size == 600
    assert {t.qtype for t in model.tensors.values()} == {"F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"}
    folder = convert_gguf(gguf, tmp_path / "native", NATIVE)
    assert native_qtypes(folder)[NATIVE_OP] == {"Q5_0", "Q8_0", "Q4_K", "Q6_K"}
    assert_native_matches(gguf, folder, "gemma3 Q4_K_M mix")
