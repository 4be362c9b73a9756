"""`chatapp bench --parallel N` (engine/bench/parallel.py): one client against N together on
the tiny model, the sentences true of their numbers, and the command's output."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.bench.parallel import (
    SYSTEM,
    ClientsRun,
    ParallelResult,
    SharedPrefixRun,
    measure_parallel,
    parallel_sentences,
)
from chatapp.engine.engine import Engine
from tests.engine.test_cli import chatapp


def test_two_clients_do_twice_the_work_and_keep_their_tokens(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    result = measure_parallel(engine, 2, 5)
    assert result.solo.clients == 1 and result.solo.tokens == 5
    assert result.together.clients == 2 and result.together.tokens == 10
    assert result.same_tokens  # a batched step does not change a client's answer
    shared = result.shared
    assert shared is not None and shared.clients == 2
    # The second client copied at least the system prompt the first one prefilled.
    system = len(engine.tokenizer.tok.encode(SYSTEM))
    assert system - 2 <= shared.shared_positions < shared.prompt_tokens
    assert shared.whole_s > 0 and shared.shared_s > 0
    assert result.ratio == pytest.approx(result.together.tokens_per_s / result.solo.tokens_per_s)
    data = result.to_dict()
    assert data["ratio"] == result.ratio and data["together"]["tokens"] == 10


def _result(solo_s: float, together_s: float) -> ParallelResult:
    return ParallelResult(4, 10, ClientsRun(1, 10, solo_s), ClientsRun(4, 40, together_s), True)


def test_the_sentences_say_what_the_numbers_show() -> None:
    faster = parallel_sentences(_result(1.0, 1.6))  # 10 vs 25 tokens/s: 2.5x
    assert faster[0].startswith("One client alone: 10.0 tokens/s (10 tokens in 1.00 s")
    assert faster[1].startswith("4 clients together: 25.0 tokens/s in all (40 tokens in 1.60 s")
    assert "6.2 tokens/s each" in faster[1]
    assert "2.50x (25.0 / 10.0)" in faster[2] and "get more tokens per second" in faster[2]
    assert faster[3] == "Every client's 10 tokens together are the same as alone."
    shared = SharedPrefixRun(4, 480, 330, 2.0, 0.8)
    line = parallel_sentences(replace(_result(1.0, 1.6), shared=shared))[4]
    assert "0.80 s with the shared prefix copied (330 of 480 prompt positions" in line
    assert "2.00 s with every prompt prefilled whole (2.50x" in line
    slower = parallel_sentences(_result(1.0, 8.0))
    assert "0.50x" in slower[2] and "fewer" in slower[2]
    even = parallel_sentences(_result(1.0, 4.2))  # 0.95x: one run cannot tell
    assert "0.95x" in even[2] and "no measurable gain" in even[2] and "more" not in even[2]


def test_the_command_prints_json_and_refuses_what_it_cannot_mix(tiny_model_dir: Path) -> None:
    base = ("bench", "--model", str(tiny_model_dir), "--threads", "1", "--max-new-tokens", "3")
    out = chatapp(*base, "--parallel", "2", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["slots"] == 2 and data["together"]["tokens"] == 6 and data["solo"]["tokens"] == 3
    mixed = chatapp(*base, "--parallel", "2", "--sweep", "128,256")
    assert mixed.returncode == 2 and "--parallel measures on its own" in mixed.stderr
    one = chatapp(*base, "--parallel", "1")
    assert one.returncode == 2 and "Traceback" not in one.stderr
