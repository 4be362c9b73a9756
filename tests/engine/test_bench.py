"""Benchmark building blocks: padded prompts, lockstep runs, summaries."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.bench.report import device_words, markdown_report
from chatapp.engine.bench.run import (
    BenchConfig,
    bench_prompt_ids,
    interleaved,
    loop_pair,
    result_header,
    run_bench_suite,
    run_interleaved,
)
from chatapp.engine.bench.stats import summarize
from chatapp.engine.bench.summary import fig, per_token_ms
from chatapp.engine.engine import Engine
from chatapp.engine.guards import PRECISION_LABELS, PRECISIONS


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Engine:
    return Engine(tiny_model_dir, threads=1, max_context=512)


@pytest.mark.parametrize("target", [64, 200, 400])
def test_prompt_is_padded_with_real_text_to_about_the_target(engine: Engine, target: int) -> None:
    ids = bench_prompt_ids(engine, "Why is the sky blue?", target)
    assert abs(len(ids) - target) <= 8
    text = engine.tokenizer.decode(ids)
    assert text.rstrip().endswith("Why is the sky blue?") or "Why is the sky blue?" in text
    assert "workshop" in text  # the filler story


def test_lockstep_alternates_and_gives_equal_tokens(engine: Engine) -> None:
    gens = loop_pair(engine, [5, 6, 7, 8], 10)
    order = [mode for mode, _event in interleaved(gens, first="iobinding")]
    # Who goes first flips every round, so work after a step lands on both loops alike.
    assert order[:6] == ["iobinding", "naive", "naive", "iobinding", "iobinding", "naive"]
    assert order.count("naive") == order.count("iobinding") == 10
    leads = [order[i] for i in range(0, len(order), 2)]
    assert leads.count("naive") == leads.count("iobinding") == 5
    assert gens["naive"].stats.token_ids == gens["iobinding"].stats.token_ids


def test_lockstep_latencies_do_not_count_the_other_loop(engine: Engine) -> None:
    started = time.perf_counter()
    runs = run_interleaved(engine, list(range(3, 40)), 40)
    wall = time.perf_counter() - started
    own = sum(r.ttft_s + sum(r.latencies_s) for r in runs.values())
    assert own <= wall  # each token's time is counted once, by its own loop
    for stats in runs.values():
        assert len(stats.latencies_s) == 39


def test_summary_and_table(engine: Engine) -> None:
    runs = [run_interleaved(engine, [9, 10, 11], 12) for _ in range(3)]
    summary = summarize([r["naive"] for r in runs])
    assert summary["repeats"] == 3
    assert summary["tokens_per_s"] == sorted(r["naive"].tokens_per_s for r in runs)[1]
    assert 0.0 <= summary["host_prep_share"] < 1.0
    result = {
        "model": "tiny",
        "layout": "shared-buffer",
        "device": "cpu",
        "prompt_tokens": 3,
        "max_new_tokens": 12,
        "repeats": 3,
        "naive": summary,
        "iobinding": summarize([r["iobinding"] for r in runs]),
        "same_tokens": True,
        "speedup_tokens_per_s": 1.1,
        "speedup_latency": 1.05,
    }
    table = markdown_report(result)
    assert "| Naive |" in table and "| IO-Binding |" in table
    # The ratio is the one the view states: the two medians it divides, as the table shows them.
    naive_ms = per_token_ms(result["naive"]).median
    iob_ms = per_token_ms(result["iobinding"]).median
    assert f"IO-Binding vs Naive: Naive's {fig(naive_ms)} / IO-Binding's {fig(iob_ms)}" in table
    assert f"| Naive | {per_token_ms(result['naive']).text('')} |" in table
    # Prompt tokens/s beside TTFT: the prompt's 3 tokens over each run's TTFT, the median.
    speeds = sorted(3 / r["naive"].ttft_s for r in runs)
    assert summary["prompt_tokens_per_s"] == pytest.approx(speeds[1])
    naive = summary  # result["naive"]
    assert f"{naive['ttft_s'] * 1000:.0f} ({naive['spread']['ttft_s'][0] * 1000:.0f}" in table
    assert f" | {speeds[1]:.0f} | " in table.split("| Naive |")[1].splitlines()[0]
    assert "tokenizer" not in table  # not measured: no line
    result |= result_header(engine, 12, 3) | {"tokenizer_bytes": 99 << 20}
    assert result["vocab_size"] == engine.info.vocab_size
    assert "The tokenizer holds 103.8 MB of the process's memory for " in markdown_report(result)


def test_genai_runs_beside_each_repeat(tiny_model_dir: Path) -> None:
    pytest.importorskip("onnxruntime_genai")
    config = BenchConfig(tiny_model_dir, prompt="Why?", max_new_tokens=10, repeats=3)
    result = run_bench_suite(
        replace(config, peers=("genai",), threads=1, max_context=512, floor=False)
    )
    genai = result["genai"]
    assert genai["repeats"] == 3 and len(genai["tokens_per_s_all"]) == 3
    assert genai["tokens_per_s"] > 0 and genai["ttft_s"] > 0
    ours = result["iobinding"]["tokens_per_s_all"]
    ratios = sorted(a / b for a, b in zip(ours, genai["tokens_per_s_all"], strict=True))
    assert result["iobinding_vs_genai"] == pytest.approx(ratios[1])  # a ratio per repeat
    assert result["genai_same_tokens"] is True  # the same greedy tokens from the same folder
    assert "| onnxruntime-genai |" in markdown_report(result)


def test_a_sweep_table_marks_the_points_a_loop_left_out() -> None:
    from chatapp.engine.bench.report import _sweep_table

    figures = {
        "tokens_per_s": 100.0,
        "first_run": {"latencies_s": [0.009, 0.010, 0.011]},
        "transfer": {"h2d_bytes_per_token": 0, "d2h_bytes_per_token": 0},
        **dict.fromkeys(("run_s_per_token", "host_s_per_token", "sample_s_per_token"), 0.001),
    }
    short = {"prompt_tokens": 128, "nocache": figures, "naive": figures, "iobinding": figures}
    long = {"prompt_tokens": 2048, "naive": figures, "iobinding": figures}  # no cache left out
    rows = _sweep_table([short, long])
    assert "No cache ms per token (median)" in rows[1]
    ms = "10.0 (9.0–11.0)"
    assert rows[-1].startswith(f"| 2048 | – | {ms} | {ms} | 10.0 / 10.0 = 1.00x | – |")


def test_the_header_names_the_precision_where_gguf_kernels_run(tiny_model_dir: Path) -> None:
    """bench --json, the comparison view and its exports read the header: it names the
    precision the engine multiplies at, and nothing where no GGUF kernels run."""
    for precision in PRECISIONS:
        engine = Engine(tiny_model_dir, threads=1, max_context=64, precision=precision)
        header = result_header(engine, 4, 1)
        if engine.model.native:
            assert header["precision"] == precision
            assert header["kernels"].endswith(", " + PRECISION_LABELS[precision])
            assert device_words(header) == f"cpu, {PRECISION_LABELS[precision]}"
        else:
            assert header["precision"] is None and device_words(header) == "cpu"
    assert device_words({"device": "cpu"}) == "cpu"  # a result saved before names none
