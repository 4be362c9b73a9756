"""A model folder read, in one room: its files, opened only when they are regular files inside
it, and what its graph and configs say, checked. No Qt. Files: its configs (read once:
`read_configs`), the graphs it offers and the order they are tried in (`graph_candidates`), a
graph without its weights and the weight files it names, its tokenizer files. Described (the
second half of this module, `describe_graph`): the decoder's inputs and outputs, its KV tensors
and layout, its vocabulary, context and end-of-sequence tokens (a ModelInfo).
model_description.read_model_folder takes a folder through both in one pass.

Optimum puts `model.onnx` at the top of the folder; onnx-community repositories put several
precisions in `onnx/` (`model.onnx`, `model_fp16.onnx`, `model_q4.onnx`, `model_quantized.onnx`,
...); older Optimum exports have `decoder_model_merged.onnx` beside `decoder_model.onnx` and
`decoder_with_past_model.onnx`. The default is the most precise one that both loops can run.

A model folder is untrusted input: its `genai_config.json` names the decoder file, its `.onnx`
names external data files, and any of them can be a link. Each name is resolved (links
followed) and must land on a regular file inside the folder, so a folder cannot make the app
read `/dev/zero`, a named pipe or a file elsewhere on the disk; a name that points at nothing is
an error that says so rather than a silent fallback. Sizes are capped before reading, so a
linked or swapped-in giant file is refused without being read.

The description is pure: what it is given was read already; nothing there opens a file.
Values read from the JSON and the graph are checked: one-line errors naming the file and the
key instead of a ValueError from `int("abc")` or a KV cache sized by `-5`. Names follow Hugging
Face's (`input_ids`, `past_key_values.%d.key`, `present.%d.key`, `logits`) unless the folder's
genai_config.json names them otherwise (model.decoder.inputs / outputs). onnxruntime-genai's
builder leaves the KV head size symbolic (`kv_cache_dim`), so the head count and size may come
from genai_config.json or config.json instead of the graph.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from chatapp.engine.errors import FolderFileError, ModelError
from chatapp.engine.model_folder.model import (
    KVLayout,
    KVTensor,
    ModelInfo,
    ModelIO,
    Span,
    TokenizerFiles,
)
from chatapp.engine.tensor_types import FLOAT_TYPES
from chatapp.folder_format.graph import DECODE_ATTENTION
from chatapp.folder_format.manifest import MANIFEST_FILE
from chatapp.units import whole_mb_up

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
# A folder of named chat templates that transformers reads beside tokenizer_config.json.
TEMPLATE_FOLDER = "additional_chat_templates"
# First byte of a serialized ModelProto: the tag of its lowest field (ir_version = 0x08 in
# every exporter's output). Anything else is not an ONNX model, and is refused unread.
_MODEL_PROTO_TAGS = {0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2}


GGUF = "gguf"  # the precision and file-name suffix of a native graph (model_gguf.onnx)

# Most precise first. int4 with float32 activations (q4) is more precise than with float16 (q4f16).
# "gguf": chatapp's native graph (model_gguf.onnx) on the GGUF's own blocks; it runs on the CPU
# with chatapp's library only, so it is chosen by device (`by_device`), not by this order.
PRECISION_ORDER = ("fp32", "fp16", "bf16", "int8", "uint8", "q4", "q4f16", "bnb4", GGUF)
# transformers.js's file-name suffixes (model_<suffix>.onnx) and what they mean.
NAME_SUFFIXES = {
    "fp32": "fp32",
    "fp16": "fp16",
    "bf16": "bf16",
    "quantized": "int8",
    "q8": "int8",
    "int8": "int8",
    "uint8": "uint8",
    "q4": "q4",
    "int4": "q4",
    "q4f16": "q4f16",
    "bnb4": "bnb4",
    GGUF: GGUF,
}
# Graph names by how a folder uses them: the plain decoder first, legacy layouts after it; a
# decoder without past inputs (Optimum's legacy decoder_model.onnx) cannot run here at all.
STEMS = ("model", "decoder_model_merged", "decoder_with_past_model", "decoder_model")
_SUFFIX = re.compile(r"^(?P<stem>.+?)_(?P<suffix>[a-z0-9]+)$")


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
    return None if path is None else _json_object(path, f"{name} in {folder.name}")


def _json_object(path: Path, what: str) -> dict[str, Any]:
    data = read_capped(path, MAX_JSON_BYTES, what)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelError(f"{what} is not valid JSON ({_short(exc)}).") from None
    if not isinstance(value, dict):
        raise ModelError(f"{what} is not a JSON object.")
    return value


def read_capped(path: Path, limit: int, what: str) -> bytes:
    size = path.stat().st_size
    if size > limit:
        raise ModelError(
            f"{what} is {whole_mb_up(size)} MB; more than {limit >> 20} MB is refused."
        )
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ModelError(f"{what} could not be read ({exc.strerror or exc}).") from None
    if len(data) > limit:
        raise ModelError(f"{what} grew past {limit >> 20} MB while it was read.")
    return data


def candidate_files(folder: Path) -> list[Path]:
    """Every .onnx entry at the top of the folder and in onnx/ but sub-folders. Links and
    special files count too: they are refused by name when checked (`resolve_inside`), rather
    than skipped in silence."""
    found: list[Path] = []
    for sub in (folder, folder / "onnx"):
        if sub.is_dir():
            found += sorted(p for p in sub.glob("*.onnx") if p.is_symlink() or not p.is_dir())
    return found


def split_name(file_name: str) -> tuple[str, str | None]:
    """('model', 'q4') for model_q4.onnx; ('model', None) for model.onnx."""
    stem = file_name.removesuffix(".onnx")
    match = _SUFFIX.match(stem)
    if match and match.group("suffix") in NAME_SUFFIXES:
        return match.group("stem"), NAME_SUFFIXES[match.group("suffix")]
    return stem, None


def preference(folder: Path, path: Path) -> tuple[int, int, str]:
    """Sort key: most precise first (a plain name is taken as fp32), then plain layouts first."""
    stem, precision = split_name(path.name)
    rank = PRECISION_ORDER.index(precision or "fp32")
    kind = STEMS.index(stem) if stem in STEMS else len(STEMS)
    return rank, kind, path.relative_to(folder).as_posix()


def ordered_candidates(folder: Path) -> list[Path]:
    """The folder's graphs in the order they are tried when none is named."""
    return sorted(candidate_files(folder), key=lambda p: preference(folder, p))


