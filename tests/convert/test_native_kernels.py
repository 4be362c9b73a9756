"""chatapp.gguf.GgufMatMul (native/) against a numpy dequantization of the same GGUF blocks.

Every format with a kernel, odd shapes, one row (the integer path) and several (the float paths:
the library's tiles for short prompts, ONNX Runtime's Gemm for long ones),
on each instruction set this machine offers (CHATAPP_GGUF_ISA asks for less: every path a CPU
has is checked against the same numpy reference, so an AVX-512 machine checks its VNNI kernels,
its AVX2 ones and the scalar ones alike). Skipped when the library is not built (`make native`).
"""

from __future__ import annotations

import gguf
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from chatapp.convert.gguf_blocks import NATIVE_DOMAIN, NATIVE_FORMATS, NATIVE_OP
from chatapp.engine.native_kernels import library_isa
from tests.convert.native_library import NOT_BUILT, on_every_path, session
from tests.tiny_model import K_QUANT_SCALE_FIELDS, random_kquant

pytestmark = NOT_BUILT


def gguf_blocks(qtype: str, n: int, k: int, seed: int = 0) -> np.ndarray:
    """Raw GGUF bytes [n, row bytes]: gguf-py's quantizer where it has one, else random blocks."""
    rng = np.random.default_rng(seed)
    if qtype in K_QUANT_SCALE_FIELDS or qtype in ("Q4_K", "Q6_K"):
        return random_kquant(n, k, qtype, rng)
    w = rng.normal(0.0, 0.5, size=(n, k)).astype(np.float32)
    return np.asarray(gguf.quants.quantize(w, gguf.GGMLQuantizationType[qtype]))


def dequantized(qtype: str, raw: np.ndarray) -> np.ndarray:
    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype]).astype(np.float64)


def matmul_model(qtype: str, raw: np.ndarray, k: int) -> onnx.ModelProto:
    node = helper.make_node(
        NATIVE_OP, ["x", "w"], ["y"], domain=NATIVE_DOMAIN, qtype=qtype, K=k, N=raw.shape[0]
    )
    graph = helper.make_graph(
        [node],
        "gguf_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "rows", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(raw, "w")],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NATIVE_DOMAIN, 1)],
    )


LEVELS = np.float32(32512)  # 127 x 256: the largest |q| whose two int8 levels fit


