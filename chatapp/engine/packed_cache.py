"""ONNX Runtime's pre-packed weights saved once beside a copy of the graph, then mapped. No Qt.

A converter-version-6+ graph runs its projections on two kernels (the float one for prompts, the
int8 one for decode steps) and ONNX Runtime packs the weights once for each, on the heap: two
copies that stay resident for the whole chat (the 1B shape: 1.71 GB of heap). With
`session.save_external_prepacked_constant_initializers`, ONNX Runtime writes those packed blobs
into the external data of an optimized copy of the graph, and a session made from that copy maps
them instead of packing. Mapped, they are file pages: a prompt touches the float kernel's copy,
a decode step the int8 one's, and `mapped_weights.release_mapped` drops the other between
them, so only one copy is resident at a time (1B shape: 1.99 -> 1.49 GB peak while answering).

The copy is machine-specific (packing follows the CPU's instruction set; ONNX Runtime says so
when it saves), so it lives in the data folder's cache under a key of the ONNX Runtime version,
the CPU's flags and the source files' sizes and times, and is made only for CPU sessions of big
models on Linux (where the release works) when the disk has room. `CHATAPP_PACKED_CACHE=0` turns
it off.

Packing both kernels' copies on the heap to save them is what made a first load cost twice a
later one (1B shape: 2.65 GB against 1.3 GB), so the copy is saved by a child process
(`python -m chatapp.engine.packed_cache GRAPH`): at the end of a conversion (`prepare_folder`),
or on the first load of a folder made elsewhere (`packed_copy`). The child's peak is both
kernels' copies (1B: 1.7 GB, for 10 s on a quiet machine), the app's stays that of a later
load. A child that is stopped or killed leaves only its `.writing-PID-*` folder, which the next
save removes.

The cache deletes only folders it made (chatapp/safe_delete.py): each carries the app's marker,
written only into a folder the cache has just created (a folder of the right name that was there
before is not the cache's, and no copy is saved into it). `cache`, `cache/packed`, a graph's
folder of copies and the copy itself are checked for symbolic links before anything is written
there as well as before anything is deleted: where one is a link, a copy is not saved at all.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnxruntime as ort

from chatapp.datadir import data_dir
from chatapp.engine.model_description import (
    RUNTIME_OVERHEAD,
    MemoryEstimate,
    ModelDescription,
    read_model,
)
from chatapp.error_text import STATUS_LINE, first_line
from chatapp.safe_delete import (
    OWNED_MARKER,
    linked_between,
    mark_owned,
    marked_owned,
    remove_owned,
    write_replacing,
)
from chatapp.system_memory import available_memory

log = logging.getLogger(__name__)

ENV_VAR = "CHATAPP_PACKED_CACHE"
# Below this the second packed copy costs little, and mapping costs time: the default model
# (230 MB) from a copy answered 297 against 352 MiB, with prompts 1.5x slower (faulting the
# copy back in) and decode 0.8x (docs/converter.md).
MIN_WEIGHT_BYTES = 512 << 20
DISK_MARGIN = 1 << 30  # leave this much free after writing the copy
GRAPH = "model.onnx"
DATA = "model.onnx.data"
SOURCE = "source.txt"  # beside a graph's copies: the graph they were made from
MAX_SOURCE_BYTES = 64 << 10  # a path; more is not one the cache wrote
WORK_PREFIX = ".writing-"  # + the writing process's id: a copy being saved
POLL_S = 0.2  # how often a parent waiting for the child checks whether to stop
_CACHE_FILES = frozenset({GRAPH, DATA, SOURCE, OWNED_MARKER})


class CacheUnusable(Exception):
    """Why a packed copy was not saved, in one line."""


def cache_root() -> Path:
    return data_dir() / "cache" / "packed"


def _cache_top() -> Path:
    """What the cache writes in and deletes in: no link from here down is ever followed."""
    return data_dir() / "cache"


def wanted(estimate: MemoryEstimate) -> bool:
    """Whether a CPU session of a model this size should run from a packed copy."""
    setting = os.environ.get(ENV_VAR, "")
    if setting == "0" or not sys.platform.startswith("linux") or not estimate.mapped_files:
        return False
    return setting == "1" or estimate.weights + estimate.packed >= MIN_WEIGHT_BYTES


def saved_already(onnx_path: Path, estimate: MemoryEstimate) -> bool:
    """Whether this machine's packed copy of `onnx_path` is there (loading only maps it)."""
    folder = _copy_folder(onnx_path, estimate)
    return (folder / GRAPH).is_file() and (folder / DATA).is_file()