def graph_candidates(
    folder: Path, onnx_file: str | Path | None, decoder_file: object, prefer_native: bool
) -> list[Path]:
    """The graphs to try, in order: `onnx_file` (the user's pick), else the one genai_config.json
    names (`decoder_file`), else the folder's by `preference`, its native graphs first where they
    are preferred (`by_device`). Each is a regular file inside the folder, links resolved; all
    are checked before any is read, so a link out among them refuses the folder."""
    if onnx_file is not None:
        return [resolve_inside(folder, onnx_file, "--onnx-file")]
    return by_device(folder, _unnamed_candidates(folder, decoder_file), prefer_native)


def _unnamed_candidates(folder: Path, name: object) -> list[Path]:
    """The graphs to try when the user named none: genai_config.json's, else the folder's."""
    if name is not None:
        # Named means meant: a missing or misplaced file is an error, not another graph instead.
        if not isinstance(name, str):
            raise ModelError(f"genai_config.json's decoder filename is {name!r}, not a name.")
        return [resolve_inside(folder, name, "genai_config.json's decoder filename")]
    found = ordered_candidates(folder)
    if not found:
        raise ModelError(f"{folder.name} holds no ONNX model (model.onnx or onnx/model*.onnx).")
    resolved: list[Path] = []
    for path in found:
        real = resolve_inside(folder, path.relative_to(folder), folder.name)
        if real not in resolved:  # a link to another graph of the folder is tried once
            resolved.append(real)
    return resolved


def by_device(folder: Path, candidates: list[Path], prefer_native: bool) -> list[Path]:
    """The candidates with the folder's native graphs (model_gguf.onnx: `chatapp convert
    --graph both` writes one beside the stock model.onnx that genai_config.json names) first
    where they are preferred (the CPU with the library usable), else left out; a folder with
    no other graph keeps its own, so that the session says what to do
    (devices.register_if_needed)."""
    native = []
    for path in candidate_files(folder):
        if split_name(path.name)[1] == GGUF:
            real = resolve_inside(folder, path.relative_to(folder), folder.name)
            if real not in native:
                native.append(real)
    others = [p for p in candidates if p not in native]
    if prefer_native:
        return native + others
    return others or candidates


