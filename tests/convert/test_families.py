"""Every family (tests/tiny_families.py) against its numpy reference: full passes, every KV
layout with both loops, and the refusals (unknown tensors, missing ones, unknown names)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.errors import ConversionError
from chatapp.convert.families import FAMILIES as CONVERTER_FAMILIES
from chatapp.convert.families import ModelWeights
from chatapp.convert.families.gemma import Gemma2, Gemma3
from chatapp.convert.gguf_file import GGUFModel
from chatapp.engine.engine import Engine
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.graph import all_nodes
from tests.convert.reference import ReferenceModel
from tests.tiny_families import FAMILIES, write_family_gguf

CONTEXT = 64
LAYOUTS = {
    "gqa": ConvertOptions(),
    "standard": ConvertOptions(attention="standard"),
    "static": ConvertOptions(kv_layout="static", attention="standard", context_length=CONTEXT),
    "static-w4": ConvertOptions(
        kv_layout="static", attention="standard", context_length=CONTEXT, window=4
    ),
}


def prompt(length: int, seed: int = 1) -> list[int]:
    return [int(i) for i in np.random.default_rng(seed).integers(3, 269, length)]


def full_pass(folder: Path, ids: list[int]) -> np.ndarray:
    engine = Engine(folder, mode="naive", threads=1, max_context=CONTEXT)
    return engine.loop().forward(ids, all_logits=True).logits


def assert_matches(got: np.ndarray, want: np.ndarray, label: str) -> None:
    """Max |logit diff| small against the logit scale, and the same top-1 at every position."""
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    top1 = float((got.argmax(-1) == want.argmax(-1)).mean())
    print(f"\n{label}: max |logit diff| {diff:.2e} (logits up to {scale:.1f}), top-1 {top1:.0%}")
    assert scale > 1.0, "the reference logits are degenerate"
    assert diff <= 1e-4 * scale, label
    assert top1 == 1.0, label


def convert(tmp_path: Path, family: str, options: ConvertOptions, **changes: object) -> Path:
    gguf = write_family_gguf(tmp_path / f"{family}.gguf", family, **changes)
    return convert_gguf(gguf, tmp_path / "model", options)


# --- agreement with the reference --------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_match_reference(tmp_path: Path, family: str) -> None:
    gguf = write_family_gguf(tmp_path / "m.gguf", family)
    reference = ReferenceModel(gguf)
    for attention in ("gqa", "standard"):
        folder = convert_gguf(gguf, tmp_path / attention, ConvertOptions(attention=attention))
        # 8 tokens stay inside Gemma's 5-token window... almost; 24 cross it (and Phi-4-mini's
        # original context of 16, so its long RoPE factors apply).
        for length in (8, 24):
            ids = prompt(length)
            got = full_pass(folder, ids)
            assert_matches(got, reference.logits(ids), f"{family} {attention} {length} tokens")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_layout_and_loop_decodes_like_the_reference(tmp_path: Path, family: str) -> None:
    """Prefill, a 3-token chunk, then single tokens: the logits of one full reference pass;
    and both loops produce the reference's greedy tokens."""
    gguf = write_family_gguf(tmp_path / "m.gguf", family)
    reference = ReferenceModel(gguf)
    ids = prompt(16, seed=2)  # within Phi-4-mini's original context: one set of RoPE factors
    want = reference.logits(ids)
    start = prompt(6, seed=3)
    greedy_want = reference.greedy(start, 8)
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)
    for layout, options in LAYOUTS.items():
        folder = convert_gguf(gguf, tmp_path / layout, options)
        engine = Engine(folder, threads=1, max_context=CONTEXT)
        for mode in ("naive", "iobinding"):
            loop = engine.loop(mode)
            loop.reset()
            rows = [loop.forward(ids[:5], all_logits=True).logits.copy()]
            rows.append(loop.forward(ids[5:8], all_logits=True).logits.copy())
            rows += [loop.forward([t]).logits[None, :].copy() for t in ids[8:]]
            assert_matches(np.concatenate(rows), want, f"{family} {layout} {mode}")
            loop.reset()
            run = engine.generate_ids(start, settings, mode, ignore_eos=True).run()
            assert run.token_ids == greedy_want, (layout, mode)


def test_gemma3_sliding_window_pattern_from_the_file(tmp_path: Path) -> None:
    for pattern in (3, [True, False, True, True, False, False, True]):
        gguf = write_family_gguf(tmp_path / "g.gguf", "gemma3", swa_pattern=pattern)
        folder = convert_gguf(gguf, tmp_path / "m", ConvertOptions(overwrite=True))
        ids = prompt(20)
        assert_matches(full_pass(folder, ids), ReferenceModel(gguf).logits(ids), str(pattern))


def test_partial_rotary_that_gqa_cannot_rotate(tmp_path: Path) -> None:
    """8 of 32 dimensions: GroupQueryAttention's tables need a multiple of 16; standard works."""
    gguf = write_family_gguf(tmp_path / "p.gguf", "phi4-mini", rope_dims=8)
    with pytest.raises(ConversionError, match=r"rotate 8 of 32 .*--attention standard"):
        convert_gguf(gguf, tmp_path / "gqa")
    folder = convert_gguf(gguf, tmp_path / "std", ConvertOptions(attention="standard"))
    ids = prompt(12)
    assert_matches(full_pass(folder, ids), ReferenceModel(gguf).logits(ids), "rope 8 of 32")


# --- the graph and the folder -------------------------------------------------------------------


