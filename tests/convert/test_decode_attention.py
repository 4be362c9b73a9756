"""chatapp.gguf.DecodeAttention (native/decode_attention.inc) against ONNX Runtime's own
GroupQueryAttention on the same inputs: the op replaces it in native graphs' decode steps, so
it must give the same output and the same KV buffers, with a sliding window and soft-capping,
partial RoPE, grouped heads, several sequences of different lengths, a shared buffer (IO-Binding)
and a copied past (the naive loop), on each instruction set this machine offers.
Skipped when the library is not built (`make native`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from chatapp.convert.attention import DECODE_ATTENTION_OP
from chatapp.folder_format.graph import NATIVE_DOMAIN
from tests.convert.native_library import NOT_BUILT, session

pytestmark = NOT_BUILT


@dataclass(frozen=True)
class Shape:
    heads: int
    kv_heads: int
    d: int
    rotary: int  # RoPE frequencies (the tables' width): rotates the first 2r values
    window: int  # 0: none
    softcap: float
    scale: float  # 0: 1/sqrt(d)


SHAPES = {
    "gemma-like": Shape(4, 1, 64, 32, 8, 50.0, 0.125),
    "llama-like": Shape(8, 2, 32, 16, 0, 0.0, 0.0),
    "partial rope": Shape(6, 3, 48, 8, 0, 0.0, 0.0),
    "one head a group": Shape(2, 2, 16, 8, 5, 0.0, 0.0),
    "twelve heads a group": Shape(12, 1, 32, 16, 0, 0.0, 0.0),  # more than a pass of 8 dots
}
POSITIONS = 300  # RoPE table rows


def model(op: str, s: Shape, shapes: bool = True) -> onnx.ModelProto:
    """One attention node; `shapes=False` declares no input shapes, so that the op itself sees
    what a damaged graph would feed it."""
    attrs: dict[str, object] = {"num_heads": s.heads, "kv_num_heads": s.kv_heads, "scale": s.scale}
    if op == "GroupQueryAttention":
        attrs.update(do_rotary=1, rotary_interleaved=0)
        if s.softcap:
            attrs["softcap"] = s.softcap
        if s.window:
            attrs["local_window_size"] = s.window
        domain = "com.microsoft"
    else:
        attrs.update(softcap=s.softcap, local_window_size=s.window or -1)
        domain = NATIVE_DOMAIN
    names = ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total", "cos", "sin"]
    node = helper.make_node(
        op, names, ["out", "present_key", "present_value"], domain=domain, **attrs
    )
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    inputs = [
        helper.make_tensor_value_info("q", f, ["b", "s", s.heads * s.d]),
        helper.make_tensor_value_info("k", f, ["b", "s", s.kv_heads * s.d]),
        helper.make_tensor_value_info("v", f, ["b", "s", s.kv_heads * s.d]),
        helper.make_tensor_value_info("past_key", f, ["b", s.kv_heads, "p", s.d]),
        helper.make_tensor_value_info("past_value", f, ["b", s.kv_heads, "p", s.d]),
        helper.make_tensor_value_info("seqlens_k", i32, ["b"]),
        helper.make_tensor_value_info("total", i32, [1]),
        helper.make_tensor_value_info("cos", f, [POSITIONS, s.rotary]),
        helper.make_tensor_value_info("sin", f, [POSITIONS, s.rotary]),
    ]
    if not shapes:
        inputs = [
            helper.make_tensor_value_info(i.name, i.type.tensor_type.elem_type, None)
            for i in inputs
        ]
    outputs = [helper.make_tensor_value_info(n, f, None) for n in node.output]
    graph = helper.make_graph([node], op, inputs, outputs)
    return helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", 17),
            helper.make_opsetid("com.microsoft", 1),
            helper.make_opsetid(NATIVE_DOMAIN, 1),
        ],
    )


def feeds(
    s: Shape, lengths: list[int], past: int, seed: int = 0, new: int = 1
) -> dict[str, np.ndarray]:
    """`new` tokens a sequence, the last at position lengths[b]."""
    rng = np.random.default_rng(seed)
    b = len(lengths)
    angles = np.arange(POSITIONS)[:, None] / (100.0 ** (np.arange(s.rotary) / s.rotary))[None, :]
    f32 = np.float32
    return {
        # Scaled so that the soft cap and the softmax both bite.
        "q": (rng.normal(0, 3, (b, new, s.heads * s.d))).astype(f32),
        "k": (rng.normal(0, 3, (b, new, s.kv_heads * s.d))).astype(f32),
        "v": rng.normal(0, 1, (b, new, s.kv_heads * s.d)).astype(f32),
        "past_key": rng.normal(0, 3, (b, s.kv_heads, past, s.d)).astype(f32),
        "past_value": rng.normal(0, 1, (b, s.kv_heads, past, s.d)).astype(f32),
        "seqlens_k": np.array(lengths, np.int32),
        "total": np.array([max(lengths) + 1], np.int32),
        "cos": np.cos(angles).astype(f32),
        "sin": np.sin(angles).astype(f32),
    }


def run_copied(op: str, s: Shape, x: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The naive loop's way: numpy past in, a new present out."""
    return session(model(op, s)).run(None, x)


