"""`chatapp bench --speculative` (engine/bench/speculative.py): plain against speculative on the
repository's prompts, each answer the same, and sentences true of their numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.bench.speculative import (
    BenchPrompt,
    PromptResult,
    SpeculativeBench,
    bench_prompts,
    measure_speculative,
    speculative_lines,
)
from chatapp.engine.engine import Engine
from chatapp.engine.native_kernels import library_path
from tests.engine.test_cli import chatapp

BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")


@pytest.fixture(scope="module")
def native_folder(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-speculative")
    return convert_gguf(tiny_gguf, root / "tiny", ConvertOptions(graph="native"))


def test_the_prompts_have_both_kinds_and_both_forms() -> None:
    prompts = bench_prompts()
    kinds = {p.kind for p in prompts}
    assert kinds == {"grounded", "open"}
    assert all(p.chat.strip() and p.continuation.strip() for p in prompts)


@BUILT
def test_both_runs_of_each_prompt_give_the_same_tokens(native_folder: Path) -> None:
    engine = Engine(native_folder, threads=1, precision="fast")
    engine.speculative = True  # the window's choice, which the bench must leave as it was
    prompts = [BenchPrompt("repeat", "grounded", "a b a b a b a b", "a b a b a b a b")]
    bench = measure_speculative(engine, 12, 2, prompts)
    (result,) = bench.results
    assert bench.refusal is None and bench.repeats == 2
    assert len(result.plain_tps) == len(result.speculative_tps) == 2
    assert result.same_tokens and result.tokens == 12
    assert engine.speculative is True
    data = bench.to_dict()
    assert data["prompts"][0]["ratio"] == pytest.approx(result.ratio)


def _bench(plain: list[float], fast: list[float]) -> SpeculativeBench:
    results = [
        PromptResult("p1", "grounded", [p], [f], 40, 12, 30, 27)
        for p, f in zip(plain, fast, strict=True)
    ]
    return SpeculativeBench("m", "fast", None, 1, results)


def test_the_sentences_say_what_the_numbers_show() -> None:
    faster = speculative_lines(_bench([10.0, 10.0], [20.0, 15.0]))
    assert "faster, 1.75x" in faster[-1] and "1.50-2.00x" in faster[-1]
    assert "27/30" in faster[2] and "3.25" in faster[2]  # 39 tokens after the first in 12 runs
    mixed = speculative_lines(_bench([10.0, 10.0], [11.0, 9.0]))
    assert "no difference the runs can tell" in mixed[-1] and "faster" not in mixed[-1]
    slower = speculative_lines(_bench([10.0], [8.0]))
    assert "slower, 0.80x" in slower[-1]
    refused = speculative_lines(SpeculativeBench("m", "exact", "it needs fast", 1, []))
    assert refused == ["Speculative decoding does not run on m: it needs fast."]


@BUILT
def test_the_command_prints_json(native_folder: Path) -> None:
    out = chatapp(
        "bench",
        "--model",
        str(native_folder),
        "--threads",
        "1",
        "--max-new-tokens",
        "4",
        "--repeats",
        "1",
        "--speculative",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["refusal"] is None and len(data["prompts"]) == len(bench_prompts())
    assert all(p["same_tokens"] for p in data["prompts"])
