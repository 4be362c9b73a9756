"""chatapp.gguf.GgufMatMul at the fast precision (native/fast8.inc): 8-bit activations, as
llama.cpp multiplies them, against float64 references computed here from the dequantized weights.

Two references: the ORIGINAL float activations (the kernels may differ by what rounding the
activations to 8 bits leaves out, at most half a step d/2 per value, times |w|) and the
activations quantized here by the kernels' rule (d = max|x| / 127 per 256 values for the K-quant
formats, per 32 for the others; q = round(x / d), ties to even), which the kernels must match up
to their float32 steps. Then invariance: an output element has the same bits whatever the other
rows of the call, the path, the chunking of a prompt, the threads and the instruction set.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from chatapp.convert.gguf_blocks import NATIVE_FORMATS
from tests.convert.native_library import ISAS, LIBRARY, NOT_BUILT, on_every_path, session
from tests.convert.test_native_kernels import (
    activations,
    dequantized,
    float_terms,
    gguf_blocks,
    matmul_model,
    widths,
)

pytestmark = NOT_BUILT

UNIT = 2.0**-24  # float32's unit roundoff


def activation_block(qtype: str) -> int:
    """Values per activation scale: 256 for the 256-value (K-quant) formats, else 32."""
    return 256 if NATIVE_FORMATS[qtype][0] == 256 else 32


def quantized_activations(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' rule in float32: per block d = max|x| / 127, q = rint(x * (127 / max|x|))
    (all-zero blocks: d = 0, q = 0). Returns q x d in float64 and d repeated per value."""
    k = x.shape[-1]
    blocks = x.reshape(*x.shape[:-1], k // block, block).astype(np.float32)
    amax = np.abs(blocks).max(-1, keepdims=True)
    safe = np.where(amax > 0, amax, np.float32(1))
    inv = np.where(amax > 0, np.float32(127) / safe, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv)
    assert np.abs(q).max() <= 127
    d = (amax / np.float32(127)).astype(np.float32)
    values = (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)
    steps = np.broadcast_to(d, blocks.shape).reshape(x.shape).astype(np.float64)
    return values, steps


def float_steps_bound(x_quantized: np.ndarray, w: np.ndarray) -> np.ndarray:
    """What the float32 steps may add: a block's float(isum) and d_w x d_a round once each,
    then every output is a chain of at most two fma per block of 32 (the K-quants: two per
    super-block; the 32-value formats: one per block in each of eight lanes, the minimums' in
    a ninth, and a three-level sum of the lanes), each rounding once relative to the terms
    summed so far."""
    steps = 2 * (x_quantized.shape[-1] // 32) + 3
    return steps * UNIT * float_terms(x_quantized, w) + 1e-30


def run(qtype: str, raw: np.ndarray, k: int, x: np.ndarray, threads: int = 2) -> np.ndarray:
    return session(matmul_model(qtype, raw, k), threads=threads, precision="fast").run(
        None, {"x": x}
    )[0]


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
@pytest.mark.parametrize("rows", [1, 3, 9, 70])
def test_fast_is_the_product_with_8bit_activations(qtype: str, rows: int, isa: str) -> None:
    """Every row of a call (one: a step; a few; a prompt) is W . (q d) up to the float32 steps,
    and within half an activation step per value of the float product W . x."""
    block = activation_block(qtype)
    for k in widths(qtype):
        for n in (1, 5, 37):  # a tile of four and its remainder, several tasks
            raw = gguf_blocks(qtype, n, k, seed=n)
            w = dequantized(qtype, raw)
            x = activations(rows, k)
            got = run(qtype, raw, k, x[None])[0]
            assert got.shape == (rows, n)
            for i in range(rows):
                xq, step = quantized_activations(x[i], block)
                floats = float_steps_bound(xq, w)
                assert np.all(np.abs(got[i] - xq @ w.T) <= floats), (qtype, isa, k, n, i)
                rounding = (step / 2 + 4 * UNIT * np.abs(x[i])) @ np.abs(w).T
                exact = x[i].astype(np.float64) @ w.T
                assert np.all(np.abs(got[i] - exact) <= rounding + floats), (qtype, isa, k, n, i)


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
def test_a_row_has_the_same_bits_in_any_call(qtype: str, isa: str) -> None:
    """A row alone (a step), among 2..13 rows (a batch of prompts or of steps [m, 1, K]), inside
    a 70-row prompt at another position, and that prompt cut in two chunks: the same bits."""
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 37, k)
    model = session(matmul_model(qtype, raw, k), precision="fast")
    x = activations(13, k)
    alone = np.stack([model.run(None, {"x": x[i][None, None]})[0][0, 0] for i in range(13)])
    for m in range(2, 14):
        together = model.run(None, {"x": x[None, :m]})[0][0]
        np.testing.assert_array_equal(together, alone[:m], err_msg=f"{qtype} {isa} m={m}")
        steps = model.run(None, {"x": x[:m, None]})[0][:, 0]
        np.testing.assert_array_equal(steps, alone[:m], err_msg=f"{qtype} {isa} steps m={m}")
    prompt = np.concatenate([activations(57, k, seed=7), x])  # the 13 rows at 57..69
    whole = model.run(None, {"x": prompt[None]})[0][0]
    np.testing.assert_array_equal(whole[57:], alone, err_msg=f"{qtype} {isa} in a prompt")
    first = model.run(None, {"x": prompt[None, :33]})[0][0]
    second = model.run(None, {"x": prompt[None, 33:]})[0][0]
    np.testing.assert_array_equal(np.concatenate([first, second]), whole, err_msg=f"{qtype} chunks")


@pytest.mark.parametrize("qtype", list(NATIVE_FORMATS))
def test_one_thread_and_two_give_the_same_bits(qtype: str, isa: str) -> None:
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 70, k)
    for rows in (1, 9, 40):
        x = activations(rows, k)[None]
        one = run(qtype, raw, k, x, threads=1)
        two = run(qtype, raw, k, x, threads=2)
        np.testing.assert_array_equal(one, two, err_msg=f"{qtype} {isa} rows={rows}")