def run_shared(op: str, s: Shape, x: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The IO-Binding loop's way: past and present one buffer, written in place."""
    sess = session(model(op, s))
    binding = sess.io_binding()
    # The OrtValues borrow these arrays' memory: they are kept alive here.
    arrays = {n: x[n].copy() for n in ("past_key", "past_value")}
    kv = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in arrays.items()}
    for name, value in x.items():
        if name in kv:
            binding.bind_ortvalue_input(name, kv[name])
        else:
            binding.bind_cpu_input(name, value)
    binding.bind_output("out", "cpu")
    binding.bind_ortvalue_output("present_key", kv["past_key"])
    binding.bind_ortvalue_output("present_value", kv["past_value"])
    sess.run_with_iobinding(binding)
    return [binding.get_outputs()[0].numpy(), arrays["past_key"], arrays["past_value"]]


def assert_same(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    assert ours[0].shape == theirs[0].shape
    np.testing.assert_allclose(ours[0], theirs[0], rtol=2e-5, atol=2e-5)
    # The KV rows are copies and one RoPE rotation: the same to a rounding.
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_step_is_group_query_attention_with_a_shared_buffer(name: str, isa: str) -> None:
    s = SHAPES[name]
    # Lengths around the window's edge and past several 128-position chunks.
    lengths = [0, 1, s.window - 1, s.window, s.window + 1, 129, 257, 280]
    x = feeds(s, [n for n in lengths if n >= 0], past=290)
    assert_same(run_shared(DECODE_ATTENTION_OP, s, x), run_shared("GroupQueryAttention", s, x))


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_step_is_group_query_attention_with_a_copied_past(name: str, isa: str) -> None:
    s = SHAPES[name]
    for lengths in ([0], [7], [200], [200, 3]):
        x = feeds(s, lengths, past=max(lengths), seed=len(lengths))
        assert_same(run_copied(DECODE_ATTENTION_OP, s, x), run_copied("GroupQueryAttention", s, x))


def step_by_step(s: Shape, x: dict[str, np.ndarray], past: int) -> list[np.ndarray]:
    """The prompt in `x` run as one step a token, on one shared buffer: each row's output and
    the KV buffers the steps leave."""
    new = x["q"].shape[1]
    arrays = {n: x[n].copy() for n in ("past_key", "past_value")}
    sess = session(model(DECODE_ATTENTION_OP, s))
    rows = []
    for i in range(new):
        step = {n: x[n][:, i : i + 1] for n in ("q", "k", "v")}
        step["seqlens_k"] = x["seqlens_k"] - (new - 1 - i)
        step["total"] = np.array([int(step["seqlens_k"].max()) + 1], np.int32)
        step["cos"], step["sin"] = x["cos"], x["sin"]
        binding = sess.io_binding()
        kv = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in arrays.items()}
        for name, value in step.items():
            binding.bind_cpu_input(name, value)
        for name in kv:
            binding.bind_ortvalue_input(name, kv[name])
        binding.bind_output("out", "cpu")
        binding.bind_ortvalue_output("present_key", kv["past_key"])
        binding.bind_ortvalue_output("present_value", kv["past_value"])
        sess.run_with_iobinding(binding)
        rows.append(binding.get_outputs()[0].numpy())
    return [np.concatenate(rows, axis=1), arrays["past_key"], arrays["past_value"]]


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_prompt_gives_each_row_the_bits_of_its_step(name: str, isa: str) -> None:
    """Issue 49: a prompt's rows (fresh, a chunk after a cached prefix, beside another
    sequence) are bit for bit the steps at their positions, so an answer does not depend on
    how its prompt was cut; and within a rounding of GroupQueryAttention's prompt."""
    s = SHAPES[name]
    past = 290
    # Fresh from 0, across the window's edge, past several 128-position chunks; two sequences.
    for new, lengths in ((40, [39]), (19, [s.window + 20]), (150, [279]), (30, [140, 31])):
        x = feeds(s, lengths, past=past, seed=new, new=new)
        whole = run_shared(DECODE_ATTENTION_OP, s, x)
        steps = step_by_step(s, x, past)
        for got, want in zip(whole, steps, strict=True):
            np.testing.assert_array_equal(got, want)
        if len(lengths) == 1:  # its only batched prompts: first ones, right-padded
            gqa = run_shared("GroupQueryAttention", s, x)
            assert_same(whole, gqa)


