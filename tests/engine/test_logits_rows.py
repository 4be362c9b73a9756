"""Logits only where needed: the graph's logits_positions input, the loops' `rows`, and the
prompt perplexity sampled from a bounded number of positions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.generation import PROMPT_LOGITS_BYTES, PROMPT_SAMPLE, prompt_sample
from chatapp.engine.loops import IOBindingLoop
from chatapp.engine.modes import MODES
from chatapp.engine.sampling import SamplingSettings, token_logprobs

CONTEXT = 320
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "onnx_folders"
LAYOUTS = {
    "gqa": ConvertOptions(),
    "standard": ConvertOptions(attention="standard"),
    "static-w4": ConvertOptions(
        kv_layout="static", attention="standard", context_length=CONTEXT, window=4
    ),
}
PROMPT = [7, 90, 33, 180, 41, 12, 250, 99, 5, 61, 17]


@pytest.fixture(scope="module")
def folders(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("logits_rows")
    made = {name: convert_gguf(tiny_gguf, root / name, opts) for name, opts in LAYOUTS.items()}
    # Other tools' graphs have no logits_positions input: the loops pick the rows themselves.
    made["genai-int4"] = FIXTURES / "genai-llama-int4"
    made["optimum"] = FIXTURES / "optimum-llama"
    return made


def test_the_graph_returns_the_rows_named_and_every_row_by_default(tiny_model_dir: Path) -> None:
    session = ort.InferenceSession(
        str(tiny_model_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_overridable_initializers()] == ["logits_positions"]
    ids = np.asarray([PROMPT], dtype=np.int64)
    feeds: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    for i in session.get_inputs():
        if i.name.startswith("past_key_values."):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=np.float32)
    every = session.run(["logits"], feeds)[0]  # not fed: what onnxruntime-genai sees
    assert every.shape[:2] == (1, len(PROMPT))
    last = session.run(["logits"], {**feeds, "logits_positions": np.array([len(PROMPT) - 1])})[0]
    assert last.shape == (1, 1, every.shape[2])
    np.testing.assert_allclose(last[0, 0], every[0, -1], rtol=1e-5, atol=1e-5)
    some = session.run(["logits"], {**feeds, "logits_positions": np.array([0, 4, 9])})[0]
    np.testing.assert_allclose(some[0], every[0, [0, 4, 9]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["gqa", "standard", "static-w4", "genai-int4", "optimum"])
@pytest.mark.parametrize("mode", MODES)
def test_rows_equal_the_all_positions_logits(
    folders: dict[str, Path], kind: str, mode: str
) -> None:
    engine = Engine(folders[kind], mode=mode, threads=1, max_context=CONTEXT)
    # Static windows keep their [1, W, vocab] logits (a window is few rows already).
    assert (engine.info.io.logits_positions is not None) == (kind in ("gqa", "standard"))
    loop = engine.loop()
    full = loop.forward(PROMPT, all_logits=True).logits.copy()
    assert full.shape == (len(PROMPT), engine.info.vocab_size)
    loop.reset()
    last = loop.forward(PROMPT).logits.copy()
    assert last.shape == (engine.info.vocab_size,)
    np.testing.assert_allclose(last, full[-1], rtol=1e-4, atol=1e-4)
    loop.reset()
    rows = [0, 3, 4, len(PROMPT) - 1]
    picked = loop.forward(PROMPT, rows=rows).logits.copy()
    np.testing.assert_allclose(picked, full[rows], rtol=1e-4, atol=1e-4)
    # The next token after rows were asked for continues from the same cache.
    step = loop.forward([42]).logits
    assert step.shape == (engine.info.vocab_size,)


def test_a_long_prompt_costs_one_row_of_logits(folders: dict[str, Path]) -> None:
    engine = Engine(folders["gqa"], mode="iobinding", threads=1, max_context=CONTEXT)
    loop = engine.loop()
    assert isinstance(loop, IOBindingLoop)
    step = loop.forward(list(range(3, 253)))
    assert step.logits.shape == (engine.info.vocab_size,)
    # The prompt's logits went to the one-row buffer: no [1, 250, vocab] buffer was made.
    assert loop._prefill_logits.shape[1] == 0
    sampled = loop.forward([5, 6, 7, 8], rows=[1, 3])
    assert sampled.logits.shape == (2, engine.info.vocab_size)
    assert loop._prefill_logits.shape[1] == 2


@pytest.mark.parametrize("rows", [[], [3, 1], [1, 1], [-1], [4]])
def test_rows_must_be_increasing_positions_of_the_new_tokens(
    folders: dict[str, Path], rows: list[int]
) -> None:
    loop = Engine(folders["gqa"], threads=1, max_context=CONTEXT).loop()
    with pytest.raises(ValueError, match="logits rows"):
        loop.forward([5, 6, 7, 8], rows=rows)
    assert loop.cached == []


def test_prompt_sample_is_bounded_and_even() -> None:
    assert prompt_sample(1) == []
    assert prompt_sample(2) == [0]
    assert prompt_sample(6) == [4]  # a quarter, at least one: the last scoreable position
    for n in (9, 37, 100, 257, 1000, 8192):
        rows = prompt_sample(n)
        assert len(rows) == min(PROMPT_SAMPLE, n // 4)
        assert rows[0] == 0 and rows[-1] == n - 2  # the first and last scoreable positions
        gaps = np.diff(rows)
        assert gaps.min() >= 1 and gaps.max() - gaps.min() <= 1


def test_a_large_vocabulary_scores_fewer_rows() -> None:
    assert len(prompt_sample(1000, 49_152)) == PROMPT_SAMPLE  # SmolLM2: 12 MB of logits
    gemma = prompt_sample(1000, 262_144)
    assert len(gemma) == PROMPT_LOGITS_BYTES // (4 * 262_144) == 12
    assert gemma[0] == 0 and gemma[-1] == 998  # still spread over the whole prompt
    assert prompt_sample(1000, 10_000_000) == [998]  # at least one row
    assert prompt_sample(6, 262_144) == prompt_sample(6)  # a short prompt: one row anyway


def test_a_dearer_head_row_scores_fewer_rows_per_new_token() -> None:
    """A quarter of the new tokens at SmolLM2's vocabulary (and below); one per 4 x V / 49152
    past it, so the head's share of a short prompt stays about the same."""
    assert len(prompt_sample(40, 49_152)) == len(prompt_sample(40, 32_000)) == 10
    assert len(prompt_sample(42, 128_256)) == 4  # Llama 3: one row per 10 new tokens
    assert len(prompt_sample(40, 262_144)) == 1  # Gemma 3: one per 21
    assert len(prompt_sample(15, 262_144)) == 1  # at least one
    assert len(prompt_sample(300, 262_144)) == 12  # then the logits' bytes bound it