def external_data_files(model: onnx.ModelProto, onnx_path: Path) -> list[Path]:
    """The external data files the graph names (only those inside its own folder)."""
    names: set[str] = set()
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            for entry in init.external_data:
                if entry.key == "location":
                    names.add(entry.value)
    base = onnx_path.parent.resolve()
    files = []
    for name in sorted(names):
        path = (base / name).resolve()
        if path.is_relative_to(base) and path.is_file():
            files.append(path)
    return files


def read_tokenizer_files(folder: Path) -> TokenizerFiles:
    """Every tokenizer file present (TOKENIZER_FILES) checked to be a capped regular file
    inside the folder (links out, devices and giant files refused unread), and the small ones
    the tokenizer reads parsed; ModelError says which file, or that there is no tokenizer."""
    found: dict[str, Path] = {}
    for name in TOKENIZER_FILES:
        path = optional_inside(folder, name)
        if path is None:
            continue
        big = name in ("tokenizer.json", "tokenizer.model")
        limit = MAX_TOKENIZER_BYTES if big else MAX_JSON_BYTES
        size = path.stat().st_size
        if size > limit:
            raise ModelError(
                f"{name} in {folder.name} is {whole_mb_up(size)} MB; more than "
                f"{limit >> 20} MB is refused."
            )
        found[name] = path
    tokenizer = found.get("tokenizer.json")
    if tokenizer is None and "tokenizer.model" not in found:
        raise ModelError(f"{folder.name} has no tokenizer (tokenizer.json is missing).")

    def parsed(name: str) -> dict[str, Any] | None:
        path = found.get(name)
        return None if path is None else _json_object(path, f"{name} in {folder.name}")

    config = parsed("tokenizer_config.json")
    # transformers reads the map only where the config has no added_tokens_decoder
    stored = (
        parsed("special_tokens_map.json") if "added_tokens_decoder" not in (config or {}) else None
    )
    template = None
    if "chat_template.jinja" in found:
        what = f"chat_template.jinja in {folder.name}"
        try:
            template = read_capped(found["chat_template.jinja"], MAX_JSON_BYTES, what).decode()
        except UnicodeDecodeError:
            raise ModelError(f"{what} is not UTF-8 text.") from None
    return TokenizerFiles(
        folder,
        tokenizer,
        tokenizer.stat().st_size if tokenizer is not None else 0,
        config,
        stored,
        template,
        "added_tokens.json" in found or _template_folder(folder),
    )


def _template_folder(folder: Path) -> bool:
    """Whether additional_chat_templates/ is there (transformers reads its templates); it must
    be a folder inside the model folder whose files are capped regular files inside it too."""
    name = TEMPLATE_FOLDER
    if not os.path.lexists(folder / name):
        return False
    real = (folder / name).resolve()
    if not real.is_relative_to(folder.resolve()) or not real.is_dir():
        raise FolderFileError(
            f"{folder.name}/{name} is not a folder inside {folder.name}; a model folder may "
            "only use files inside itself."
        )
    for entry in sorted(real.iterdir()):
        path = resolve_inside(folder, f"{name}/{entry.name}", f"{folder.name}/{name}")
        read_capped(path, MAX_JSON_BYTES, f"{name}/{entry.name} in {folder.name}")
    return True


@dataclass(frozen=True)
class FolderConfigs:
    """A model folder's configs, read once (each size-capped, inside the folder, an object)."""

    folder: Path
    genai: dict[str, Any] | None  # genai_config.json (None without one)
    config: dict[str, Any] | None  # config.json (None without one)
    generation: dict[str, Any]  # generation_config.json ({} without one)
    made_by_chatapp: bool  # its manifest names chatapp's converter


