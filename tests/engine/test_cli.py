"""`chatapp devices | generate | bench` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.engine import webgpu
from chatapp.engine.webgpu import SOFTWARE_ENV
from tests.hostile_schemas import ref_chain


def chatapp(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatapp", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def test_devices_lists_the_cpu() -> None:
    out = chatapp("devices", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    cpu = data["devices"][-1]
    assert cpu["name"] == "cpu" and cpu["provider"] == "CPUExecutionProvider"
    assert cpu["own_memory"] is False  # nothing crosses a bus: the transfer meter reads 0
    assert "cuda" in data["unavailable"] or any(d["name"] == "cuda" for d in data["devices"])


def test_devices_never_offers_a_device_that_cannot_start() -> None:
    """With the Vulkan drivers hidden (as on a machine without any), WebGPU's adapters are
    listed as not available, with the reason, and no Vulkan noise reaches the terminal."""
    hidden = {**os.environ, "VK_DRIVER_FILES": "/nonexistent", "VK_ICD_FILENAMES": "/nonexistent"}
    hidden.pop(SOFTWARE_ENV, None)
    out = chatapp("devices", "--json", env=hidden)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert not [d for d in data["devices"] if d["name"].startswith("webgpu")]
    assert "Vulkan" not in out.stderr
    if webgpu.library_path() is not None:
        assert "Vulkan driver" in data["unavailable"]["webgpu-software"]


@pytest.mark.parametrize("mode", ["nocache", "naive", "iobinding"])
def test_generate_json_has_every_field(tiny_model_dir: Path, mode: str) -> None:
    out = chatapp(
        "generate",
        "--model",
        str(tiny_model_dir),
        "--mode",
        mode,
        "--prompt",
        "the",
        "--max-new-tokens",
        "6",
        "--greedy",
        "--threads",
        "1",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in (
        "text",
        "token_ids",
        "finish_reason",
        "tokens_per_s",
        "ttft_s",
        "perplexity",
        "prompt_perplexity",
        "latencies_s",
        "mode",
        "device",
    ):
        assert key in data, key
    assert data["mode"] == mode and data["device"] == "cpu"
    assert 0 < len(data["token_ids"]) <= 6
    assert data["finish_reason"] in ("eos", "length")
    assert len(data["latencies_s"]) == len(data["token_ids"]) - 1


def test_generate_names_its_precision(tiny_model_dir: Path) -> None:
    """--precision reaches the engine and the output names it where GGUF kernels run (the
    default is fast); ONNX Runtime's kernels have no such choice and nothing claims one."""
    args = ["generate", "--model", str(tiny_model_dir), "--prompt", "the", "--greedy"]
    runs = {
        p: chatapp(*args, "--max-new-tokens", "3", *(["--precision", p] if p else []), "--json")
        for p in ("fast", "exact", "")
    }
    for out in runs.values():
        assert out.returncode == 0, out.stderr
    data = {p: json.loads(out.stdout) for p, out in runs.items()}
    if data["fast"]["kernels"].startswith("GGUF kernels"):
        assert data[""]["precision"] == data["fast"]["precision"] == "fast"
        assert data["exact"]["precision"] == "exact"
        assert data["exact"]["kernels"].endswith(", exact")
        assert data["fast"]["kernels"].endswith(", fast 8-bit")
        text = chatapp(*args, "--max-new-tokens", "2", "--precision", "exact")
        assert text.returncode == 0 and "on cpu, exact:" in text.stderr
    else:
        assert {d["precision"] for d in data.values()} == {None}
        assert data["exact"]["kernels"] == data["fast"]["kernels"] == "ONNX Runtime kernels"


def test_generate_same_tokens_in_every_mode(tiny_model_dir: Path) -> None:
    ids = []
    for mode in ("nocache", "naive", "iobinding"):
        out = chatapp(
            "generate",
            "--model",
            str(tiny_model_dir),
            "--mode",
            mode,
            "--prompt",
            "in the",
            "--max-new-tokens",
            "12",
            "--greedy",
            "--json",
        )
        ids.append(json.loads(out.stdout)["token_ids"])
    assert ids[0] == ids[1] == ids[2]


