"""The files a model folder names, opened only when they are regular files inside it.

A model folder is untrusted input: its `genai_config.json` names the decoder file, its `.onnx`
names external data files, and any of them can be a link. Each name is resolved (links
followed) and must land on a regular file inside the folder, so a folder cannot make the app
read `/dev/zero`, a named pipe or a file elsewhere on the disk; a name that points at nothing is
an error that says so rather than a silent fallback. Sizes are capped before reading, so a
linked or swapped-in giant file is refused without being read.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx

from chatapp.engine.errors import FolderFileError, ModelError

MAX_JSON_BYTES = 16 << 20  # config.json, genai_config.json, tokenizer_config.json, ...
# tokenizer.json of a 256k vocabulary is ~33 MB (Gemma 3); a 500 MB one took 1.3 GB to refuse.
MAX_TOKENIZER_BYTES = 64 << 20
MAX_ONNX_BYTES = 2 << 30  # protobuf's own limit: bigger weights live in external data
# What transformers' AutoTokenizer may open in a folder (AutoTokenizer never reads elsewhere
# with local_files_only, but these must not be links out of the folder or devices either).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "config.json",
    "generation_config.json",
)
# First byte of a serialized ModelProto: the tag of its lowest field (ir_version = 0x08 in
# every exporter's output). Anything else is not an ONNX model, and is refused unread.
_MODEL_PROTO_TAGS = {0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2}


def resolve_inside(folder: Path, name: str | os.PathLike[str], what: str) -> Path:
    """`name` (as `what` gives it) as a regular file inside `folder`, links resolved."""
    text = os.fspath(name)
    if not isinstance(text, str) or not text or "\0" in text:
        raise FolderFileError(f"{what} names {text!r}, which is not a file name.")
    relative = Path(text)
    if relative.is_absolute() or relative.drive or relative.root:
        raise FolderFileError(
            f"{what} names the absolute path '{text}'; a model folder may only name files "
            "inside itself."
        )
    base = folder.resolve()
    try:
        real = (folder / relative).resolve(strict=True)
    except FileNotFoundError:
        missing = f"{what} names '{text}', which is missing from {folder.name}."
        raise FolderFileError(missing) from None
    except (OSError, RuntimeError) as exc:  # a link loop, a permission problem
        raise FolderFileError(f"{what} names '{text}', which cannot be opened ({exc}).") from None
    if not real.is_relative_to(base):
        raise FolderFileError(
            f"{what} names '{text}', which leads outside the model folder {folder.name}; "
            "a model folder may only use files inside itself."
        )
    if not stat.S_ISREG(real.stat().st_mode):
        raise FolderFileError(f"{what} names '{text}', which is not a regular file.")
    return real


def optional_inside(folder: Path, name: str, what: str | None = None) -> Path | None:
    """Like `resolve_inside`, but None when nothing by that name is there (not even a link)."""
    if not os.path.lexists(folder / name):
        return None
    return resolve_inside(folder, name, what or f"{folder.name}/{name}")


def read_json_file(folder: Path, name: str) -> dict[str, Any] | None:
    """`folder/name` parsed, None when absent; size-capped, inside the folder, an object."""
    path = optional_inside(folder, name)
    if path is None:
        return None
    data = read_capped(path, MAX_JSON_BYTES, f"{name} in {folder.name}")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelError(f"{name} in {folder.name} is not valid JSON ({_short(exc)}).") from None
    if not isinstance(value, dict):
        raise ModelError(f"{name} in {folder.name} is not a JSON object.")
    return value


def read_capped(path: Path, limit: int, what: str) -> bytes:
    size = path.stat().st_size
    if size > limit:
        raise ModelError(f"{what} is {size >> 20} MB; more than {limit >> 20} MB is refused.")
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ModelError(f"{what} could not be read ({exc.strerror or exc}).") from None
    if len(data) > limit:
        raise ModelError(f"{what} grew past {limit >> 20} MB while it was read.")
    return data


def check_tokenizer_files(folder: Path) -> None:
    """Every tokenizer file present is a capped regular file inside the folder."""
    for name in TOKENIZER_FILES:
        path = optional_inside(folder, name)
        if path is not None:
            limit = (
                MAX_TOKENIZER_BYTES
                if name in ("tokenizer.json", "tokenizer.model")
                else (MAX_JSON_BYTES)
            )
            size = path.stat().st_size
            if size > limit:
                raise ModelError(
                    f"{name} in {folder.name} is {size >> 20} MB; more than {limit >> 20} MB "
                    "is refused."
                )


def load_onnx_graph(path: Path) -> onnx.ModelProto:
    """The .onnx protobuf without its external data, after cheap checks; then every external
    data reference is checked to stay inside the folder."""
    size = path.stat().st_size
    if size > MAX_ONNX_BYTES:
        raise ModelError(
            f"{path.name} is {size >> 30} GB; an ONNX file holds at most 2 GB (larger weights "
            "go into external data files)."
        )
    with path.open("rb") as fh:
        first = fh.read(1)
    if not first or first[0] not in _MODEL_PROTO_TAGS:
        raise ModelError(f"{path.name} is not an ONNX model (it is empty or starts wrongly).")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise ModelError(f"{path.name} is not a readable ONNX model ({_short(exc)}).") from None
    check_external_data(proto, path)
    return proto


def check_external_data(proto: onnx.ModelProto, onnx_path: Path) -> None:
    """Each tensor stored outside the .onnx names a regular file beside it (or below), and the
    bytes it takes from that file are there. Recent ONNX Runtime versions refuse paths outside
    the model's own folder too; older ones did not."""
    base = onnx_path.parent
    sizes: dict[Path, int] = {}
    for tensor in _all_tensors(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {e.key: e.value for e in tensor.external_data}
        what = f"{onnx_path.name} (tensor '{tensor.name}')"
        location = entries.get("location")
        if not location:
            raise ModelError(f"{what} is stored outside the file but names no location.")
        real = resolve_inside(base, location, what)
        size = sizes.setdefault(real, real.stat().st_size)
        offset = _count(entries, "offset", what, 0) or 0
        length = _count(entries, "length", what, None)
        end = offset + (length if length is not None else 0)
        if offset > size or end > size:
            raise ModelError(
                f"{what} takes bytes {offset} to {end} of '{location}', which has {size}."
            )


def _count(entries: dict[str, str], key: str, what: str, default: int | None) -> int | None:
    text = entries.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ModelError(f"{what} has the external data {key} '{text[:40]}'.") from None
    if value < 0:
        raise ModelError(f"{what} has the external data {key} {value}.")
    return value


def _all_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    yield from _graph_tensors(proto.graph)
    for function in proto.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.t
        yield from attr.tensors
        if attr.HasField("sparse_tensor"):
            yield attr.sparse_tensor.values
            yield attr.sparse_tensor.indices
        if attr.HasField("g"):
            yield from _graph_tensors(attr.g)
        for graph in attr.graphs:
            yield from _graph_tensors(graph)


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