def read_configs(folder: Path | str) -> FolderConfigs:
    """The configs of the model folder `folder`; ModelError says what is unreadable."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        if folder.exists():
            raise ModelError(
                f"{folder} is a file, not a model folder (a .gguf file is converted first: "
                "File > Open GGUF, or `chatapp convert`)."
            )
        raise ModelError(f"The model folder {folder} does not exist.")
    genai = read_json_file(folder, "genai_config.json")
    config = read_json_file(folder, "config.json")
    generation = read_json_file(folder, "generation_config.json") or {}
    try:
        manifest = read_json_file(folder, MANIFEST_FILE)
    except ModelError:  # only the sampling defaults read it: a bad one is no chatapp's
        manifest = None
    made_by_chatapp = manifest is not None and manifest.get("converter") == "chatapp"
    return FolderConfigs(folder, genai, config, generation, made_by_chatapp)


def load_onnx_graph(path: Path) -> onnx.ModelProto:
    """The .onnx protobuf without its external data (`read_onnx_graph`)."""
    return read_onnx_graph(path)[0]


def read_onnx_graph(path: Path) -> tuple[onnx.ModelProto, dict[str, Span]]:
    """The .onnx protobuf without its external data, after cheap checks, and where each tensor
    stored outside it lies (by name), every external data reference checked to stay inside
    the folder."""
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
    return proto, check_external_data(proto, path)


def check_external_data(proto: onnx.ModelProto, onnx_path: Path) -> dict[str, Span]:
    """Each tensor stored outside the .onnx names a regular file beside it (or below), and the
    bytes it takes from that file are there: where each lies, by name. Recent ONNX Runtime
    versions refuse paths outside the model's own folder too; older ones did not."""
    sizes: dict[Path, int] = {}
    spans: dict[str, Span] = {}
    for tensor in _all_tensors(proto):
        span = external_span(tensor, onnx_path)
        if span is None:
            continue
        spans[tensor.name] = span
        real, offset, length = span
        size = sizes.setdefault(real, real.stat().st_size)
        end = offset + (length if length is not None else 0)
        if offset > size or end > size:
            what = f"{onnx_path.name} (tensor '{tensor.name}')"
            location = next(e.value for e in tensor.external_data if e.key == "location")
            raise ModelError(
                f"{what} takes bytes {offset} to {end} of '{location}', which has {size}."
            )
    return spans


def external_span(tensor: onnx.TensorProto, onnx_path: Path) -> Span | None:
    """Where a tensor stored outside `onnx_path` lies: (its file, inside the folder and links
    resolved; offset; length, None for the rest of the file); None for a tensor stored inside.
    ModelError names a location or a number that cannot be used."""
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    entries = {e.key: e.value for e in tensor.external_data}
    what = f"{onnx_path.name} (tensor '{tensor.name}')"
    location = entries.get("location")
    if not location:
        raise ModelError(f"{what} is stored outside the file but names no location.")
    real = resolve_inside(onnx_path.parent, location, what)
    offset = _count(entries, "offset", what, 0) or 0
    return real, offset, _count(entries, "length", what, None)


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


# ---- the graph and its configs described (pure: nothing below opens a file) ----------------

MAX_CONTEXT = 1 << 24
MAX_VOCAB = 1 << 24
MAX_LAYERS = 1024
MAX_HEADS = 4096
MAX_HEAD_DIM = 4096


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def whole_number(value: Any, where: str, low: int = 1, high: int = MAX_CONTEXT) -> int:
    """`value` as an int in [low, high]; integral floats (2048.0) are accepted."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ModelError(
            f"{where} is {_show(value)}; a whole number from {low} to {high} was expected."
        )
    return value


def token_ids(value: Any, where: str, vocab_size: int) -> list[int]:
    """An id or a list of ids, each inside the vocabulary."""
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return [whole_number(v, where, 0, max(vocab_size - 1, 0)) for v in values]


def section(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """A nested object that may be absent; anything but an object is an error."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelError(f"{where} '{key}' is {_show(value)}; a JSON object was expected.")
    return value


def check_head_counts(config: dict[str, Any], where: str) -> None:
    """config.json's head counts, before transformers reads them (0 KV heads made it fail
    with "integer modulo by zero")."""
    counts = {}
    for key in ("num_attention_heads", "num_key_value_heads"):
        if config.get(key) is not None:
            counts[key] = whole_number(config[key], f"{where}'s {key}", 1, MAX_HEADS)
    heads, kv_heads = counts.get("num_attention_heads"), counts.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ModelError(
            f"{where} has {heads} attention heads, which do not split into groups for its "
            f"{kv_heads} KV heads."
        )


def check_configs(config: dict[str, Any] | None, genai: dict[str, Any] | None) -> object:
    """config.json's head counts checked; what genai_config.json names as the decoder's file
    (None: it names none; the folder's files then say which graph)."""
    if config:
        check_head_counts(config, "config.json")
    return decoder_section(genai or {}).get("filename")


