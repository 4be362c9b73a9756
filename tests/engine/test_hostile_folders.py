"""Hostile model folders: files named outside the folder, links, devices, pipes, giant or
malformed configs, nonsense values. Each gives one ModelError line before anything is read."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from chatapp.engine import model_description
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError, ModelError
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.text.chat import ChatTokenizer

Change = Callable[[Path], None]


def edit_json(name: str, change: Callable[[dict], None]) -> Change:
    def apply(folder: Path) -> None:
        path = folder / name
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return apply


def genai_filename(value: object) -> Change:
    return edit_json("genai_config.json", lambda d: d["model"]["decoder"].update(filename=value))


def replace_with_link(name: str, target: str | Path) -> Change:
    def apply(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).symlink_to(target)

    return apply


def replace_with_fifo(name: str) -> Change:
    def apply(folder: Path) -> None:
        (folder / name).unlink()
        os.mkfifo(folder / name)

    return apply


def write(name: str, data: bytes) -> Change:
    return lambda folder: (folder / name).write_bytes(data)


def both(*changes: Change) -> Change:
    def apply(folder: Path) -> None:
        for change in changes:
            change(folder)

    return apply


def move_model_to_onnx_subfolder(variant_target: str | None) -> Change:
    """Optimum's layout: onnx/model*.onnx; the first one a link to `variant_target`."""

    def apply(folder: Path) -> None:
        (folder / "onnx").mkdir()
        (folder / "model.onnx").rename(folder / "onnx" / "model_fp32.onnx")
        (folder / "genai_config.json").unlink()
        if variant_target is not None:
            (folder / "onnx" / "model.onnx").symlink_to(variant_target)

    return apply


def outside_file(folder: Path) -> Path:
    path = folder.parent / "outside.onnx"
    shutil.copyfile(folder / "model.onnx", path)
    return path


