"""Peers beside the loops: llama.cpp's child-process protocol and the physical floor."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from chatapp.engine import floor
from chatapp.engine.bench_peers import peer_point
from chatapp.engine.errors import EngineError
from chatapp.engine.llamacpp_peer import LlamaCppPeer
from chatapp.engine.metrics import RunStats

FAKE = Path(__file__).parent / "fake_llama_cpp"


@pytest.fixture
def fake_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAKE))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)


def test_llamacpp_child_runs_greedy_fixed_length(fake_llama_cpp: None, tiny_gguf: Path) -> None:
    with LlamaCppPeer(tiny_gguf, threads=1, n_ctx=64) as peer:
        assert peer.version == "fake-0.0"
        assert peer.wait_policy == "PASSIVE"  # never spinning OpenMP threads by default
        stats = peer.run([4, 9], 5)
        again = peer.run([1], 3)
    expected, last = [], 9
    for _ in range(5):
        last = (last * 7 + 3) % 50
        expected.append(last)
    assert stats.token_ids == expected
    assert len(stats.latencies_s) == 4 and stats.ttft_s > 0
    assert again.token_ids == [10, 23, 14]  # a cold cache each run


def test_llamacpp_peer_without_llama_cpp_says_how_to_get_it(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "llama_cpp.py").write_text("raise ImportError('not built here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # whether or not the extra is installed
    with pytest.raises(EngineError, match=r"not built here.*chatapp\[llamacpp\]"):
        LlamaCppPeer(tiny_gguf, threads=1, n_ctx=64, python=sys.executable)


def test_llamacpp_peer_refuses_a_missing_gguf(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        LlamaCppPeer(tmp_path / "gone.gguf", threads=1, n_ctx=64)


def _stats(speed: float, tokens: list[int]) -> RunStats:
    stats = RunStats(mode="x", device="cpu", token_ids=tokens, ttft_s=2 / speed)
    stats.latencies_s = [1 / speed] * 4
    return stats


def test_peer_ratio_is_the_median_of_repeat_ratios() -> None:
    ours = [_stats(s, [1, 2, 0, 5]) for s in (10.0, 20.0, 30.0)]
    theirs = [_stats(s, [1, 2, 7, 7]) for s in (20.0, 10.0, 15.0)]
    point = peer_point("llamacpp", ours, theirs, eos={0})
    assert point["iobinding_vs_llamacpp"] == pytest.approx(2.0)  # ratios 0.5, 2, 2
    assert point["iobinding_ttft_vs_llamacpp"] == pytest.approx(0.5)  # ratios 2, 0.5, 0.5
    assert point["llamacpp_same_tokens"] is True  # compared up to our first end-of-text
    assert point["llamacpp"]["spread"]["tokens_per_s"] == [pytest.approx(10.0), pytest.approx(20.0)]


def test_weight_bytes_read_per_step(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    graph = onnx.load(str(tiny_model_dir / "model.onnx"), load_external_data=False).graph
    total = sum(len(t.raw_data) for t in graph.initializer if t.raw_data)
    tables = {n.input[0] for n in graph.node if n.op_type == "GatherBlockQuantized"}
    assert tables  # the embedding is gathered from, one row per token
    table_bytes = sum(len(t.raw_data) for t in graph.initializer if t.name in tables)
    assert floor.onnx_weight_bytes_per_step(tiny_model_dir / "model.onnx") < total
    assert floor.onnx_weight_bytes_per_step(tiny_model_dir / "model.onnx") > total - table_bytes
    from gguf import GGUFReader

    whole = sum(int(t.n_bytes) for t in GGUFReader(str(tiny_gguf)).tensors)
    assert floor.gguf_weight_bytes_per_step(tiny_gguf) == whole  # tied: the head reads it all


def test_read_bandwidth_and_ceiling() -> None:
    bandwidth = floor.read_bandwidth(threads=1, megabytes=16, repeats=2)
    assert 1e8 < bandwidth < 1e12
    assert floor.ceiling_tokens_per_s(100, 0, 1000.0) == 10.0
    assert np.isclose(floor.ceiling_tokens_per_s(50, 50, 1000.0), 10.0)