USE_CACHE_BRANCH = "use_cache_branch"  # legacy Optimum merged decoders
LOGITS_POSITIONS = "logits_positions"  # chatapp's converter (convert/decoder_graph.py)


@dataclass(frozen=True)
class DecoderNames:
    """Names of a decoder's inputs and outputs; KV names are templates with one %d (layer)."""

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str = "position_ids"
    logits: str = "logits"
    past_key: str = "past_key_values.%d.key"
    past_value: str = "past_key_values.%d.value"
    present_key: str = "present.%d.key"
    present_value: str = "present.%d.value"


def decoder_section(genai: dict[str, Any]) -> dict[str, Any]:
    """genai_config.json's model.decoder; {} when absent, an error when not an object."""
    model = section(genai, "model", "genai_config.json")
    return section(model, "decoder", "genai_config.json's model")


def decoder_names(genai: dict[str, Any]) -> DecoderNames:
    """Hugging Face's names, overridden by genai_config.json's model.decoder.inputs / outputs."""
    decoder = decoder_section(genai)
    inputs = section(decoder, "inputs", "genai_config.json's model.decoder")
    outputs = section(decoder, "outputs", "genai_config.json's model.decoder")
    default = DecoderNames()
    chosen: dict[str, str] = {}
    for field, source, key in (
        ("input_ids", inputs, "input_ids"),
        ("attention_mask", inputs, "attention_mask"),
        ("position_ids", inputs, "position_ids"),
        ("past_key", inputs, "past_key_names"),
        ("past_value", inputs, "past_value_names"),
        ("logits", outputs, "logits"),
        ("present_key", outputs, "present_key_names"),
        ("present_value", outputs, "present_value_names"),
    ):
        value = source.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise ModelError(f"genai_config.json names {key} as {value!r}, which is not a name.")
        if field.startswith(("past_", "present_")) and value.count("%d") != 1:
            raise ModelError(
                f"genai_config.json's {key} is {value!r}; a name with one %d (the layer) "
                "was expected."
            )
        chosen[field] = value
    return DecoderNames(**{**default.__dict__, **chosen})


def _template_pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(template).replace("%d", r"(\d+)") + "$")


def kv_tensors(
    file_name: str, names: DecoderNames, inputs: set[str], outputs: set[str]
) -> list[KVTensor]:
    """Every past input with its present output, ordered by layer then key before value."""
    found: list[KVTensor] = []
    for kind, past, present in (
        ("key", names.past_key, names.present_key),
        ("value", names.past_value, names.present_value),
    ):
        pattern = _template_pattern(past)
        for name in inputs:
            match = pattern.match(name)
            if not match:
                continue
            layer = int(match.group(1))
            present_name = present % layer
            if present_name not in outputs:
                raise ModelError(f"{file_name} has the input {name} but no output {present_name}.")
            found.append(KVTensor(layer, kind, name, present_name))
    if not found:
        raise ModelError(
            f"{file_name} has no past key/value inputs (such as {names.past_key % 0}): "
            "a model without a KV cache cannot be run by this app."
        )
    found.sort(key=lambda t: (t.layer, t.kind != "key"))
    layers = sorted({t.layer for t in found})
    if layers != list(range(len(layers))) or len(found) != 2 * len(layers):
        raise ModelError(
            f"{file_name} has past inputs for layers {layers} that do not pair up as one key "
            "and one value per layer."
        )
    return found