def resident_need(model: ModelDescription) -> MemoryEstimate:
    """What loading and answering `model` will hold at their peak: one kernel's packed copies
    where a CPU session maps a packed copy already saved, else (packing on the heap, or saving
    that copy first) both kernels'."""
    estimate = model.memory
    if model.on_cpu and wanted(estimate) and saved_already(model.info.onnx_path, estimate):
        return estimate.one_kernel_resident()
    return estimate


def packed_copy(
    onnx_path: Path,
    estimate: MemoryEstimate,
    threads: int | None,
    should_stop: Callable[[], bool] | None = None,
    folder: Path | None = None,
) -> Path | None:
    """The packed copy of `onnx_path` (a graph of the model `folder`, by default the graph's
    own folder) for this machine, saved first by a child process where it is missing; None
    where it could not be saved (the caller packs on the heap as before)."""
    graph = _copy_folder(onnx_path, estimate) / GRAPH
    saved = saved_already(onnx_path, estimate)
    if saved or save_in_child(onnx_path, threads, should_stop, folder):
        return graph  # a child that says it saved the copy has put it in place
    return None


def prepare_folder(
    model: ModelDescription,
    threads: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    say: Callable[[str], None] | None = None,
) -> Path | None:
    """After a conversion: save the packed copy of `model` (a folder read for the CPU) now,
    so that its first load maps it (`say` hears one line before the work starts). None where
    the folder wants none (small, native kernels, not Linux, turned off) or it cannot be made
    now (too little memory free for the child, a stop, a failure: the first load tries
    again). Never raises."""
    info, estimate = model.info, model.memory  # the KV cache plays no part in the copy
    try:
        if not wanted(estimate) or model.native:
            return None
        if saved_already(info.onnx_path, estimate):
            return _copy_folder(info.onnx_path, estimate) / GRAPH
        available = available_memory()
        if available is not None and available < estimate.packed + RUNTIME_OVERHEAD:
            log.info("too little memory free to save the packed copy of %s now", info.folder)
            return None
        if say is not None:
            say("saving ONNX Runtime's packed weights for this computer (loading then maps them)")
        return packed_copy(info.onnx_path, estimate, threads, should_stop, info.folder)
    except Exception:  # an optional step: the folder itself is complete
        log.exception("could not prepare the packed copy of %s", info.folder)
        return None