def test_a_right_padded_first_prompt_leaves_its_padding_alone() -> None:
    s = SHAPES["llama-like"]
    x = feeds(s, [9, 4], past=12, seed=5, new=10)
    x["total"] = np.array([10], np.int32)
    ours, theirs = run_shared(DECODE_ATTENTION_OP, s, x), run_shared("GroupQueryAttention", s, x)
    np.testing.assert_allclose(ours[0][0], theirs[0][0], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(ours[0][1, :5], theirs[0][1, :5], rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(ours[0][1, 5:], 0)


def test_the_thread_count_does_not_change_a_bit() -> None:
    s = SHAPES["gemma-like"]
    x = feeds(s, [280, 5], past=290, seed=3)
    one = session(model(DECODE_ATTENTION_OP, s), threads=1).run(None, x)
    two = session(model(DECODE_ATTENTION_OP, s), threads=2).run(None, x)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
    x = feeds(s, [200, 60], past=290, seed=4, new=50)
    one = session(model(DECODE_ATTENTION_OP, s), threads=1).run(None, x)
    two = session(model(DECODE_ATTENTION_OP, s), threads=2).run(None, x)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"seqlens_k": np.array([400], np.int32)}, "outside the KV buffer"),
        ({"seqlens_k": np.array([-1], np.int32)}, "outside the KV buffer"),
        ({"q": np.zeros((1, 1, 7), np.float32)}, "do not match"),
        ({"cos": np.zeros((POSITIONS, 40), np.float32)}, "RoPE tables"),
    ],
)
def test_inputs_that_do_not_fit_are_refused_in_words(
    change: dict[str, np.ndarray], words: str
) -> None:
    s = SHAPES["gemma-like"]
    x = feeds(s, [10], past=20) | change
    with pytest.raises(Exception, match=words):
        session(model(DECODE_ATTENTION_OP, s, shapes=False)).run(None, x)


def test_heads_that_do_not_divide_are_refused_when_the_session_opens() -> None:
    m = model(DECODE_ATTENTION_OP, Shape(5, 2, 16, 8, 0, 0.0, 0.0))
    with pytest.raises(Exception, match="multiple of kv_num_heads"):
        session(m)