def model_io(
    file_name: str,
    names: DecoderNames,
    graph_inputs: set[str],
    graph_outputs: set[str],
    kv: list[KVTensor],
    overridable: frozenset[str] | set[str] = frozenset(),
) -> ModelIO:
    """The names the loops use; an input this app could not feed is refused by name.
    `overridable`: initializers the graph also lists as inputs (fed only when known)."""
    for needed in (names.input_ids, names.attention_mask):
        if needed not in graph_inputs:
            raise ModelError(
                f"{file_name} has no '{needed}' input; it is not a decoder with a KV cache."
            )
    if names.logits not in graph_outputs:
        raise ModelError(f"{file_name} has no '{names.logits}' output.")
    io = ModelIO(
        input_ids=names.input_ids,
        attention_mask=names.attention_mask,
        position_ids=names.position_ids if names.position_ids in graph_inputs else None,
        logits=names.logits,
        use_cache_branch=USE_CACHE_BRANCH if USE_CACHE_BRANCH in graph_inputs else None,
        logits_positions=LOGITS_POSITIONS if LOGITS_POSITIONS in overridable else None,
    )
    known = {io.input_ids, io.attention_mask, io.position_ids, io.use_cache_branch}
    known |= {t.past_name for t in kv}
    unknown = sorted(graph_inputs - known)
    if unknown:
        raise ModelError(
            f"{file_name} needs the input{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)}, which this app does not know how to feed."
        )
    return io


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kv_head_shape(
    file_name: str,
    past_name: str,
    dims: list[int | str],
    config: dict[str, Any],
    genai: dict[str, Any],
) -> tuple[int, int]:
    """(KV heads, head size): from the graph, else genai_config.json, else config.json."""
    decoder = decoder_section(genai)
    heads_from_configs = (
        _int(decoder.get("num_key_value_heads"))
        or _int(config.get("num_key_value_heads"))
        or _int(config.get("num_attention_heads"))
    )
    attention_heads = _int(decoder.get("num_attention_heads")) or _int(
        config.get("num_attention_heads")
    )
    hidden = _int(decoder.get("hidden_size")) or _int(config.get("hidden_size"))
    size_from_configs = (
        _int(decoder.get("head_size"))
        or _int(config.get("head_dim"))
        or (hidden // attention_heads if hidden and attention_heads else None)
    )
    heads = dims[1] if isinstance(dims[1], int) else heads_from_configs
    size = dims[3] if isinstance(dims[3], int) else size_from_configs
    if heads is None or size is None:
        raise ModelError(
            f"{past_name} in {file_name} does not state its head count and size "
            f"(shape {dims}), and neither genai_config.json nor config.json gives them."
        )
    return heads, size


def value_dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    dims: list[int | str] = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else d.dim_param or "?")
    return dims


def _float_type(value: onnx.ValueInfoProto, what: str) -> np.dtype:
    elem = value.type.tensor_type.elem_type
    dtype = FLOAT_TYPES.get(elem)
    if dtype is None:
        try:
            name = onnx.TensorProto.DataType.Name(elem) if elem else "unknown"
        except ValueError:  # a number no ONNX type has
            name = str(elem)
        raise ModelError(
            f"{value.name} has element type {name}; float32, float16 or bfloat16 {what} "
            "was expected."
        )
    return dtype


def describe_graph(
    folder: Path,
    onnx_path: Path,
    graph: onnx.GraphProto,
    op_types: frozenset[str],
    config: dict[str, Any],
    genai: dict[str, Any],
    generation: dict[str, Any],
) -> ModelInfo:
    """The model `graph` (the file `onnx_path` of `folder`, whose nodes, subgraphs included, run
    `op_types`) is, with its folder's configs; ModelError says what it lacks."""
    initializers = {i.name for i in graph.initializer}  # old IR versions list them as inputs
    inputs = {i.name: i for i in graph.input if i.name not in initializers}
    outputs = {o.name: o for o in graph.output}
    names = decoder_names(genai)
    file_name = onnx_path.name
    try:
        kv = kv_tensors(file_name, names, set(inputs), set(outputs))
    except ModelError as exc:
        if file_name.startswith("decoder_model."):  # Optimum's legacy decoder without past
            raise ModelError(
                f"{exc} Open decoder_model_merged.onnx or decoder_with_past_model.onnx instead."
            ) from exc
        raise
    overridable = {i.name for i in graph.input if i.name in initializers}
    io = model_io(file_name, names, set(inputs), set(outputs), kv, overridable)
    n_layers = max(t.layer for t in kv) + 1
    if n_layers > MAX_LAYERS:
        raise ModelError(f"{file_name} has {n_layers} layers; at most {MAX_LAYERS} are supported.")
    first = inputs[kv[0].past_name]
    past_dims, present_dims = value_dims(first), value_dims(outputs[kv[0].present_name])
    for value_name, dims in ((kv[0].past_name, past_dims), (kv[0].present_name, present_dims)):
        if len(dims) != 4:
            raise ModelError(
                f"{value_name} has rank {len(dims)}; [batch, heads, length, head_dim] was expected."
            )
    kv_heads, head_dim = kv_head_shape(file_name, kv[0].past_name, past_dims, config, genai)
    whole_number(kv_heads, f"{file_name}: the KV head count", 1, MAX_HEADS)
    whole_number(head_dim, f"{file_name}: the head size", 1, MAX_HEAD_DIM)
    kv_dtype = _float_type(first, "KV")
    logits_dtype = _float_type(outputs[io.logits], "logits")
    layout, window = _layout(op_types, past_dims, present_dims, value_dims(inputs[io.input_ids]))
    vocab = _vocab(file_name, value_dims(outputs[io.logits]), config, genai)
    context = _context_length(config, genai, present_dims, layout)
    return ModelInfo(
        folder=folder,
        onnx_path=onnx_path,
        name=_model_name(folder, config),
        layout=layout,
        kv=tuple(kv),
        n_layers=n_layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        kv_dtype=kv_dtype,
        vocab_size=vocab,
        context_length=context,
        eos_token_ids=_eos_ids(generation, config, genai, vocab),
        input_names=tuple(inputs),
        window=window,
        io=io,
        logits_dtype=logits_dtype,
        op_types=op_types,
    )