def test_prompt_perplexity_is_scored_on_the_sample(folders: dict[str, Path]) -> None:
    engine = Engine(folders["gqa"], threads=1, max_context=CONTEXT)
    prompt = [(7 * i + 3) % 250 + 3 for i in range(150)]
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=2)
    stats = engine.generate_ids(prompt, settings).run()
    engine.reset()
    full = engine.loop().forward(prompt, all_logits=True).logits
    rows = prompt_sample(len(prompt))
    expected = token_logprobs(full[rows], [prompt[r + 1] for r in rows])
    assert len(stats.prompt_logprobs) == len(rows) == 37  # a quarter of 150
    np.testing.assert_allclose(stats.prompt_logprobs, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["gqa", "static-w4", "genai-int4", "optimum"])
@pytest.mark.parametrize("mode", MODES)
def test_a_prompt_in_pieces_gives_the_same_logits(
    folders: dict[str, Path], kind: str, mode: str
) -> None:
    engine = Engine(folders[kind], mode=mode, threads=1, max_context=CONTEXT)
    loop = engine.loop()
    prompt = [(11 * i + 5) % 250 + 3 for i in range(40)]
    whole = loop.forward(prompt, all_logits=True).logits.copy()
    after = loop.forward([9]).logits.copy()
    loop.reset()
    loop.prefill_chunk = 16  # 16 + 16 + 8
    rows = [0, 15, 16, 17, 39]
    picked = loop.forward(prompt, rows=rows).logits.copy()
    assert loop.cached == prompt
    np.testing.assert_allclose(picked, whole[rows], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(loop.forward([9]).logits, after, rtol=1e-4, atol=1e-4)
    loop.reset()
    np.testing.assert_allclose(loop.forward(prompt).logits, whole[-1], rtol=1e-4, atol=1e-4)