def test_bench_reports_both_loops(tiny_model_dir: Path) -> None:
    out = chatapp(
        "bench",
        "--model",
        str(tiny_model_dir),
        "--max-new-tokens",
        "8",
        "--repeats",
        "1",
        "--context-tokens",
        "100",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["same_tokens"] is True
    for mode in ("naive", "iobinding"):
        for key in ("tokens_per_s", "ttft_s", "latency_p50_s", "latency_p95_s", "host_prep_share"):
            assert data[mode][key] >= 0, (mode, key)
        assert data[mode]["tokens_per_s"] > 0
    assert data["speedup_tokens_per_s"] > 0 and data["speedup_latency"] > 0
    assert 90 <= data["prompt_tokens"] <= 110
    for mode in ("naive", "iobinding"):  # the CPU: nothing crosses a bus
        assert data[mode]["transfer"]["h2d_bytes_per_token"] == 0
        assert data[mode]["transfer"]["d2h_bytes_per_token"] == 0
    assert len(data["load_average"]["before"]) == 3
    floor = data["floor"]
    assert floor["read_bandwidth_bytes_per_s"] > 1e8
    for mode in ("naive", "iobinding"):
        row = floor["systems"][mode]
        assert row["weight_bytes_per_step"] > 0 and row["share_of_ceiling"] > 0


def test_bench_runs_the_loops_named_by_modes(tiny_model_dir: Path) -> None:
    out = chatapp(
        "bench",
        "--model",
        str(tiny_model_dir),
        "--modes",
        "iobinding,nocache,naive",
        "--max-new-tokens",
        "6",
        "--repeats",
        "2",
        "--no-floor",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["same_tokens"] is True
    assert all(data[m]["tokens_per_s"] > 0 for m in ("nocache", "naive", "iobinding"))
    assert set(data["caching_speedup"]) == {"naive", "iobinding"}
    assert all(x > 0 for x in data["caching_speedup"].values())
    alone = chatapp(
        "bench",
        "--model",
        str(tiny_model_dir),
        "--modes",
        "nocache",
        "--max-new-tokens",
        "4",
        "--repeats",
        "1",
        "--no-floor",
    )
    assert alone.returncode == 0, alone.stderr
    assert "| No cache |" in alone.stdout and "| Naive |" not in alone.stdout
    bad = chatapp("bench", "--model", str(tiny_model_dir), "--modes", "fast")
    assert bad.returncode == 2 and "unknown loop 'fast'" in bad.stderr


def test_bench_prints_a_markdown_table(tiny_model_dir: Path) -> None:
    out = chatapp(
        "bench",
        "--model",
        str(tiny_model_dir),
        "--max-new-tokens",
        "4",
        "--repeats",
        "2",
        "--no-floor",
    )
    assert out.returncode == 0, out.stderr
    assert "| Naive |" in out.stdout and "| IO-Binding |" in out.stdout
    assert "IO-Binding vs Naive: Naive's " in out.stdout
    assert "On the CPU" in out.stdout  # where each loop's time goes, in words
    assert "Physical floor" not in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "--model", "/nonexistent/model", "--prompt", "x"], "does not exist"),
        (["generate", "--device", "tpu9000", "--prompt", "x"], "Unknown device"),
        (["generate", "--temperature", "-1", "--prompt", "x"], "temperature"),
        (["generate", "--precision", "int16", "--prompt", "x"], "--precision"),
        (["generate", "--prompt-precision", "int16", "--prompt", "x"], "--prompt-precision"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], message: str, tiny_model_dir: Path) -> None:
    if "--model" not in args:
        args = [*args, "--model", str(tiny_model_dir)]
    out = chatapp(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_prompt_over_the_context_is_a_clear_error(tiny_model_dir: Path) -> None:
    out = chatapp(
        "generate",
        "--model",
        str(tiny_model_dir),
        "--context",
        "32",
        "--prompt",
        "the " * 100,
        "--raw",
    )
    assert out.returncode == 2
    assert "context holds 32" in out.stderr
    assert "Traceback" not in out.stderr


FOLDERS = Path(__file__).resolve().parent.parent / "fixtures" / "onnx_folders"


def test_variants_lists_precision_size_and_default() -> None:
    out = chatapp("variants", "--model", str(FOLDERS / "optimum-llama-legacy"), "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["onnx_file"]: r for r in json.loads(out.stdout)["variants"]}
    assert rows["decoder_model_merged.onnx"]["default"] is True
    assert rows["decoder_model_merged.onnx"]["precision"] == "fp32"
    assert rows["decoder_model.onnx"]["problem"]  # no past inputs: cannot run
    text = chatapp("variants", "--model", str(FOLDERS / "onnx-community-llama"))
    assert text.returncode == 0, text.stderr
    first, *rest = text.stdout.splitlines()
    assert first.startswith("* onnx/model.onnx") and "fp32" in first
    assert any("onnx/model_q4f16.onnx" in line and "q4f16" in line for line in rest)


@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_generate_runs_the_named_graph(mode: str) -> None:
    out = chatapp(
        "generate",
        "--model",
        str(FOLDERS / "onnx-community-llama"),
        "--onnx-file",
        "onnx/model_fp16.onnx",
        "--mode",
        mode,
        "--raw",
        "--prompt",
        "the story",
        "--greedy",
        "--max-new-tokens",
        "4",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["onnx_file"] == "onnx/model_fp16.onnx"
    assert 0 < len(data["token_ids"]) <= 4


def test_a_missing_onnx_file_is_one_line() -> None:
    out = chatapp(
        "generate",
        "--model",
        str(FOLDERS / "onnx-community-llama"),
        "--onnx-file",
        "onnx/model_q2.onnx",
        "--prompt",
        "hi",
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "chatapp: error: --onnx-file names 'onnx/model_q2.onnx', which is missing from "
        "onnx-community-llama."
    )


def test_generate_prints_the_no_template_notice(tiny_model_dir: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "base"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    del config["chat_template"]
    config_path.write_text(json.dumps(config))
    args = ["generate", "--prompt", "the", "--max-new-tokens", "2", "--greedy", "--json"]
    out = chatapp(*args, "--model", str(folder))
    assert out.returncode == 0, out.stderr
    assert "chatapp: This model has no chat template" in out.stderr
    templated = chatapp(*args, "--model", str(tiny_model_dir))
    assert "no chat template" not in templated.stderr


@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_generate_follows_a_json_schema(tiny_model_dir: Path, tmp_path: Path, mode: str) -> None:
    pytest.importorskip("llguidance", reason="structured output needs llguidance")
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    args = ["generate", "--model", str(tiny_model_dir), "--mode", mode, "--prompt", "x"]
    out = chatapp(*args, "--json-schema", str(path), "--threads", "1", "--json")
    assert out.returncode == 0, out.stderr
    value = json.loads(json.loads(out.stdout)["text"])
    assert isinstance(value["ok"], bool) and value["n"] in (1, 2, 3)
    whole = chatapp(*args, "--json-object", "--max-new-tokens", "3", "--threads", "1")
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.startswith("{")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{nope", "not valid JSON"),
        ('{"type": "objectx"}', "objectx"),
        ("[]", "JSON object"),
        # issue 37: each of these crashed the process or ended in a traceback
        ('{"items": ' * 5000 + "{}" + "}" * 5000, "nested too deeply"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (json.dumps(ref_chain(3000)), "definitions"),
        ('{"$ref": "#"}', "loop"),
        ('{"type": "integer", "maximum": 1e999}', "out of range"),
        ('{"enum": []}', "cannot be used"),
    ],
    ids=lambda value: value if len(value) < 40 else f"{value[:20]}...({len(value)})",
)
def test_a_bad_schema_file_is_one_line(
    tiny_model_dir: Path, tmp_path: Path, content: str, message: str
) -> None:
    pytest.importorskip("llguidance", reason="structured output needs llguidance")
    path = tmp_path / "schema.json"
    path.write_text(content)
    out = chatapp(
        "generate", "--model", str(tiny_model_dir), "--prompt", "x", "--json-schema", str(path)
    )
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["generate", "bench", "serve"])
def test_every_model_command_takes_the_precision(command: str) -> None:
    """--precision on generate, bench and serve: fast unless exact is asked for."""
    from chatapp.cli.main import build_parser

    extra = ["--prompt", "x"] if command == "generate" else []
    parser = build_parser()
    assert parser.parse_args([command, *extra]).precision == "fast"
    assert parser.parse_args([command, *extra, "--precision", "exact"]).precision == "exact"
