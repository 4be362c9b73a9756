"""Fidelity measured end to end on the tiny model: the float64 reference of its GGUF against
chatapp at each precision, through the session (session/fidelity.py) and `chatapp bench
--fidelity`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.convert.reference import ReferenceModel
from chatapp.engine.bench.fidelity import log_softmax, scored_positions
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.session.fidelity import (
    fidelity_text,
    markdown_table,
    measure_fidelity,
    text_windows,
)
from tests.tiny_model import write_tiny_gguf

WINDOW = 32


def test_the_shipped_text_is_long_enough_for_the_default_window() -> None:
    text = fidelity_text()
    assert text.startswith("CHAPTER I. Down the Rabbit-Hole")
    assert "Gutenberg" not in text  # the header and licence are left out
    assert len(text.split()) > 2000  # at least 2,000 tokens in any tokenizer that has words


def test_every_precision_against_the_reference(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    result = measure_fidelity(tiny_model_dir, tiny_gguf, window=WINDOW, max_windows=2)
    rows = {row.system: row.metrics for row in result.rows}
    engine = Engine(tiny_model_dir, threads=1, max_context=WINDOW)
    scored = scored_positions(WINDOW)
    assert result.windows == 2
    assert all(m.positions == 2 * len(scored) for m in rows.values())
    # The reference row, computed again here: its own perplexity on the same targets.
    reference = ReferenceModel(tiny_gguf)
    logprobs = []
    for ids in text_windows(engine, fidelity_text(), WINDOW)[:2]:
        rows_of = log_softmax(reference.logits(ids)[scored.start : scored.stop])
        logprobs += [rows_of[i, ids[j + 1]] for i, j in enumerate(scored)]
    assert rows["float64 reference"].perplexity == pytest.approx(
        math.exp(-sum(logprobs) / len(logprobs)), rel=1e-9
    )
    assert rows["float64 reference"].mean_kld == 0 and rows["float64 reference"].top1_agreement == 1
    ours = [name for name in rows if name.startswith("chatapp")]
    if engine.precision_in_effect is None:
        assert ours == ["chatapp, prompt", "chatapp, steps"]
    else:
        assert ours == [
            "chatapp fast 8-bit, prompt",
            "chatapp fast 8-bit, steps",
            "chatapp exact, prompt",
            "chatapp exact, steps",
        ]
    for name in ours:  # quantized activations move the tiny model's logits a little, no more
        assert 0 <= rows[name].mean_kld < 0.05, name
        reference_ppl = rows["float64 reference"].perplexity
        assert abs(math.log(rows[name].perplexity / reference_ppl)) < 0.05, name
    table = markdown_table(result)
    assert table.count("\n| chatapp") == len(ours) and "| float64 reference |" in table


def test_a_gguf_the_folder_did_not_come_from_is_refused(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    other = write_tiny_gguf(tmp_path / "other.gguf", hidden=32, ffn=64)
    bigger_vocab = Engine(tiny_model_dir, threads=1, max_context=WINDOW).info.vocab_size
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model")
    with pytest.raises(EngineError, match="cannot be read as a GGUF"):
        measure_fidelity(tiny_model_dir, not_gguf, window=WINDOW, max_windows=1)
    if ReferenceModel(other).head.shape[0] != bigger_vocab:
        with pytest.raises(EngineError, match="is not the GGUF"):
            measure_fidelity(tiny_model_dir, other, window=WINDOW, max_windows=1)


def test_bench_fidelity_names_each_precision(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--peer-gguf", str(tiny_gguf), "--fidelity"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "chatapp",
            "bench",
            *args,
            "--context",
            str(WINDOW),
            "--fidelity-windows",
            "1",
            "--precision",
            "exact",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    systems = [row["system"] for row in data["rows"]]
    assert systems[0] == "float64 reference" and data["window"] == WINDOW
    if data["kernels"].startswith("GGUF kernels"):  # the precision asked for comes first
        assert systems[1:] == [
            "chatapp exact, prompt",
            "chatapp exact, steps",
            "chatapp fast 8-bit, prompt",
            "chatapp fast 8-bit, steps",
        ]
    missing = subprocess.run(
        [sys.executable, "-m", "chatapp", "bench", "--model", str(tiny_model_dir), "--fidelity"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert missing.returncode != 0 and "--peer-gguf FILE" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
