"""GGUF file -> ONNX Runtime model folder, written atomically (temp folder, rename at the end)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import onnx

from chatapp import __version__
from chatapp.convert import needs
from chatapp.convert.architectures import SUPPORTED_ARCHITECTURES
from chatapp.convert.build_progress import BuildProgress
from chatapp.convert.decoder_graph import DecoderGraphBuilder, GraphOptions, WeightSource
from chatapp.convert.decoder_weights import LayerWeights
from chatapp.convert.errors import ConversionError
from chatapp.convert.external_data import ExternalData, save_graph
from chatapp.convert.families import Family, ModelWeights, family_of
from chatapp.convert.gguf_blocks import kernel_takes
from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.model_configs import (
    MODEL_FILE,
    genai_config,
    generation_config,
    hf_config,
)
from chatapp.convert.native_graph import declare_native_domain
from chatapp.convert.needs import Preflight
from chatapp.convert.output_folder import (
    PARTIAL_MARKER,
    check_destination,
    check_source,
    clean_leftovers,
    remove_conversion_folder,
    write_partial_marker,
)
from chatapp.convert.output_folder import read_manifest as read_manifest  # checked: its types
from chatapp.convert.preflight import Header, TensorInfo, check_convertible, type_name
from chatapp.convert.weight_scan import check_finite
from chatapp.convert.weights import SUPPORTED_TYPES, Weight
from chatapp.folder_format.manifest import MANIFEST_FILE
from chatapp.folder_format.native_library import usable_isa
from chatapp.safe_delete import write_replacing

# Bump when the folder this writes changes, so `prepare` rebuilds stale copies.
# 9: graphs by --graph (auto, native, stock, both: model.onnx and model_gguf.onnx); the default
# model holds both. 11: native graphs' prompts on DecodeAttention too (one path, no If).
CONVERTER_VERSION = "11"
INT8_LEVELS = ("decode", "all", "head")
# Which graphs a folder holds (docs/converter.md, "Native kernels"): "auto" is the native graph
# where chatapp's library runs its fast kernels on this machine, else the stock one.
GRAPHS = ("auto", "native", "stock", "both")
# `both`: the native graph beside the stock model.onnx (which genai_config.json names, so that
# onnxruntime-genai and other tools still run the folder).
NATIVE_MODEL_FILE = "model_gguf.onnx"
MAX_DEFAULT_CONTEXT = 32768
# RoPE tables and static KV graphs grow with the context; beyond this they are absurd.
MAX_CONTEXT = 1 << 20
# Weights go beside the graph, in model.onnx.data, past this size: ONNX Runtime then maps the file
# instead of copying every weight out of a parsed protobuf (the default model: 94 MB less after
# load, 81 MB less at a 2k-token prompt), and one protobuf holds at most 2 GiB anyway. Tiny
# test models stay one file. The weights are written as they are made (external_data.py).
EXTERNAL_DATA_THRESHOLD = 16 << 20

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class ConvertOptions:
    context_length: int | None = None  # None: the GGUF's, capped at MAX_DEFAULT_CONTEXT
    accuracy_level: int = 0
    lm_head_int8: bool = False
    int8_levels: str = "decode"  # "decode" | "all" | "head"; see GraphOptions
    attention: str = "gqa"  # "gqa" | "standard" (plain ops, concat KV, Optimum's names)
    kv_layout: str = "dynamic"  # "dynamic" | "static" (fixed shapes; needs context_length)
    window: int = 1  # static layout: tokens per run
    overwrite: bool = False
    # The graph(s) to write (GRAPHS). The native graph keeps projections as raw GGUF blocks on
    # chatapp's native kernels (native/; CPU only, needs the library at run time): the folder
    # holds the GGUF's bytes per weight. The API's default stays the stock graph, which runs
    # everywhere; the command line, the window and `prepare` choose (auto, both).
    graph: str = "stock"

    def resolved(self) -> ConvertOptions:
        """The options with `auto` decided for this machine (what the manifest records)."""
        if self.graph != "auto":
            return self
        return replace(self, graph="native" if usable_isa() else "stock")

    def validate(self) -> None:
        if self.graph not in GRAPHS:
            raise ConversionError(f"Unknown --graph '{self.graph}': {', '.join(GRAPHS)}.")
        if self.context_length is not None and not 0 < self.context_length <= MAX_CONTEXT:
            raise ConversionError(f"--context must be from 1 to {MAX_CONTEXT}.")
        if self.attention not in ("gqa", "standard"):
            raise ConversionError(f"Unknown attention '{self.attention}': gqa or standard.")
        if self.int8_levels not in INT8_LEVELS:
            raise ConversionError(
                f"Unknown --int8-levels '{self.int8_levels}': {', '.join(INT8_LEVELS)}."
            )
        if self.kv_layout not in ("dynamic", "static"):
            raise ConversionError(f"Unknown KV layout '{self.kv_layout}': dynamic or static.")
        if self.kv_layout == "static":
            if not self.context_length:
                raise ConversionError("A static KV layout needs --context (the fixed length).")
            if not 0 < self.window < self.context_length:
                raise ConversionError("--window must be at least 1 and below --context.")


def sha256_file(
    path: Path, chunk: int = 1 << 22, progress: Callable[[float], None] | None = None
) -> str:
    digest = hashlib.sha256()
    total = max(1, path.stat().st_size)
    done = 0
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
            done += len(block)
            if progress is not None and done % (64 * chunk) < chunk:  # every 256 MB
                progress(done / total)
    return digest.hexdigest()


def convert_gguf(
    gguf_path: Path | str,
    out_dir: Path | str,
    options: ConvertOptions | None = None,
    progress: Progress | None = None,
    preflight: Callable[[Preflight], None] | None = None,
) -> Path:
    """Convert `gguf_path` into the model folder `out_dir`; returns the folder. `preflight`
    hears what it will take (disk, memory) once the checks have passed, before the work."""
    opts = (options or ConvertOptions()).resolved()
    opts.validate()
    report = progress or (lambda _f, _m: None)
    src, out = Path(gguf_path), Path(out_dir)
    check_source(src)
    check_destination(src, out, opts.overwrite)
    # Architecture and tensor types from the header first: a refusal must not wait for a hash.
    header = check_convertible(src, SUPPORTED_ARCHITECTURES, SUPPORTED_TYPES)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConversionError(f"Could not create {out.parent}: {exc.strerror or exc}.") from exc
    clean_leftovers(out.parent)
    # What the folder and the conversion will take, against free disk and available memory:
    # a clear refusal now rather than a full disk or an OOM kill later.
    graphs = graphs_to_write(opts.graph, header)
    planned = needs.check(needs.estimate(header, opts.lm_head_int8, graphs), src, out.parent)
    if preflight is not None:
        preflight(planned)
    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
        write_partial_marker(tmp)
        _write_folder(src, tmp, opts, graphs, report)
        _replace(tmp, out)
    except OSError as exc:
        _remove(tmp)
        if exc.errno == errno.ENOSPC:
            raise ConversionError(
                f"The disk holding {out.parent} is full; nothing was written. "
                "Free some space and try again."
            ) from exc
        raise ConversionError(f"Could not write {out}: {exc.strerror or exc}.") from exc
    except MemoryError as exc:
        _remove(tmp)
        raise ConversionError(f"Not enough memory to convert {src.name}.") from exc
    except BaseException:
        _remove(tmp)
        raise
    return out


def _remove(tmp: Path | None) -> None:
    if tmp is not None:
        remove_conversion_folder(tmp)


def graphs_to_write(graph: str, header: Header) -> tuple[tuple[str, bool], ...]:
    """(file name, native) of each graph `graph` (resolved: not auto) asks for. A file with no
    tensor the native kernels take gets the stock graph whatever was asked: a native graph of
    it would be the stock graph under another name, needing the library for nothing."""
    if graph == "stock" or not any(_native_kernel_takes(t) for t in header.tensors):
        return ((MODEL_FILE, False),)
    if graph == "native":
        return ((MODEL_FILE, True),)
    return ((MODEL_FILE, False), (NATIVE_MODEL_FILE, True))


def _native_kernel_takes(tensor: TensorInfo) -> bool:
    # a GGUF header lists a matrix's row length (K) first
    return len(tensor.shape) == 2 and kernel_takes(type_name(tensor.type_id), tensor.shape[0])


def _write_graph(
    model: GGUFModel,
    family: Family,
    graph_opts: GraphOptions,
    native: bool,
    path: Path,
    span: tuple[float, float],
    report: Progress,
) -> ExternalData:
    """Build one graph into `path` (its weights into `path`.data as they are made)."""
    reader = ModelWeights(model, family, native=native)
    features = family.features(reader)
    steps = BuildProgress(model, span[0], span[1], report, graph_opts.lm_head_int8)

    def embedding() -> Weight:
        steps.embedding()
        return reader.embedding()

    def layer(i: int) -> LayerWeights:
        steps.layer(i)
        model.release_pages()  # the layers before are written out; only this one is mapped
        return reader.layer(i)

    def lm_head() -> Weight:
        steps.head()
        model.release_pages()
        return reader.lm_head()

    weights = WeightSource(
        embedding=embedding, lm_head=lm_head, final_norm=reader.final_norm, layer=layer
    )
    builder = DecoderGraphBuilder(model.spec, graph_opts, features)
    external = ExternalData(path.with_name(path.name + ".data"), EXTERNAL_DATA_THRESHOLD)
    try:
        builder.g.stream_to(external)
        onnx_model = builder.build(weights)  # reports through the weights' callbacks above
        declare_native_domain(onnx_model)
        external.finish(onnx_model)
    finally:
        external.close()
        model.release_pages()
    if unused := reader.unused():  # check() refuses these first; this guards the graph code
        raise ConversionError(f"{model.path.name}: tensor '{unused[0]}' was left out of the model.")
    report(span[1], f"saving {path.name}")
    _save_onnx(onnx_model, path, external)
    return external


def _write_folder(
    src: Path,
    tmp: Path,
    opts: ConvertOptions,
    graphs: tuple[tuple[str, bool], ...],
    report: Progress,
) -> None:
    started = time.perf_counter()
    # Header, hyper-parameters and shapes first (cheap), then the weights' values, and only
    # then the hash of the whole file: a crafted file is refused before it is read through.
    report(0.0, "reading GGUF")
    model = GGUFModel(src)
    family = family_of(model)  # refuses unknown tensors before any long work
    spec = model.spec
    report(0.02, "checking the weights")
    check_finite(
        src, model.header.tensors, lambda f: report(0.02 + 0.04 * f, "checking the weights")
    )
    source_sha = sha256_file(src, progress=lambda f: report(0.06 + 0.04 * f, "hashing the file"))
    context = opts.context_length or min(spec.context_length, MAX_DEFAULT_CONTEXT)
    # Tokenizer first: a vocabulary we cannot convert should fail before the long part.
    report(0.1, "tokenizer")
    from chatapp.convert.tokenizer import write_tokenizer_files  # imports transformers (~1 s)

    write_tokenizer_files(model.metadata, tmp)
    graph_opts = GraphOptions(
        context_length=context,
        accuracy_level=opts.accuracy_level,
        lm_head_int8=opts.lm_head_int8,
        int8_levels=opts.int8_levels,
        attention=opts.attention,
        static_window=opts.window if opts.kv_layout == "static" else None,
    )
    features = family.features(ModelWeights(model, family))  # for config.json
    digests: dict[str, str] = {}
    span = (0.96 - 0.13) / len(graphs)
    for index, (file_name, native) in enumerate(graphs):
        start = 0.13 + index * span
        external = _write_graph(
            model, family, graph_opts, native, tmp / file_name, (start, start + span), report
        )
        if external.used:
            digests[external.path.name] = external.digest.hexdigest()
    report(0.97, "configuration files")
    config = hf_config(spec, model.metadata, context)
    config.update(
        architectures=[family.hf_architecture],
        model_type=family.hf_model_type,
        **family.hf_extra(model, features),
    )
    _write_json(tmp / "config.json", config)
    _write_json(tmp / "generation_config.json", generation_config(model.metadata, context))
    if opts.kv_layout == "dynamic":  # onnxruntime-genai cannot drive fixed-shape graphs
        genai = genai_config(spec, model.metadata, context, opts.attention == "gqa")
        genai["model"]["type"] = family.genai_type
        _write_json(tmp / "genai_config.json", genai)
    manifest = {
        "converter": "chatapp",
        "converter_version": CONVERTER_VERSION,
        "chatapp_version": __version__,
        "source": {"file": src.name, "sha256": source_sha, "bytes": src.stat().st_size},
        "model": {"name": spec.name, "architecture": spec.architecture},
        "options": {**asdict(opts), "context_length": context},
        # Each graph file and what it runs on: "stock" (any device) or "gguf" (chatapp's
        # native kernels, CPU only).
        "graphs": {name: "gguf" if native else "stock" for name, native in graphs},
        "seconds": round(time.perf_counter() - started, 2),
        "files": {
            # the data files' hashes were taken as they were written: no second read of gigabytes
            p.name: digests[p.name] if p.name in digests else sha256_file(p)
            for p in sorted(tmp.iterdir())
            if p.is_file() and p.name != PARTIAL_MARKER
        },
    }
    _write_json(tmp / MANIFEST_FILE, manifest)
    (tmp / PARTIAL_MARKER).unlink()
    report(1.0, "done")


def _save_onnx(model: onnx.ModelProto, path: Path, external: ExternalData) -> None:
    if not external.used:  # a tiny model: one file, as onnx.save_model writes it
        onnx.save_model(model, str(path))
        return
    save_graph(model, path)
    # One mode for both files, as a bundling installer or a second user expects.
    external.path.chmod(path.stat().st_mode & 0o777)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_replacing(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _replace(tmp: Path, out: Path) -> None:
    """Move the finished folder into place; an older folder goes only once the new one is in."""
    if not out.exists():
        tmp.rename(out)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
    out.rename(old)
    tmp.rename(out)
    remove_conversion_folder(old)


def is_verified_copy(folder: Path, source_sha256: str) -> bool:
    """True when `folder` was made from that source by this converter version and is intact."""
    manifest = read_manifest(folder)
    if not manifest or manifest.get("converter_version") != CONVERTER_VERSION:
        return False
    if manifest.get("source", {}).get("sha256") != source_sha256:
        return False
    files = manifest.get("files", {})
    if MODEL_FILE not in files:
        return False
    for name, digest in files.items():
        path = folder / name
        if not path.is_file() or sha256_file(path) != digest:
            return False
    return True


def earlier_conversion(
    gguf: Path, out_dir: Path, options: ConvertOptions | None = None
) -> Path | None:
    """`out_dir` itself, or a folder beside it, holding this GGUF's intact conversion with
    these options (None: convert it). The file is hashed only when a manifest records its
    size: an unrelated file (a 40 GB one the converter refuses at once) is not read."""
    try:
        size = gguf.stat().st_size
    except OSError:
        return None  # the converter says what is wrong with it
    folders = [out_dir] if out_dir.is_dir() and not out_dir.is_symlink() else []
    folders += [f for f in subfolders(out_dir.parent) if f != out_dir]
    candidates = [f for f in folders if _source_bytes(f) == size]
    if not candidates:
        return None
    try:
        source_sha256 = sha256_file(gguf)
    except OSError:
        return None
    return next((f for f in candidates if converted_from(f, source_sha256, options)), None)


def subfolders(parent: Path) -> list[Path]:
    try:
        entries = sorted(parent.iterdir(), key=lambda p: p.name.lower())
    except OSError:
        return []
    return [e for e in entries if not e.name.startswith(".") and not e.is_symlink() and e.is_dir()]


def _source_bytes(folder: Path) -> int | None:
    manifest = read_manifest(folder)
    source = manifest.get("source") if manifest is not None else None
    size = source.get("bytes") if isinstance(source, dict) else None
    return size if isinstance(size, int) else None


def converted_from(folder: Path, source_sha256: str, options: ConvertOptions | None) -> bool:
    """Whether `folder` is chatapp's intact conversion of that GGUF with those options."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("converter") != "chatapp":
        return False
    source, recorded = manifest.get("source"), manifest.get("options")
    if not isinstance(source, dict) or source.get("sha256") != source_sha256:
        return False
    wanted = (options or ConvertOptions()).resolved()  # auto: what it writes on this machine
    if not same_options(recorded if isinstance(recorded, dict) else {}, wanted):
        return False
    return is_verified_copy(folder, source_sha256)


def same_options(recorded: dict[str, Any], wanted: ConvertOptions) -> bool:
    """Whether a folder converted with `recorded` options is what `wanted` would make (a
    context length left to the file matches whatever the file gave)."""
    for key, value in asdict(wanted).items():
        if key == "overwrite" or (key == "context_length" and value is None):
            continue
        if key == "graph" and recorded.get(key) == "both" and value in ("native", "stock"):
            continue  # a folder with both graphs has the one asked for
        if recorded.get(key) != value:
            return False
    return True