def _vocab(
    file_name: str, logits: list[int | str], config: dict[str, Any], genai: dict[str, Any]
) -> int:
    if not logits:
        raise ModelError(f"{file_name}: the logits have no shape.")
    if isinstance(logits[-1], int):
        return whole_number(logits[-1], f"{file_name}: the vocabulary size", 1, MAX_VOCAB)
    for where, value in (
        ("config.json's vocab_size", config.get("vocab_size")),
        ("genai_config.json's model.vocab_size", _genai_model(genai).get("vocab_size")),
    ):
        if value is not None:
            return whole_number(value, f"{file_name}: the vocabulary size ({where})", 1, MAX_VOCAB)
    raise ModelError("The logits' vocabulary size is neither in the graph nor in the configs.")


def _layout(
    op_types: frozenset[str],
    past: list[int | str],
    present: list[int | str],
    ids: list[int | str],
) -> tuple[KVLayout, int | None]:
    # The native DecodeAttention takes GroupQueryAttention's inputs and KV buffers.
    if "GroupQueryAttention" in op_types or DECODE_ATTENTION in op_types:
        return KVLayout.SHARED_BUFFER, None
    if isinstance(past[2], int) and isinstance(present[2], int):
        window = ids[1] if len(ids) > 1 and isinstance(ids[1], int) else None
        if window is None or present[2] - past[2] != window or not 0 < window <= present[2]:
            raise ModelError(
                f"Fixed-shape KV cache with past length {past[2]} and present length {present[2]} "
                f"for {ids[1] if len(ids) > 1 else '?'} input tokens is not a layout this app "
                "knows."
            )
        return KVLayout.STATIC_WINDOW, window
    if isinstance(past[2], str) and isinstance(present[2], str):
        return KVLayout.CONCAT, None
    raise ModelError(
        f"KV cache shapes past {past} / present {present} are not a layout this app knows."
    )


def _context_length(
    config: dict[str, Any], genai: dict[str, Any], present: list[int | str], layout: KVLayout
) -> int:
    if layout is KVLayout.STATIC_WINDOW:
        return whole_number(present[2], "the KV cache length of the graph")  # the fixed slots
    for where, value in (
        ("genai_config.json's model.context_length", _genai_model(genai).get("context_length")),
        ("config.json's max_position_embeddings", config.get("max_position_embeddings")),
        ("config.json's n_positions", config.get("n_positions")),
    ):
        if value is not None:
            return whole_number(value, where)
    return 2048


def _genai_model(genai: dict[str, Any]) -> dict[str, Any]:
    return section(genai, "model", "genai_config.json")


def _model_name(folder: Path, config: dict[str, Any]) -> str:
    name = config.get("_name_or_path") or ""
    return str(name).rstrip("/").split("/")[-1] or folder.name


def _eos_ids(
    gen: dict[str, Any], config: dict[str, Any], genai: dict[str, Any], vocab: int
) -> tuple[int, ...]:
    ids: list[int] = []
    for where, value in (
        ("generation_config.json's eos_token_id", gen.get("eos_token_id")),
        ("config.json's eos_token_id", config.get("eos_token_id")),
        ("genai_config.json's model.eos_token_id", _genai_model(genai).get("eos_token_id")),
    ):
        for i in token_ids(value, where, vocab):
            if i not in ids:
                ids.append(i)
    return tuple(ids)
