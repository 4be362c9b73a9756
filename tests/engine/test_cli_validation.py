"""Bad command lines through `chatapp.cli.main`: each ends with exit code 2 and one line on
stderr (progress lines of `convert` aside), never a traceback, never output on stdout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chatapp.cli import main

SURROGATE = "caf\udcff"  # how Python hands over argv bytes that are not UTF-8
# {model}: the tiny model folder, {model_copy}: a copy with an onnx/ folder and a graph beside
# it, {file}: a plain file, {empty}: an empty folder,
# {gguf}: the tiny GGUF, {gguf_dir}: the folder holding a copy of it.
BAD = {
    # generate: sampling and sizes
    "context-minus-1": "generate --model {model} --prompt hi --context -1",
    "context-zero": "generate --model {model} --prompt hi --context 0",
    "context-text": "generate --model {model} --prompt hi --context lots",
    "context-10^9": "generate --model {model} --prompt hi --context 1000000000",
    "temperature-nan": "generate --model {model} --prompt hi --temperature nan",
    "temperature-inf": "generate --model {model} --prompt hi --temperature inf",
    "temperature-negative": "generate --model {model} --prompt hi --temperature -1",
    "temperature-huge": "generate --model {model} --prompt hi --temperature 1e9",
    "top-p-2": "generate --model {model} --prompt hi --top-p 2",
    "top-p-0": "generate --model {model} --prompt hi --top-p 0",
    "top-p-nan": "generate --model {model} --prompt hi --top-p nan",
    "top-k-negative": "generate --model {model} --prompt hi --top-k -1",
    "top-k-fraction": "generate --model {model} --prompt hi --top-k 1.5",
    "penalty-zero": "generate --model {model} --prompt hi --repetition-penalty 0",
    "penalty-nan": "generate --model {model} --prompt hi --repetition-penalty nan",
    "max-new-tokens-0": "generate --model {model} --prompt hi --max-new-tokens 0",
    "max-new-tokens-minus-3": "generate --model {model} --prompt hi --max-new-tokens -3",
    "threads-1000": "generate --model {model} --prompt hi --threads 1000",
    "threads-minus-5": "generate --model {model} --prompt hi --threads -5",
    "threads-zero": "generate --model {model} --prompt hi --threads 0",
    "seed-negative": "generate --model {model} --prompt hi --seed -1",
    "seed-text": "generate --model {model} --prompt hi --seed x",
    "prompt-surrogate": ["generate", "--model", "{model}", "--prompt", SURROGATE],
    "system-surrogate": ["generate", "--model", "{model}", "--prompt", "hi", "--system", SURROGATE],
    "prompt-missing": "generate --model {model}",
    "raw-empty-prompt": ["generate", "--model", "{model}", "--raw", "--prompt", ""],
    "greedy-and-temperature": "generate --model {model} --prompt hi --greedy --temperature 1",
    "mode-unknown": "generate --model {model} --prompt hi --mode fast",
    "device-unknown": "generate --model {model} --prompt hi --device quantum",
    "option-unknown": "generate --model {model} --prompt hi --bogus",
    # generate: model paths
    "model-missing": "generate --model {empty}/nowhere --prompt hi",
    "model-is-a-file": "generate --model {file} --prompt hi",
    "model-is-a-gguf": "generate --model {gguf} --prompt hi",
    "model-empty-folder": "generate --model {empty} --prompt hi",
    "model-surrogate": ["generate", "--model", "/tmp/" + SURROGATE, "--prompt", "hi"],
    # generate / bench: which graph of the folder
    "onnx-file-empty": ["generate", "--model", "{model}", "--prompt", "hi", "--onnx-file", ""],
    "onnx-file-absolute": "generate --model {model} --prompt hi --onnx-file /etc/passwd",
    "onnx-file-surrogate": [
        "generate",
        "--model",
        "{model}",
        "--prompt",
        "hi",
        "--onnx-file",
        SURROGATE,
    ],
    "onnx-file-missing": "generate --model {model} --prompt hi --onnx-file onnx/model_q2.onnx",
    "onnx-file-outside": "generate --model {model_copy} --prompt hi --onnx-file ../outside.onnx",
    "onnx-file-a-folder": "generate --model {model_copy} --prompt hi --onnx-file onnx",
    "bench-onnx-file-absolute": "bench --model {model} --onnx-file /dev/zero",
    # serve (refused before anything listens)
    "serve-port-text": "serve --model {model} --port x",
    "serve-port-70000": "serve --model {model} --port 70000",
    "serve-api-key-surrogate": ["serve", "--model", "{model}", "--api-key", SURROGATE],
    "serve-onnx-file-absolute": "serve --model {model} --onnx-file /etc/passwd",
    "serve-onnx-file-missing": "serve --model {model} --port 0 --onnx-file nothing.onnx",
    # variants
    "variants-model-missing": "variants --model {empty}/nowhere",
    "variants-model-is-a-file": "variants --model {file}",
    # bench
    "repeats-0": "bench --model {model} --repeats 0",
    "repeats-negative": "bench --model {model} --repeats -1",
    "repeats-million": "bench --model {model} --repeats 1000000",
    "sweep-1-x": "bench --model {model} --sweep 1,x",
    "sweep-empty": ["bench", "--model", "{model}", "--sweep", ""],
    "sweep-commas": "bench --model {model} --sweep ,,",
    "sweep-zero": "bench --model {model} --sweep 0,128",
    "sweep-gap": "bench --model {model} --sweep 1,,2",
    "sweep-too-many": "bench --model {model} --sweep " + ",".join(["64"] * 40),
    "context-tokens-0": "bench --model {model} --context-tokens 0",
    "context-tokens-past-context": "bench --model {model} --context-tokens 100000",
    "bench-max-new-tokens-0": "bench --model {model} --max-new-tokens 0",
    "report-is-a-file": "bench --model {model} --report {file}",
    "peer-unknown": "bench --model {model} --peer llama.cpp",
    "bench-threads-1000": "bench --model {model} --threads 1000",
    # convert
    "convert-missing": "convert {empty}/missing.gguf {empty}/out",
    "convert-a-folder": "convert {empty} {empty}/out",
    "convert-not-gguf": "convert {file} {empty}/out",
    "convert-context-0": "convert {gguf} {empty}/out --context 0",
    "convert-context-minus-1": "convert {gguf} {empty}/out --context -1",
    "convert-context-10^9": "convert {gguf} {empty}/out --context 1000000000",
    "convert-window-0": "convert {gguf} {empty}/out --kv-layout static --context 64 --window 0",
    "convert-window-too-big": "convert {gguf} {empty}/out --kv-layout static --context 64 "
    "--window 64",
    "convert-static-without-context": "convert {gguf} {empty}/out --kv-layout static",
    "convert-accuracy-3": "convert {gguf} {empty}/out --accuracy-level 3",
    "convert-into-gguf-folder": "convert {gguf_dir}/m.gguf {gguf_dir} --force",
    "convert-onto-the-gguf": "convert {gguf_dir}/m.gguf {gguf_dir}/m.gguf --force",
    "convert-force-foreign-folder": "convert {gguf} {file_dir} --force",
    "convert-missing-out": "convert {gguf}",
    "devices-bogus": "devices --bogus",
}


@pytest.fixture(scope="module")
def paths(tiny_model_dir: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("cli")
    file_dir = base / "files"
    file_dir.mkdir()
    plain = file_dir / "notes.txt"
    plain.write_text("not a model")
    empty = base / "empty"
    empty.mkdir()
    gguf_dir = base / "downloads"
    gguf_dir.mkdir()
    (gguf_dir / "m.gguf").write_bytes(tiny_gguf.read_bytes())
    model_copy = base / "model_copy"  # beside it: a readable graph outside the folder
    shutil.copytree(tiny_model_dir, model_copy)
    (model_copy / "onnx").mkdir()
    shutil.copyfile(tiny_model_dir / "model.onnx", base / "outside.onnx")
    return {
        "model": tiny_model_dir,
        "model_copy": model_copy,
        "file": plain,
        "file_dir": file_dir,
        "empty": empty,
        "gguf": tiny_gguf,
        "gguf_dir": gguf_dir,
    }


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", list(BAD))
def test_bad_command_line_gives_one_line_and_exit_code_2(
    case: str, paths: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = BAD[case]
    argv = spec.split() if isinstance(spec, str) else list(spec)
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    before = sorted(p.name for p in paths["gguf_dir"].iterdir())
    code, out, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if line and not line.startswith("convert [")]
    assert code == 2, (case, err)
    assert len(lines) == 1, (case, err)
    assert lines[0].startswith("chatapp"), lines[0]
    assert "Traceback" not in err and out == ""
    assert sorted(p.name for p in paths["gguf_dir"].iterdir()) == before  # the GGUF survives


def test_messages_say_what_was_wrong(paths: dict, capsys: pytest.CaptureFixture[str]) -> None:
    expected = {
        "temperature-nan": "argument --temperature: nan is not a finite number",
        "top-p-2": "argument --top-p: 2 is out of range: above 0, up to 1",
        "repeats-0": "argument --repeats: 0 is out of range: from 1 to 1000",
        "sweep-1-x": "argument --sweep: 'x' is not a context length",
        "threads-minus-5": "argument --threads: -5 is out of range: from 1 to",
        "prompt-surrogate": "argument --prompt: is not valid UTF-8 text",
        "model-is-a-file": "is a file, not a model folder",
        "context-tokens-past-context": "does not fit the context of 512 tokens",
        "convert-into-gguf-folder": "holds the GGUF file being converted",
        "onnx-file-absolute": "argument --onnx-file: '/etc/passwd' is an absolute path",
        "onnx-file-outside": "'../outside.onnx', which leads outside the model folder",
        "onnx-file-a-folder": "--onnx-file names 'onnx', which is not a regular file",
        "variants-model-is-a-file": "is a file, not a model folder",
        "serve-onnx-file-missing": "--onnx-file names 'nothing.onnx', which is missing",
    }
    for case, text in expected.items():
        spec = BAD[case]
        argv = spec.split() if isinstance(spec, str) else list(spec)
        argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
        _, _, err = run(argv, capsys)
        assert text in err, (case, err)


def test_a_good_command_line_still_runs(paths: dict, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "--model", str(paths["model"]), "--prompt", "hi", "--greedy"]
    code, out, err = run([*argv, "--max-new-tokens", "4", "--json", "--threads", "1"], capsys)
    assert code == 0, err
    assert '"generated_tokens"' in out