def attributes(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def test_gemma2_uses_group_query_attention_features(tmp_path: Path) -> None:
    folder = convert(tmp_path, "gemma2", ConvertOptions())
    graph = onnx.load(str(folder / "model.onnx")).graph
    gqa = [attributes(n) for n in all_nodes(graph) if n.op_type == "GroupQueryAttention"]
    # The 3 layers twice: the step and prompt branches (step_split.py) each hold them.
    assert [a.get("local_window_size", -1) for a in gqa] == [5, -1, 5] * 2  # 0 and 2 local
    assert all(a["softcap"] == pytest.approx(4.0) for a in gqa)
    assert all(a["scale"] == pytest.approx(1 / np.sqrt(16)) for a in gqa)
    assert any(n.op_type == "Gelu" for n in all_nodes(graph))


@pytest.mark.parametrize(
    ("family", "model_type", "genai_type"),
    [
        ("qwen2", "qwen2", "qwen2"),
        ("qwen3", "qwen3", "qwen3"),
        ("gemma2", "gemma2", "gemma2"),
        ("gemma3", "gemma3_text", "gemma3_text"),
        ("phi4-mini", "phi3", "phi3"),
    ],
)
def test_config_files_name_the_family(
    tmp_path: Path, family: str, model_type: str, genai_type: str
) -> None:
    folder = convert(tmp_path, family, ConvertOptions())
    config = json.loads((folder / "config.json").read_text())
    genai = json.loads((folder / "genai_config.json").read_text())
    assert config["model_type"] == model_type
    assert genai["model"]["type"] == genai_type
    assert config["head_dim"] == GGUFModel(tmp_path / f"{family}.gguf").spec.head_dim
    if family == "phi4-mini":
        assert config["partial_rotary_factor"] == 0.5
        assert config["original_max_position_embeddings"] == 16
    if family == "gemma3":
        assert config["sliding_window"] == 5
        assert config["rope_local_base_freq"] == 10000.0


def test_query_scale_of_the_27b_gemmas() -> None:
    """llama.cpp: 1/sqrt(hidden/heads) for the 27B models (by layer count), else 1/sqrt(D)."""

    def model(layers: int) -> SimpleNamespace:
        spec = SimpleNamespace(n_layers=layers, hidden_size=4608, n_heads=32, head_dim=128)
        return SimpleNamespace(spec=spec)

    assert Gemma2().query_pre_attn_scalar(model(46)) == 144  # type: ignore[arg-type]
    assert Gemma2().query_pre_attn_scalar(model(42)) == 128  # type: ignore[arg-type]
    assert Gemma3().query_pre_attn_scalar(model(62)) == 144  # type: ignore[arg-type]
    assert Gemma3().query_pre_attn_scalar(model(46)) == 128  # type: ignore[arg-type]


# --- refusals -----------------------------------------------------------------------------------

REFUSED = {
    "unused-bias": (
        {"family": "qwen3", "qkv_bias": True},
        r"tensors this converter does not use for a 'qwen3' model: 'blk\.0\.attn_q\.bias'",
    ),
    "moe-router": (
        {"family": "llama3", "extra_tensors": ("blk.1.ffn_gate_inp.weight",)},
        r"'blk\.1\.ffn_gate_inp\.weight'.*mixture-of-experts",
    ),
    "vision-tower": (
        {"family": "gemma3", "extra_tensors": ("v.blk.0.attn_q.weight",)},
        r"'v\.blk\.0\.attn_q\.weight' \(vision encoders are not supported\)",
    ),
    "layer-past-the-end": (
        {"family": "qwen2", "extra_tensors": ("blk.2.attn_norm.weight",)},
        r"'blk\.2\.attn_norm\.weight'",
    ),
    "rope-freqs-in-qwen": (
        {"family": "qwen2", "rope_freqs": True},
        r"'rope_freqs\.weight'",
    ),
    "missing-post-norm": (
        {"family": "gemma2", "post_norms": False},
        r"no tensor 'blk\.0\.post_attention_norm\.weight', which a 'gemma2' model needs",
    ),
    "missing-qk-norm": (
        {"family": "qwen3", "qk_norm": False},
        r"no tensor 'blk\.0\.attn_q_norm\.weight'",
    ),
    "mistral3": (
        {"family": "llama-biases", "arch": "mistral3"},
        r"'mistral3' model: .*YaRN",
    ),
    "mistral": ({"family": "llama3", "arch": "mistral"}, r"Mistral 7B and Nemo files say 'llama'"),
    "stablelm": (
        {"family": "llama3", "arch": "stablelm"},
        r"'stablelm' model: .*Supported architectures: llama, qwen2",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refusals_name_the_problem(tmp_path: Path, case: str) -> None:
    changes, message = REFUSED[case]
    changes = dict(changes)
    family = str(changes.pop("family"))
    gguf = write_family_gguf(tmp_path / "m.gguf", family, **changes)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=message) as info:
        convert_gguf(gguf, out)
    assert "\n" not in str(info.value)
    assert not out.exists()


def test_shape_that_contradicts_the_metadata(tmp_path: Path) -> None:
    model = GGUFModel(write_family_gguf(tmp_path / "m.gguf", "llama3"))
    model.spec = replace(model.spec, head_dim=32)  # as if key_length said 32: heads are 16 wide
    reader = ModelWeights(model, CONVERTER_FAMILIES["llama"])
    with pytest.raises(ConversionError, match=r"'blk\.0\.attn_q\.weight' is 64 x 64; .* 128 x 64"):
        reader.layer(0)