FOLDER_CASES: dict[str, tuple[Change, str]] = {
    "genai-names-parent": (
        lambda f: (outside_file(f), genai_filename("../outside.onnx")(f)),
        r"names '\.\./outside\.onnx', which leads outside the model folder",
    ),
    "genai-names-absolute": (genai_filename("/etc/passwd"), r"absolute path '/etc/passwd'"),
    "genai-names-missing": (
        genai_filename("model_int4.onnx"),
        r"'model_int4.onnx', which is missing",
    ),
    "genai-names-a-number": (genai_filename(42), r"decoder filename is 42"),
    "genai-names-nul": (genai_filename("model\u0000.onnx"), r"not a file name"),
    "genai-names-a-folder": (
        both(lambda f: (f / "sub").mkdir(), genai_filename("sub")),
        r"'sub', which is not a regular file",
    ),
    "genai-model-is-a-list": (
        edit_json("genai_config.json", lambda d: d.update(model=[1])),
        r"'model' is \[1\]; a JSON object",
    ),
    "model-onnx-links-to-dev-zero": (
        replace_with_link("model.onnx", "/dev/zero"),
        r"leads outside the model folder",
    ),
    "model-onnx-links-outside": (
        lambda f: replace_with_link("model.onnx", outside_file(f))(f),
        r"leads outside",
    ),
    "model-onnx-is-a-pipe": (
        both(genai_filename("model.onnx"), replace_with_fifo("model.onnx")),
        r"not a regular file",
    ),
    "model-onnx-link-loop": (
        lambda f: (os.remove(f / "model.onnx"), os.symlink("model.onnx", f / "model.onnx")),
        r"cannot be opened",
    ),
    "optimum-variant-links-to-dev-zero": (
        move_model_to_onnx_subfolder("/dev/zero"),
        r"leads outside the model folder",
    ),
    "model-onnx-zeros": (write("model.onnx", bytes(4096)), r"not an ONNX model"),
    "model-onnx-empty": (write("model.onnx", b""), r"not an ONNX model"),
    "model-onnx-text": (write("model.onnx", b"\x08hello, not protobuf"), r"not a readable ONNX"),
    "config-links-to-dev-zero": (replace_with_link("config.json", "/dev/zero"), r"leads outside"),
    "config-is-a-pipe": (replace_with_fifo("config.json"), r"not a regular file"),
    "config-17-MB": (write("config.json", b" " * (17 << 20)), r"more than 16 MB is refused"),
    "config-not-json": (write("config.json", b"{nope"), r"config.json in .* is not valid JSON"),
    "config-not-utf8": (write("config.json", b'{"a": "\xff"}'), r"not valid JSON"),
    "config-deeply-nested": (write("config.json", b"[" * 200000 + b"]" * 200000), r"not valid"),
    "config-a-list": (write("config.json", b"[1, 2]"), r"not a JSON object"),
    "tokenizer-links-outside": (
        lambda f: replace_with_link("tokenizer.json", outside_file(f))(f),
        r"tokenizer.json.*leads outside",
    ),
    "tokenizer-config-is-a-pipe": (replace_with_fifo("tokenizer_config.json"), r"not a regular"),
    "special-tokens-map-links-to-dev-zero": (
        replace_with_link("special_tokens_map.json", "/dev/zero"),
        r"special_tokens_map.json.*leads outside",
    ),
    "eos-text": (
        edit_json("generation_config.json", lambda d: d.update(eos_token_id="abc")),
        r"generation_config.json's eos_token_id is 'abc'",
    ),
    "eos-negative": (
        edit_json("config.json", lambda d: d.update(eos_token_id=[2, -1])),
        r"config.json's eos_token_id is -1",
    ),
    "eos-outside-vocab": (
        edit_json("generation_config.json", lambda d: d.update(eos_token_id=[2, 99999])),
        r"eos_token_id is 99999; a whole number from 0 to 268",
    ),
    "eos-a-dict": (
        edit_json("genai_config.json", lambda d: d["model"].update(eos_token_id={"a": 1})),
        r"eos_token_id is \{'a': 1\}",
    ),
    "kv-heads-zero": (
        edit_json("config.json", lambda d: d.update(num_key_value_heads=0)),
        r"config.json's num_key_value_heads is 0; a whole number from 1 to 4096",
    ),
    "heads-zero": (
        edit_json("config.json", lambda d: d.update(num_attention_heads=0)),
        r"config.json's num_attention_heads is 0",
    ),
    "heads-not-in-groups": (
        edit_json("config.json", lambda d: d.update(num_attention_heads=6, num_key_value_heads=4)),
        r"6 attention heads, which do not split into groups for its 4 KV heads",
    ),
    "tokenizer-500-MB": (
        lambda f: os.truncate(f / "tokenizer.json", 500 << 20),  # sparse: no disk, no reading
        r"tokenizer.json in .* is 500 MB; more than 64 MB is refused",
    ),
    "context-minus-5": (
        edit_json("genai_config.json", lambda d: d["model"].update(context_length=-5)),
        r"context_length is -5",
    ),
    "context-zero": (
        edit_json("genai_config.json", lambda d: d["model"].update(context_length=0)),
        r"context_length is 0",
    ),
    "context-text": (
        edit_json("genai_config.json", lambda d: d["model"].update(context_length="2048")),
        r"context_length is '2048'",
    ),
    "context-10^12": (
        both(
            lambda f: (f / "genai_config.json").unlink(),
            edit_json("config.json", lambda d: d.update(max_position_embeddings=10**12)),
        ),
        r"max_position_embeddings is 1000000000000",
    ),
    "context-true": (
        both(
            lambda f: (f / "genai_config.json").unlink(),
            edit_json("config.json", lambda d: d.update(max_position_embeddings=True)),
        ),
        r"max_position_embeddings is True",
    ),
}


