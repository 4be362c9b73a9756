"""`chatapp bench --speculative` (engine/bench/speculative.py): plain against speculative on the
repository's prompts, each answer the same, and sentences true of their numbers; with
`--peer llamacpp`, llama.cpp's plain decode beside them (a fake llama.cpp here, as
test_bench_peers.py's)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chatapp.cli.main import main
from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.bench.llamacpp_peer import DEFAULT_WAIT_POLICY
from chatapp.engine.bench.speculative import (
    BenchPrompt,
    PromptResult,
    SpeculativeBench,
    bench_prompts,
    measure_speculative,
    speculative_lines,
    speculative_runs,
)
from chatapp.engine.engine import Engine
from chatapp.engine.metrics import RunStats
from chatapp.engine.native_kernels import library_path
from tests.engine.test_bench_peers import FAKE
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


class FakeEngine:
    """Answers every prompt with `answer` tokens, one 0.1 s step each, recording what ran."""

    def __init__(self, log: list[tuple[str, int, int]], answer: int) -> None:
        self.log, self.answer, self.speculative = log, answer, False

    def reset(self) -> None:
        pass

    def generate_ids(self, ids: list[int], settings: Any, should_stop: Any = None) -> Any:
        system = "speculative" if self.speculative else "plain"
        self.log.append((system, ids[0], settings.max_new_tokens))
        stats = RunStats(mode="x", device="cpu", token_ids=list(range(self.answer)))
        stats.latencies_s = [0.1] * (self.answer - 1)
        return SimpleNamespace(run=lambda: stats)


class FakePeer:
    def __init__(self, log: list[tuple[str, int, int]]) -> None:
        self.log = log

    def run(self, ids: list[int], n: int) -> RunStats:
        self.log.append(("llamacpp", ids[0], n))
        stats = RunStats(mode="llamacpp", device="cpu", token_ids=list(range(n)))
        stats.latencies_s = [0.2] * (n - 1)
        return stats


def test_the_three_systems_rotate_on_the_same_ids() -> None:
    """Each repeat runs every prompt plain, speculative and with llama.cpp, who leads rotating;
    llama.cpp is asked for as many tokens as our plain answer gave (it stopped at 5 of 12)."""
    log: list[tuple[str, int, int]] = []
    engine: Any = FakeEngine(log, answer=5)
    runs = list(speculative_runs(engine, [[7, 1], [8, 1]], 12, 3, peer=FakePeer(log)))
    warm_ups, timed = log[:2], log[2:]
    assert warm_ups == [("speculative", 7, 12), ("llamacpp", 7, 8)]  # not yielded
    orders = [
        ["plain", "speculative", "llamacpp"],
        ["speculative", "llamacpp", "plain"],
        ["llamacpp", "plain", "speculative"],
    ]
    expected = [(system, prompt) for order in orders for prompt in (7, 8) for system in order]
    assert [(system, prompt) for system, prompt, _ in timed] == expected
    assert {n for system, _, n in timed if system == "llamacpp"} == {5}
    assert [(r.prompt, r.repeat, r.drafts, r.peer) for r in runs[:3]] == [
        (0, 0, False, False),
        (0, 0, True, False),
        (0, 0, False, True),
    ]
    # Without a peer the two alternate, as before.
    log.clear()
    list(speculative_runs(engine, [[7]], 12, 2))
    assert [s for s, _, _ in log[1:]] == ["plain", "speculative", "speculative", "plain"]


def _peer_bench(
    plain: list[float], spec: list[float], llama: list[float], same: bool = True
) -> SpeculativeBench:
    result = PromptResult("p1", "grounded", plain, spec, 40, 12, 30, 27)
    result.llamacpp_tps, result.llamacpp_same_tokens = llama, same
    described = {"version": "0.3.9", "omp_wait_policy": DEFAULT_WAIT_POLICY}
    load = {"before": [0.5, 0.4, 0.3], "after": [1.1, 0.6, 0.4], "cores": 2}
    return SpeculativeBench("m", "fast", None, len(plain), [result], described, load, 2)


def test_the_ratios_to_llamacpp_are_medians_of_the_repeats_ratios() -> None:
    bench = _peer_bench([10.0, 20.0, 12.0], [30.0, 30.0, 30.0], [15.0, 10.0, 12.0])
    (result,) = bench.results
    assert result.speculative_vs_llamacpp == pytest.approx([2.0, 3.0, 2.5])
    assert result.plain_vs_llamacpp == pytest.approx([10 / 15, 2.0, 1.0])
    data = bench.to_dict()
    prompt = data["prompts"][0]
    assert prompt["speculative_vs_llamacpp"] == pytest.approx(2.5)
    assert prompt["plain_vs_llamacpp"] == pytest.approx(1.0)
    assert prompt["llamacpp_tps"] == [15.0, 10.0, 12.0] and prompt["llamacpp_same_tokens"]
    assert data["vs_llamacpp"] == {"grounded": {"speculative": 2.5, "plain": 1.0}}
    assert data["llamacpp"]["version"] == "0.3.9" and data["load_average"]["cores"] == 2
    lines = speculative_lines(bench)
    row = next(line for line in lines if line.startswith("p1"))
    assert row.endswith("12.0   2.50x    1.00x")  # llama.cpp's median tok/s, then the ratios


def test_the_sentences_against_llamacpp_say_what_the_numbers_show() -> None:
    faster = speculative_lines(_peer_bench([10.0, 10.0], [21.0, 24.0], [10.0, 12.0]))
    header = "\n".join(faster[:4])
    assert "llama.cpp 0.3.9" in header and f"OpenMP wait policy: {DEFAULT_WAIT_POLICY}" in header
    assert "Load average (1, 5, 15 min): 0.5, 0.4, 0.3 before, 1.1, 0.6, 0.4 after" in header
    assert "busy" not in header
    against = next(line for line in faster if ", against llama.cpp:" in line)
    assert "speculative decoding was faster, 2.05x llama.cpp's tokens/s" in against
    assert "2.00-2.10x" in against  # the repeats' ratios 2.1 and 2.0
    assert "no difference the runs can tell for our plain decode: 0.92x" in against
    assert faster[-1] == "llama.cpp gave our plain decode's tokens on 1 of 1 prompt."
    slower = speculative_lines(_peer_bench([10.0], [12.0], [15.0], same=False))
    against = next(line for line in slower if ", against llama.cpp:" in line)
    assert "speculative decoding was slower, 0.80x llama.cpp's tokens/s (one run)" in against
    assert "our plain decode was slower, 0.67x" in against
    assert "on 0 of 1 prompt: its arithmetic differs" in slower[-1]
    # Two prompts: faster only when both prompts' ratios are.
    bench = _peer_bench([10.0], [30.0], [10.0])
    other = replace(bench.results[0], name="p2", speculative_tps=[9.0])
    mixed = speculative_lines(replace(bench, results=[bench.results[0], other]))
    against = next(line for line in mixed if ", against llama.cpp:" in line)
    assert against.startswith("Prompts that quote their own text, against llama.cpp: ")
    assert "no difference the runs can tell for speculative decoding: 1.95x" in against
    assert "the prompts' ratios 0.90-3.00x" in against


def test_a_busy_machine_is_said_in_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatapp.engine.bench.run import busy_warning

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    bench = _peer_bench([10.0], [20.0], [10.0])
    warning = busy_warning([3.5, 3.0, 2.0], [5.0, 3.0, 2.0], 2)
    assert warning is not None
    loaded = replace(bench, load_average={**(bench.load_average or {}), "busy_warning": warning})
    lines = speculative_lines(loaded)
    assert any(warning in line for line in lines[:5])


@BUILT
def test_the_command_runs_llamacpp_beside_ours(
    native_folder: Path,
    tiny_gguf: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The fake llama.cpp child (test_bench_peers.py's) answers other tokens than ours: the
    bench says so and does not fail."""
    monkeypatch.setenv("PYTHONPATH", str(FAKE))
    args = ["bench", "--model", str(native_folder), "--threads", "1", "--max-new-tokens", "6"]
    args += ["--repeats", "2", "--speculative", "--peer", "llamacpp"]
    args += ["--peer-gguf", str(tiny_gguf), "--peer-python", sys.executable]
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr()
    assert "with llama.cpp on" in out.err and "llama.cpp" in out.err.splitlines()[-1]
    data = json.loads(out.out)
    assert data["llamacpp"]["version"] == "fake-0.0"
    assert len(data["load_average"]["before"]) == 3
    for prompt in data["prompts"]:
        assert len(prompt["llamacpp_tps"]) == 2 and prompt["speculative_vs_llamacpp"] > 0
        assert prompt["same_tokens"] and prompt["llamacpp_same_tokens"] is False
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "llama.cpp fake-0.0" in text and "spec/ll" in text
    count = len(bench_prompts())
    assert f"llama.cpp gave our plain decode's tokens on 0 of {count} prompts" in text


@BUILT
def test_without_llama_cpp_the_command_says_how_to_get_it(
    native_folder: Path,
    tiny_gguf: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "llama_cpp.py").write_text("raise ImportError('not built here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    args = ["bench", "--model", str(native_folder), "--threads", "1", "--speculative"]
    assert main([*args, "--peer", "llamacpp", "--peer-gguf", str(tiny_gguf)]) != 0
    err = capsys.readouterr().err
    assert "not built here" in err and "chatapp[llamacpp]" in err
    # A folder not the default model's: which GGUF llama.cpp runs must be named.
    assert main([*args, "--peer", "llamacpp"]) != 0
    assert "--peer-gguf" in capsys.readouterr().err


def test_speculative_takes_llamacpp_as_its_only_peer(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--model", str(tiny_model_dir), "--speculative"]
    assert main([*args, "--peer", "genai"]) != 0
    assert "--peer other than llamacpp" in capsys.readouterr().err
    assert main(["bench", "--model", str(tiny_model_dir), "--parallel", "2", "--peer", "llamacpp"])
    assert "leave out --report, --peer, --sweep" in capsys.readouterr().err
