"""ONNX Runtime's pre-packed weights saved once beside a copy of the graph, then mapped. No Qt.

A converter-version-6+ graph runs its projections on two kernels (the float one for prompts, the
int8 one for decode steps) and ONNX Runtime packs the weights once for each, on the heap: two
copies that stay resident for the whole chat (the 1B shape: 1.71 GB of heap). With
`session.save_external_prepacked_constant_initializers`, ONNX Runtime writes those packed blobs
into the external data of an optimized copy of the graph, and a session made from that copy maps
them instead of packing. Mapped, they are file pages: a prompt touches the float kernel's copy,
a decode step the int8 one's, and `resident.release_mapped` drops the other between them, so only
one copy is resident at a time (1B shape: 1.99 -> 1.49 GB peak while answering).

The copy is machine-specific (packing follows the CPU's instruction set; ONNX Runtime says so
when it saves), so it lives in the data folder's cache under a key of the ONNX Runtime version,
the CPU's flags and the source files' sizes and times, and is made only for CPU sessions of big
models on Linux (where the release works) when the disk has room. `CHATAPP_PACKED_CACHE=0` turns
it off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import onnxruntime as ort

from chatapp.datadir import data_dir
from chatapp.engine.memory import MemoryEstimate

log = logging.getLogger(__name__)

ENV_VAR = "CHATAPP_PACKED_CACHE"
MIN_WEIGHT_BYTES = 512 << 20  # below this the second packed copy costs little
DISK_MARGIN = 1 << 30  # leave this much free after writing the copy
GRAPH = "model.onnx"
DATA = "model.onnx.data"
SOURCE = "source.txt"  # beside a graph's copies: the graph they were made from


def cache_root() -> Path:
    return data_dir() / "cache" / "packed"


def wanted(estimate: MemoryEstimate) -> bool:
    """Whether a CPU session of a model this size should run from a packed copy."""
    setting = os.environ.get(ENV_VAR, "")
    if setting == "0" or not sys.platform.startswith("linux") or not estimate.mapped_files:
        return False
    return setting == "1" or estimate.weights + estimate.packed >= MIN_WEIGHT_BYTES


def saved_already(onnx_path: Path, estimate: MemoryEstimate) -> bool:
    """Whether this machine's packed copy of `onnx_path` is there (loading only maps it)."""
    folder = cache_root() / _source_key(onnx_path) / _machine_key(onnx_path, estimate)
    return (folder / GRAPH).is_file() and (folder / DATA).is_file()


def packed_graph(
    onnx_path: Path, estimate: MemoryEstimate, opts: ort.SessionOptions
) -> Path | None:
    """The packed copy of `onnx_path` for this machine, made now if missing (with `opts`, the
    session options it will run with); None where it cannot be made (no room, a runtime that
    cannot save), and the caller packs on the heap as before."""
    folder = cache_root() / _source_key(onnx_path) / _machine_key(onnx_path, estimate)
    if (folder / GRAPH).is_file() and (folder / DATA).is_file():
        return folder / GRAPH
    on_disk = sum(f.stat().st_size for f in (onnx_path, *estimate.mapped_files))
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder.parent).free
        if free < on_disk + estimate.packed + DISK_MARGIN:
            log.info("no room for a packed copy of %s (%d bytes free)", onnx_path, free)
            return None
        _forget_removed_models()
        for stale in folder.parent.iterdir():  # the copies of older versions of this file
            if stale.name != SOURCE:
                shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder.parent))
        try:
            _save(onnx_path, work, opts)
            work.rename(folder)
            (folder.parent / SOURCE).write_text(str(onnx_path.resolve()), encoding="utf-8")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except Exception:  # a runtime without the option, a full disk: pack on the heap instead
        log.exception("could not save the packed weights of %s", onnx_path)
        return None
    return folder / GRAPH


def _forget_removed_models() -> None:
    """Delete the copies of graphs that are no longer there (a model removed or moved)."""
    for source in cache_root().glob(f"*/{SOURCE}"):
        try:
            if not Path(source.read_text(encoding="utf-8")).is_file():
                shutil.rmtree(source.parent, ignore_errors=True)
        except OSError:
            continue


def _save(onnx_path: Path, out: Path, opts: ort.SessionOptions) -> None:
    opts.optimized_model_filepath = str(out / GRAPH)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA)
    # Shape constants stay in the graph, where shape inference reads them.
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "4096"
    )
    opts.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    del session


def _source_key(onnx_path: Path) -> str:
    return hashlib.sha256(str(onnx_path.resolve()).encode()).hexdigest()[:16]


def _machine_key(onnx_path: Path, estimate: MemoryEstimate) -> str:
    files = [onnx_path, *estimate.mapped_files]
    facts = {
        "onnxruntime": ort.__version__,
        "machine": platform.machine(),
        "cpu": _cpu_flags(),
        "files": [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def _cpu_flags() -> str:
    """The instruction-set flags packing depends on (AVX2, AVX-512, VNNI, AMX ...)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return " ".join(sorted(f for f in flags if f.startswith(("avx", "amx", "fma"))))
    except OSError:
        pass
    return platform.processor()