@pytest.mark.parametrize("case", list(FOLDER_CASES))
def test_hostile_folder_is_refused_with_one_line(
    tiny_model_dir: Path, tmp_path: Path, case: str
) -> None:
    change, message = FOLDER_CASES[case]
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    change(folder)
    with pytest.raises(ModelError, match=message) as info:
        open_model_folder(folder)
    assert "\n" not in str(info.value), str(info.value)


def test_a_link_inside_the_folder_is_fine(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "weights").mkdir()
    (folder / "model.onnx").rename(folder / "weights" / "decoder.onnx")
    (folder / "model.onnx").symlink_to(Path("weights") / "decoder.onnx")
    assert open_model_folder(folder).onnx_path == (folder / "weights" / "decoder.onnx").resolve()


def test_a_model_file_given_as_the_folder(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelError, match=r"is a file, not a model folder"):
        open_model_folder(tiny_model_dir / "model.onnx")


def test_tokenizer_code_in_the_folder_never_runs(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    marker = tmp_path / "ran"
    (folder / "evil_tok.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["evil_tok.EvilTokenizer", None]}
    config["tokenizer_class"] = "EvilTokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with contextlib.suppress(ModelError):
        ChatTokenizer.from_folder(folder)
    assert not marker.exists()


# --- external data -----------------------------------------------------------------------------


def external_model(folder: Path, location: str, offset: str = "0", length: str = "16") -> Path:
    """A one-Add graph whose weight `w` lives in external data at `location`."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


EXTERNAL_CASES = {
    "parent": ("../secret.bin", r"'\.\./secret\.bin', which leads outside"),
    "absolute": ("{tmp}/secret.bin", r"absolute path"),
    "link-out": ("data.bin", r"'data\.bin', which leads outside"),
    "missing": ("nothing.bin", r"'nothing\.bin', which is missing"),
    "dev-zero": ("/dev/zero", r"absolute path '/dev/zero'"),
    "past-the-end": ("inside.bin@8@16", r"takes bytes 8 to 24 of 'inside\.bin', which has 16"),
    "negative-offset": ("inside.bin@-4@16", r"external data offset -4"),
    "offset-text": ("inside.bin@x@16", r"external data offset 'x'"),
}


@pytest.mark.parametrize("case", list(EXTERNAL_CASES))
def test_external_data_outside_the_folder_is_refused(tmp_path: Path, case: str) -> None:
    from chatapp.engine.model_folder.read import load_onnx_graph

    location, message = EXTERNAL_CASES[case]
    location = location.format(tmp=tmp_path)
    (tmp_path / "secret.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "inside.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    if case == "link-out":
        (folder / "data.bin").symlink_to(tmp_path / "secret.bin")
    name, offset, length = ([*location.split("@"), "0", "16"])[:3]
    path = external_model(folder, name, offset, length)
    with pytest.raises(ModelError, match=message):
        load_onnx_graph(path)
    if case in ("parent", "absolute", "link-out"):
        # onnxruntime (1.17 and later) refuses these too; older versions read them.
        with pytest.raises(Exception, match=r"(?i)external data|escapes|absolute"):
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_external_data_inside_the_folder_loads(tmp_path: Path) -> None:
    from chatapp.engine.model_folder.read import load_onnx_graph

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "inside.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = external_model(folder, "inside.bin")
    load_onnx_graph(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"x": np.ones(4, dtype=np.float32)})
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]


# --- engine arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [0, -5, 100000])
def test_thread_counts_outside_the_cap_are_refused(tiny_model_dir: Path, threads: int) -> None:
    with pytest.raises(EngineError, match=r"Threads must be from 1 to \d+"):
        Engine(tiny_model_dir, threads=threads)


def test_context_below_one_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(EngineError, match="at least 1 token"):
        Engine(tiny_model_dir, max_context=0)


def test_a_kv_cache_larger_than_memory_is_refused(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        model_description, "physical_memory", lambda: 1 << 16
    )  # the tiny KV: 256 KB
    with pytest.raises(EngineError, match=r"KV cache for 512 tokens .* more than half"):
        Engine(tiny_model_dir)