def test_every_instruction_set_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The integer sums are exact and the float steps the same IEEE operations on every path:
    scalar, AVX2 and AVX-512 VNNI agree bit for bit."""
    for qtype in NATIVE_FORMATS:
        k = widths(qtype)[-1]
        raw = gguf_blocks(qtype, 37, k)
        x = activations(11, k)[None]
        results = on_every_path(monkeypatch, lambda: run(qtype, raw, k, x))  # noqa: B023
        for path, other in zip(ISAS[1:], results[1:], strict=True):
            np.testing.assert_array_equal(results[0], other, err_msg=f"{qtype} scalar vs {path}")


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K"])
def test_a_step_has_the_bits_of_every_path_at_any_width(
    qtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode step (one activation row) of the K-quants takes its own kernel on AVX-512 VNNI,
    four super-blocks of a row at a time, and so do two rows (a drafted token being verified,
    two batched sequences, up to four): rows of 1..9 super-blocks (whole groups and every
    remainder) have scalar's bits on every path, and the same bits among 2, 3 and 4 rows."""
    for blocks in range(1, 10):
        k = 256 * blocks
        raw = gguf_blocks(qtype, 37, k, seed=blocks)
        x = activations(4, k, seed=blocks)

        def steps() -> np.ndarray:
            return np.stack([run(qtype, raw, k, x[i][None, None])[0, 0] for i in range(4)])  # noqa: B023

        results = on_every_path(monkeypatch, steps)
        for path, other in zip(ISAS[1:], results[1:], strict=True):
            np.testing.assert_array_equal(
                results[0], other, err_msg=f"{qtype} k={k} scalar vs {path}"
            )
        for m in (2, 3, 4):
            together = run(qtype, raw, k, x[None, :m])[0]
            np.testing.assert_array_equal(
                together, results[-1][:m], err_msg=f"{qtype} k={k} step vs {m} rows"
            )


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_five_to_fifteen_rows_keep_each_rows_step_bits(qtype: str, isa: str) -> None:
    """5..15 rows (a longer draft verified, more batched sequences) go in runs of four on
    AVX-512 VNNI (the K-quants' step kernel; the 32-value formats' tiles, the last 2-3 rows in
    a tile that wide) and through padded tiles elsewhere: every row the bits of its own step,
    for whole groups of super-blocks and a remainder."""
    for blocks in (4, 7):
        k = 256 * blocks
        raw = gguf_blocks(qtype, 37, k, seed=blocks)
        model = session(matmul_model(qtype, raw, k), threads=1, precision="fast")
        x = activations(15, k, seed=blocks)
        alone = np.stack([model.run(None, {"x": x[i][None, None]})[0][0, 0] for i in range(15)])
        for m in (5, 6, 7, 8, 9, 11, 13, 15):
            together = model.run(None, {"x": x[None, :m]})[0][0]
            np.testing.assert_array_equal(together, alone[:m], err_msg=f"{qtype} {isa} k={k} m={m}")