def save_in_child(
    onnx_path: Path,
    threads: int | None,
    should_stop: Callable[[], bool] | None = None,
    folder: Path | None = None,
) -> bool:
    """Save the packed copy in a child process; True when it says it did. `folder`: the model
    folder the graph belongs to (an onnx-community folder keeps its graphs in `onnx/`, its
    tokenizer and configs above). `should_stop` is asked every POLL_S: the child is then
    killed. What a child that did not save wrote is removed."""
    import chatapp

    code = str(Path(chatapp.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH", "")) if p)
    command = [*_child_command(), str(onnx_path), "--threads", str(threads or 0)]
    command += ["--folder", str(folder or onnx_path.parent)]
    started = time.perf_counter()
    try:
        child = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except OSError:
        log.exception("could not start the process that saves the packed weights")
        return False
    saved = False
    try:
        said = _wait(child, should_stop)
        if said is None:
            log.info("saving the packed copy of %s was stopped", onnx_path)
        elif child.returncode != 0:
            reason = _child_reason(*said, child)
            log.warning("the packed copy of %s was not saved: %s", onnx_path, reason)
        else:
            last = said[0].strip().splitlines()[-1] if said[0].strip() else ""
            log.info(
                "packed copy of %s saved in %.1f s: %s",
                onnx_path,
                time.perf_counter() - started,
                last,
            )
            saved = True
    finally:  # a stop, a failure, Ctrl+C or the app closing: the child and its leftovers go
        if not saved:
            _remove_abandoned(cache_root() / _source_key(onnx_path))
    return saved


def _wait(
    child: subprocess.Popen[str], should_stop: Callable[[], bool] | None
) -> tuple[str, str] | None:
    """What the child printed (stdout, stderr) once it ended; None when `should_stop` said so
    first (the child is then killed, as it is when this is interrupted)."""
    try:
        while True:
            try:
                return child.communicate(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                if should_stop is not None and should_stop():
                    break
    except BaseException:
        child.kill()
        child.communicate()
        raise
    child.kill()
    child.communicate()
    return None


def packed_graph(onnx_path: Path, estimate: MemoryEstimate, opts: ort.SessionOptions) -> Path:
    """The packed copy of `onnx_path` for this machine, made now if missing (with `opts`, the
    session options it will run with). CacheUnusable says in one line why it cannot be made (no
    room, a runtime that cannot save, a cache folder that is a link), and the caller packs on the
    heap as before."""
    folder = _copy_folder(onnx_path, estimate)
    if (folder / GRAPH).is_file() and (folder / DATA).is_file():
        return folder / GRAPH
    _refuse_links(folder)
    on_disk = sum(f.stat().st_size for f in (onnx_path, *estimate.mapped_files))
    try:
        _own_copies_folder(folder.parent)
        # Named first, so that a folder of copies without it is one that nothing will use.
        write_replacing(folder.parent / SOURCE, str(onnx_path.resolve()))
        free = shutil.disk_usage(folder.parent).free
        if free < on_disk + estimate.packed + DISK_MARGIN:
            raise CacheUnusable(f"too little room on the disk ({free >> 20} MiB free)")
        _forget_removed_models()
        _remove_abandoned(folder.parent)
        for stale in folder.parent.iterdir():  # the copies of older versions of this file
            if stale.name not in _CACHE_FILES and not stale.name.startswith(WORK_PREFIX):
                remove_owned(stale, _cache_top())
        prefix = f"{WORK_PREFIX}{os.getpid()}-"
        work = Path(tempfile.mkdtemp(prefix=prefix, dir=folder.parent))
        mark_owned(work)
        try:
            _save(onnx_path, work, opts)
            _refuse_links(folder)  # nothing changed into a link while it was saved
            work.rename(folder)
        finally:
            remove_owned(work, _cache_top())
    except CacheUnusable:
        raise
    except Exception as exc:  # a runtime without the option, a full disk: pack on the heap
        log.debug("could not save the packed weights of %s", onnx_path, exc_info=True)
        raise CacheUnusable(first_line(exc, STATUS_LINE)) from exc
    return folder / GRAPH


def remove_copy(graph: Path) -> bool:
    """Delete the packed copy whose graph is `graph` (one that would not load); True when it
    is gone and the next `packed_copy` saves it again."""
    return remove_owned(graph.parent, _cache_top())


def _refuse_links(path: Path) -> None:
    """CacheUnusable where `cache` or anything below it down to `path` is a symbolic link."""
    link = linked_between(_cache_top(), path)
    if link is not None:
        raise CacheUnusable(f"{link} is a symbolic link; the cache writes only in its own folders")


def _own_copies_folder(copies: Path) -> None:
    """Make the folder of a graph's copies and mark it, or check that the cache made the one
    that is there: a marker is only ever written into a folder made here and now."""
    copies.parent.mkdir(parents=True, exist_ok=True)
    try:
        copies.mkdir()
    except FileExistsError:
        if copies.is_symlink() or not copies.is_dir() or not marked_owned(copies):
            message = f"{copies} was not made by chatapp; the cache leaves it alone"
            raise CacheUnusable(message) from None
        return
    mark_owned(copies)


def _child_reason(out: str, err: str, child: subprocess.Popen[str]) -> str:
    """The one line a child that failed gave for it (its JSON's "error"), else the last line
    of what it printed, else its exit status."""
    for line in reversed(out.strip().splitlines()):
        try:
            said = json.loads(line)
        except ValueError:
            continue
        if isinstance(said, dict) and said.get("error"):
            return str(said["error"])
    lines = [line.strip() for line in err.strip().splitlines() if line.strip()]
    if lines:
        return lines[-1][:STATUS_LINE]
    return f"the process that saves it ended with status {child.returncode}"


def _child_command() -> list[str]:
    return [sys.executable, "-m", __name__]


def _remove_abandoned(parent: Path) -> None:
    """Delete what writers that are gone (stopped, killed) left in `parent`."""
    if not parent.is_dir():
        return
    for work in parent.glob(f"{WORK_PREFIX}*"):
        pid = work.name[len(WORK_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or not _alive(int(pid)):
            remove_owned(work, _cache_top())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        return True
    return True


def _forget_removed_models() -> None:
    """Delete the copies of graphs that are no longer there (a model removed or moved), and
    folders of copies that name no graph; only folders the cache marked as its own."""
    root = cache_root()
    for copies in root.iterdir():
        try:
            if copies.is_symlink() or not copies.is_dir():
                continue
            if _named_graph(copies / SOURCE) is None:
                remove_owned(copies, _cache_top())
        except OSError:
            continue


def _named_graph(source: Path) -> Path | None:
    """The graph that `source` (a folder of copies' source.txt) names, if it is still there;
    None for one that is gone, damaged (not UTF-8, too long to be a path) or not a file."""
    try:
        if not source.is_file() or source.stat().st_size > MAX_SOURCE_BYTES:
            return None
        graph = Path(source.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return graph if graph.is_file() else None


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


def _copy_folder(onnx_path: Path, estimate: MemoryEstimate) -> Path:
    return cache_root() / _source_key(onnx_path) / _machine_key(onnx_path, estimate)


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


@functools.cache
def _cpu_flags() -> str:
    """The instruction-set flags packing depends on (AVX2, AVX-512, VNNI, AMX ...): read once
    a process (a load asks twice: its memory check and its session; /proc/cpuinfo grows with
    the cores)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return " ".join(sorted(f for f in flags if f.startswith(("avx", "amx", "fma"))))
    except OSError:
        pass
    return platform.processor()


def _child_main(argv: list[str]) -> int:
    """The child `save_in_child` starts: save the copy, print the graph and this process's
    peak resident memory."""
    from chatapp.engine.devices import session_options
    from chatapp.engine.mapped_weights import released_while_loading, resident_memory

    parser = argparse.ArgumentParser(description="Save a graph's packed weights copy.")
    parser.add_argument("graph", type=Path)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--folder", type=Path, help="the model folder (default: the graph's)")
    args = parser.parse_args(argv)
    folder = args.folder or args.graph.parent
    model = read_model(folder, str(args.graph.relative_to(folder)), max_context=1)
    info, estimate = model.info, model.memory
    opts = session_options(args.threads or None)
    try:
        with released_while_loading(estimate.mapped_files):  # saving reads each weight once
            graph = packed_graph(info.onnx_path, estimate, opts)
    except CacheUnusable as exc:
        print(json.dumps({"graph": None, "error": str(exc)}), flush=True)
        return 1
    peak = resident_memory().get("peak", 0)
    print(json.dumps({"graph": str(graph), "peak": peak}), flush=True)
    return 0


def _child_entry(argv: list[str]) -> int:
    """`_child_main`, with anything it did not expect said in one line (the parent logs it)."""
    try:
        return _child_main(argv)
    except Exception as exc:  # the folder changed under it, a runtime error: one line
        print(json.dumps({"graph": None, "error": first_line(exc, STATUS_LINE)}), flush=True)
        return 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(_child_entry(sys.argv[1:]))