def rounded(x: np.ndarray) -> np.ndarray:
    """What a step multiplies by: x rounded to int16 per block of 32, s = max|x| / 32512 (the
    kernels' own float32 arithmetic, ties to even), held as two int8 levels q = 255 hi + lo."""
    k = x.shape[-1]
    blocks = x.reshape(*x.shape[:-1], k // 32, 32).astype(np.float32)
    amax = np.abs(blocks).max(-1, keepdims=True)
    safe = np.where(amax > 0, amax, np.float32(1))
    inv = np.where(amax > 0, LEVELS / safe, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv)
    high = np.rint(q / np.float32(255))
    assert np.abs(high).max() <= 127 and np.abs(q - 255 * high).max() <= 127
    return (q * (amax / LEVELS)).reshape(x.shape).astype(np.float64)


def float_terms(x_rounded: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The size of the float terms a kernel sums: per block of 32, |x| summed times 4 max|w|
    (a block minimum m and the code part d c of w = d c + m are each at most 2-3 max|w| when
    the block's codes spread, and they are summed separately: their cancellation is the
    format's, as in llama.cpp)."""
    k = x_rounded.shape[-1]
    x_blocks = np.abs(x_rounded).reshape(k // 32, 32).sum(-1)
    w_blocks = np.abs(w).reshape(w.shape[0], k // 32, 32).max(-1)
    return 4.0 * (w_blocks @ x_blocks)


def step_bound(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What int16 activations per block of 32 may leave out: half a step, max|x_b| / 65024, per
    element, summed with |w| (plus float32 rounding of the sums)."""
    k = x.shape[-1]
    blocks = np.abs(x).reshape(*x.shape[:-1], k // 32, 32).max(-1) / 65024.0
    per_element = np.repeat(blocks, 32, axis=-1)
    return per_element @ np.abs(w).T + 1e-6 * (np.abs(x) @ np.abs(w).T)


def activations(rows: int, k: int, seed: int = 1) -> np.ndarray:
    """Normal values with the hard cases in row 0: an outlier of 300, a block of 1e-6 values,
    an all-zero block."""
    x = np.random.default_rng(seed).normal(size=(rows, k)).astype(np.float32)
    x[0, 3] = 300.0
    x[0, 32:64] *= 1e-6
    if k >= 96:
        x[0, 64:96] = 0.0
    return x


def widths(qtype: str) -> list[int]:
    values = NATIVE_FORMATS[qtype][0]
    return [values, 3 * values] if values == 256 else [32, 96, 576]


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
def test_one_row_is_the_product_with_int16_activations(qtype: str, isa: str) -> None:
    """Every path computes W . x_rounded, up to float32 sums (the integer dot products are
    exact), and so stays within half an int16 step per element of the float product."""
    for k in widths(qtype):
        for n in (1, 5, 37):  # 4-row groups, their remainder, several tasks
            raw = gguf_blocks(qtype, n, k, seed=n)
            w = dequantized(qtype, raw)
            x = activations(1, k)
            got = session(matmul_model(qtype, raw, k)).run(None, {"x": x[None]})[0][0]
            x_rounded = rounded(x)
            want = x_rounded @ w.T
            float_sums = 1e-5 * float_terms(x_rounded, w) + 1e-30
            assert got.shape == want.shape
            assert np.all(np.abs(got - want) <= float_sums), (qtype, isa, k, n)
            exact = x.astype(np.float64) @ w.T
            assert np.all(np.abs(got - exact) <= step_bound(x, w)), (qtype, isa, k, n)


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
def test_step_rows_of_several_sequences_are_each_the_one_row_product(qtype: str, isa: str) -> None:
    """[m, 1, K]: one new token of each of m sequences (engine/slots.py). Each row takes the
    one-token integer path, bit for bit the product that row gets alone, not the prompt's float
    path (where a sequence's answer would depend on the others in its batch)."""
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 37, k)
    run = session(matmul_model(qtype, raw, k))
    x = activations(5, k)
    together = run.run(None, {"x": x[:, None, :]})[0]
    assert together.shape == (5, 1, 37)
    for r in range(5):
        alone = run.run(None, {"x": x[r][None, None, :]})[0]
        np.testing.assert_array_equal(together[r], alone[0], err_msg=f"{qtype} {isa} row {r}")


GEMM_ROWS = 64  # the library's default: prompts of this many rows or more take the Gemm tiles
FEW_ROWS = 6  # and prompts of 2 to this many rows the few-rows path (native/few_rows.inc)


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
@pytest.mark.parametrize(
    "rows", [2, 3, FEW_ROWS, FEW_ROWS + 1, GEMM_ROWS - 1, GEMM_ROWS, GEMM_ROWS + 5]
)
def test_several_rows_are_the_float_product(
    qtype: str, rows: int, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every float prompt path (a few rows up to FEW_ROWS, the library's own tiles below
    GEMM_ROWS, ONNX Runtime's Gemm from there) multiplies by the exactly dequantized weights in
    float32: within 1e-5 of sum |x||w|. 131 weight rows: eight whole tasks of 16 and a partial
    one; 2..69 activation rows: every tile height (six rows a tile) and both sides of each
    threshold."""
    monkeypatch.delenv("CHATAPP_GGUF_GEMM_ROWS", raising=False)
    monkeypatch.delenv("CHATAPP_GGUF_FEW_ROWS", raising=False)
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 131, k)
    w = dequantized(qtype, raw)
    x = activations(rows, k)[None]
    got = session(matmul_model(qtype, raw, k)).run(None, {"x": x})[0]
    want = x.astype(np.float64) @ w.T
    scale = np.abs(x).astype(np.float64) @ np.abs(w).T
    assert got.shape == (1, rows, 131)
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), (qtype, isa, rows)


@pytest.mark.parametrize("few_rows", ["0", "8"])
def test_a_few_rows_agree_with_the_tiles(few_rows: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CHATAPP_GGUF_FEW_ROWS=0 sends 2-8 rows to the tiles, 8 to the few-rows path: both are
    the float product of every format, odd K and a weight count that is no multiple of 16."""
    monkeypatch.setenv("CHATAPP_GGUF_FEW_ROWS", few_rows)
    for qtype in NATIVE_FORMATS:
        k = widths(qtype)[-1]
        raw = gguf_blocks(qtype, 37, k, seed=5)
        w = dequantized(qtype, raw)
        for rows in (2, 5, 8):
            x = activations(rows, k, seed=rows)[None]
            got = session(matmul_model(qtype, raw, k)).run(None, {"x": x})[0]
            want = x.astype(np.float64) @ w.T
            scale = np.abs(x).astype(np.float64) @ np.abs(w).T
            assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), (qtype, rows, few_rows)


@pytest.mark.parametrize("gemm_rows", ["2", "1000"])
def test_the_threshold_picks_the_path(gemm_rows: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CHATAPP_GGUF_GEMM_ROWS moves the threshold (2: every prompt on Gemm; 1000: none), and
    either path gives the float product of shapes with batch dimensions and odd K."""
    monkeypatch.setenv("CHATAPP_GGUF_GEMM_ROWS", gemm_rows)
    for qtype, n in (("Q4_1", 37), ("Q6_K", 16), ("Q8_0", 3)):
        k = widths(qtype)[1]
        raw = gguf_blocks(qtype, n, k)
        w = dequantized(qtype, raw)
        x = activations(10, k).reshape(2, 5, k)
        got = session(matmul_model(qtype, raw, k)).run(None, {"x": x})[0]
        want = x.astype(np.float64) @ w.T
        scale = np.abs(x).astype(np.float64) @ np.abs(w).T
        assert got.shape == (2, 5, n)
        assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), (qtype, gemm_rows)


@pytest.mark.parametrize("prompt", ["float", "int16"])
@pytest.mark.parametrize("rows", [1, 9, 40])
def test_one_thread_and_two_agree(rows: int, prompt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATAPP_GGUF_GEMM_ROWS", raising=False)
    monkeypatch.setenv("CHATAPP_GGUF_PROMPT", prompt)
    raw = gguf_blocks("Q4_K", 70, 512)
    x = activations(rows, 512)[None]
    one = session(matmul_model("Q4_K", raw, 512), threads=1).run(None, {"x": x})[0]
    two = session(matmul_model("Q4_K", raw, 512), threads=2).run(None, {"x": x})[0]
    np.testing.assert_array_equal(one, two)  # each output is computed the same way by any thread


def test_the_library_names_its_instruction_set() -> None:
    assert library_isa() in ("avx512vnni", "avx2", "scalar")


def test_a_weight_of_the_wrong_size_is_an_error() -> None:
    raw = gguf_blocks("Q8_0", 4, 64)
    model = matmul_model("Q8_0", raw, 96)  # K says 3 blocks a row, the bytes hold 2
    with pytest.raises(Exception, match="weight is not"):
        session(model).run(None, {"x": np.zeros((1, 1, 96), np.float32)})


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
@pytest.mark.parametrize("rows", [2, 17, 33, 69])
def test_the_int16_prompt_is_the_product_with_int16_activations(
    qtype: str, rows: int, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHATAPP_GGUF_PROMPT=int16: every prompt row rounded as a step rounds it, times the exact
    weights (integer sums per group, scaled in float), on every path. 131 weight rows: tiles of
    four and of one, a partial task; 2..69 rows: tiles of 32 and 16 activation rows, padding."""
    monkeypatch.setenv("CHATAPP_GGUF_PROMPT", "int16")
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 131, k)
    w = dequantized(qtype, raw)
    x = activations(rows, k)
    got = session(matmul_model(qtype, raw, k)).run(None, {"x": x[None]})[0][0]
    assert got.shape == (rows, 131)
    for i in range(rows):
        x_rounded = rounded(x[i])
        want = x_rounded @ w.T
        float_sums = 1e-5 * float_terms(x_rounded, w) + 1e-30
        assert np.all(np.abs(got[i] - want) <= float_sums), (qtype, isa, rows, i)
        exact = x[i].astype(np.float64) @ w.T
        assert np.all(np.abs(got[i] - exact) <= step_bound(x[i], w)), (qtype, isa, rows, i)


def test_every_path_gives_the_same_int16_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The int16 prompt's integer sums are exact and its float steps are the same on every path
    (scalar, AVX2, AVX-512 VNNI): the same bits."""
    monkeypatch.setenv("CHATAPP_GGUF_PROMPT", "int16")
    for qtype in ("Q4_K", "Q6_K", "Q8_0"):
        k = widths(qtype)[-1]
        raw = gguf_blocks(qtype, 37, k)
        x = activations(21, k)[None]
        model = matmul_model(qtype, raw, k)
        results = on_every_path(
            monkeypatch,
            lambda: session(model).run(None, {"x": x})[0],  # noqa: B023
        )
        for other in results[1:]:
            np.testing.assert_array_equal(results[0], other)


@pytest.mark.parametrize(("qtype", "k"), [("Q4_K", 2304), ("Q6_K", 2304), ("Q8_0", 1056)])
def test_the_int16_prompt_over_chunks_and_blocks(
    qtype: str, k: int, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """K wider than a chunk of 1024 values (a partial last chunk) and 200 activation rows (more
    than one block of rows): the same product as one pass would give."""
    monkeypatch.setenv("CHATAPP_GGUF_PROMPT", "int16")
    raw = gguf_blocks(qtype, 21, k)
    w = dequantized(qtype, raw)
    x = activations(200, k)
    got = session(matmul_model(qtype, raw, k)).run(None, {"x": x[None]})[0][0]
    for i in (0, 1, 47, 48, 191, 192, 199):
        x_rounded = rounded(x[i])
        want = x_rounded @ w.T
        assert np.all(np.abs(got[i] - want) <= 1e-5 * float_terms(x_rounded, w) + 1e-30), i