def test_fast_is_the_default_and_exact_is_todays(monkeypatch: pytest.MonkeyPatch) -> None:
    """No config entry and no CHATAPP_GGUF_PRECISION: fast. CHATAPP_GGUF_PRECISION=exact, or
    the entry, gives the int16 step (which differs from the 8-bit one); the entry wins."""
    monkeypatch.delenv("CHATAPP_GGUF_PRECISION", raising=False)
    raw = gguf_blocks("Q4_K", 37, 512)
    x = activations(1, 512)[None]
    model = matmul_model("Q4_K", raw, 512)
    fast = run("Q4_K", raw, 512, x)
    exact = session(model, precision="exact").run(None, {"x": x})[0]
    assert not np.array_equal(fast, exact)

    def unconfigured() -> np.ndarray:
        opts = ort.SessionOptions()
        opts.register_custom_ops_library(str(LIBRARY))
        plain = ort.InferenceSession(
            model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        return plain.run(None, {"x": x})[0]

    np.testing.assert_array_equal(unconfigured(), fast)
    monkeypatch.setenv("CHATAPP_GGUF_PRECISION", "exact")
    np.testing.assert_array_equal(unconfigured(), exact)
    np.testing.assert_array_equal(session(model, precision="fast").run(None, {"x": x})[0], fast)


def test_an_unknown_precision_is_a_clear_error() -> None:
    raw = gguf_blocks("Q8_0", 4, 64)
    with pytest.raises(Exception, match='precision must be "fast" or "exact", not "fastest"'):
        session(matmul_model("Q8_0", raw, 64), precision="fastest")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_value_that_is_not_a_number_reaches_every_output(bad: float, isa: str) -> None:
    """A NaN or infinity among a row's activations (a damaged weight upstream) makes that row's
    products NaN, as the float product's would be, so that the engine's check stops the answer;
    the other rows are untouched."""
    for qtype in NATIVE_FORMATS:
        k = widths(qtype)[-1]
        raw = gguf_blocks(qtype, 9, k)
        x = activations(3, k)
        clean = run(qtype, raw, k, x[None])[0]
        x[1, k // 2] = bad
        got = run(qtype, raw, k, x[None])[0]
        assert np.all(np.isnan(got[1])), (qtype, isa)
        np.testing.assert_array_equal(got[[0, 2]], clean[[0, 2]])


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K"])
def test_prompt_tiles_keep_each_rows_step_bits(qtype: str, isa: str) -> None:
    """16 rows and more take the prompt tiles on AVX-512 VNNI (native/prompt8.inc,
    prompt8b.inc: 16 rows a register), a last block of a few rows the few-row kernels and of
    more a padded tile: whole blocks, each kind of remainder, every row its own step's bits."""
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 37, k, seed=3)
    model = session(matmul_model(qtype, raw, k), threads=2, precision="fast")
    x = activations(48, k, seed=5)
    alone = np.stack([model.run(None, {"x": x[i][None, None]})[0][0, 0] for i in range(48)])
    for m in (16, 17, 23, 24, 31, 32, 48):
        together = model.run(None, {"x": x[None, :m]})[0][0]
        np.testing.assert_array_equal(together, alone[:m], err_msg=f"{qtype} {isa} m={m}")


def rounding_cases(rows: int, k: int, block: int) -> np.ndarray:
    """Activation rows whose quantization is all edge cases: blocks with max |x| = 127 (inv is
    exactly 1, so every x.5 is a tie, rounded to even), tiny and huge normal values, negative
    zeros, all-zero blocks and a block holding a NaN."""
    halves = (np.arange(block) % 255 - 127) * 0.5
    x = np.zeros((rows, k), np.float32)
    for r in range(rows):
        for b in range(k // block):
            kind = (r + b) % 5
            values = np.roll(halves, r + b).astype(np.float32)
            values[(r * 7 + b) % block] = 127.0 if (r + b) % 2 else -127.0
            if kind == 1:
                values = values * np.float32(1e-30)
            elif kind == 2:
                values = values * np.float32(1e30)
            elif kind == 3:
                values = np.full(block, -0.0, np.float32)
            x[r, b * block : (b + 1) * block] = values
    x[-1, 3] = np.nan
    return x


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "Q4_0", "Q8_0"])
def test_ties_and_extremes_quantize_alike_on_every_path(
    qtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The activations' quantization has its own AVX-512 code (fast8_step.inc): on rows made of
    ties, tiny and huge values, zeros and a NaN, a step and four rows together give scalar's
    bits on every path."""
    k = 512
    raw = gguf_blocks(qtype, 37, k, seed=3)
    x = rounding_cases(4, k, activation_block(qtype))

    def both() -> tuple[np.ndarray, np.ndarray]:
        steps = np.stack([run(qtype, raw, k, x[i][None, None])[0, 0] for i in range(4)])
        return steps, run(qtype, raw, k, x[None])[0]

    results = on_every_path(monkeypatch, both)
    assert np.isnan(results[0][0][-1]).all() and np.isfinite(results[0][0][:-1]).all()
    for path, (steps, rows) in zip(ISAS, results, strict=True):
        np.testing.assert_array_equal(results[0][0], steps, err_msg=f"{qtype} step, {path}")
        np.testing.assert_array_equal(results[0][0], rows, err_msg=f"{qtype} 4 rows, {path}")


def named_weight(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """`model` with its weight renamed (the converter's head is lm_head.* or, tied, embed.*)."""
    model = copy.deepcopy(model)
    model.graph.initializer[0].name = name
    model.graph.node[0].input[1] = name
    return model


@pytest.mark.parametrize("qtype", ["Q8_0", "Q6_K", "Q4_K", "Q5_0"])
@pytest.mark.parametrize("name", ["lm_head.gguf_w", "embed.gguf_w"])
def test_the_head_multiplies_exact_step_rows_in_fast(
    qtype: str, name: str, isa: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output head takes exact's int16 step arithmetic in fast too, for every row count
    and shape: each row the bits of that row alone, which are exact's step's; any other
    weight keeps 8-bit activations, and CHATAPP_GGUF_HEAD=int8 puts the head back on them."""
    k = widths(qtype)[-1]
    raw = gguf_blocks(qtype, 37, k, seed=11)
    plain = matmul_model(qtype, raw, k)
    head = named_weight(plain, name)
    fast = session(head, precision="fast")
    x = activations(17, k, seed=13)
    alone = np.stack([fast.run(None, {"x": x[i][None, None]})[0][0, 0] for i in range(17)])
    exact = session(plain, precision="exact")
    steps = np.stack([exact.run(None, {"x": x[i][None, None]})[0][0, 0] for i in range(17)])
    np.testing.assert_array_equal(alone, steps, err_msg=f"{qtype} {isa}")
    for m in (2, 3, 4, 5, 6, 7, 8, 9, 16, 17):
        together = fast.run(None, {"x": x[None, :m]})[0][0]
        np.testing.assert_array_equal(together, alone[:m], err_msg=f"{qtype} {isa} m={m}")
        batched = fast.run(None, {"x": x[:m, None]})[0][:, 0]
        np.testing.assert_array_equal(batched, alone[:m], err_msg=f"{qtype} {isa} [m,1,K] m={m}")
    eight = session(plain, precision="fast").run(None, {"x": x[None]})[0][0]
    assert not np.array_equal(eight, alone)
    monkeypatch.setenv("CHATAPP_GGUF_HEAD", "int8")
    np.testing.assert_array_equal(
        session(head, precision="fast").run(None, {"x": x[None]})[0][0], eight
    )
