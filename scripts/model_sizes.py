"""Models of real size: write shaped GGUFs, convert them, answer with them; one markdown table.

    .venv/bin/python scripts/model_sizes.py [--shapes 1b,3b,8b] [--type Q4_K_M] [--dir DIR]
                                            [--graph auto|native|stock|both] [--keep] [--no-answer]

For each shape (scripts/shaped_gguf.py: random weights in TinyLlama-1.1B / Llama-3.2-3B /
Llama-3-8B shapes, SmolLM2's vocabulary) it writes the GGUF when DIR lacks it, converts it in a
fresh process (time, peak RSS; then, as `chatapp convert` does, ONNX Runtime's packed weights
saved by a child process: its time and peak), then opens the folder and answers in another fresh
process: the bench prompt (42 tokens with the chat template) and 64 greedy new tokens,
end-of-text ignored, 2 threads. --graph is `chatapp convert --graph` (default auto: the native
graph where chatapp's GGUF kernels run here); the answer runs the graph a CPU session picks.
Peak RSS is the process's own VmHWM (Linux; ru_maxrss elsewhere): after loading, and after
answering. An answer is skipped when MemAvailable is below twice the folder. The folder is removed
afterwards unless --keep (the packed copy, in the data folder's cache, goes when the next one is
saved). Not part of CI: minutes per shape, gigabytes of disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.shaped_gguf import SHAPES, write_shaped_gguf  # noqa: E402

PROMPT = "What is the capital of France? Answer in one sentence."
NEW_TOKENS = 64


def peak_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def convert_child(gguf: str, out: str, graph: str = "auto") -> None:
    from chatapp.convert.converter import ConvertOptions, convert_gguf

    plan: list[str] = []
    started = time.perf_counter()
    convert_gguf(
        gguf,
        out,
        ConvertOptions(overwrite=True, graph=graph),
        preflight=lambda p: plan.append(p.line(Path(gguf).name)),
    )
    seconds = time.perf_counter() - started
    peak = peak_bytes()
    # What `chatapp convert` does next: the packed copy, saved by a child process.
    from chatapp.engine.model_description import read_model
    from chatapp.engine.packed_cache import prepare_folder

    started = time.perf_counter()
    packed = prepare_folder(read_model(Path(out)))
    figures = {"seconds": seconds, "peak": peak, "plan": plan[0]}
    if packed is not None:
        figures["packed_s"] = time.perf_counter() - started
        figures["packed_peak"] = children_peak_bytes()
    print(json.dumps(figures))


def children_peak_bytes() -> int:
    """The peak resident memory of the biggest child process waited for (the packed copy's)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def answer_child(folder: str) -> None:
    from chatapp.engine.bench.run import bench_prompt_ids, fixed_length
    from chatapp.engine.engine import Engine

    started = time.perf_counter()
    engine = Engine(folder, threads=2)
    load_s = time.perf_counter() - started
    load_peak = peak_bytes()
    ids = bench_prompt_ids(engine, PROMPT, None)
    stats = fixed_length(engine, ids, "iobinding", NEW_TOKENS).run()
    print(
        json.dumps(
            {
                "load_s": load_s,
                "load_peak": load_peak,
                "answer_peak": peak_bytes(),
                "prompt_tokens": len(ids),
                "new_tokens": stats.generated_tokens,
                "ttft_s": stats.ttft_s,
                "tokens_per_s": stats.tokens_per_s,
            }
        )
    )


def child(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{result.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def available_memory() -> int | None:
    from chatapp.system_memory import available_memory

    return available_memory()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def measure(
    shape: str, preset: str, folder: Path, keep: bool, answer: bool, graph: str = "auto"
) -> dict[str, Any]:
    gguf = folder / f"llama-{shape}-{preset.lower()}.gguf"
    if not gguf.is_file():
        print(f"writing {gguf}", file=sys.stderr, flush=True)
        tmp = gguf.with_name(gguf.name + ".writing")
        write_shaped_gguf(tmp, SHAPES[shape], preset)
        tmp.replace(gguf)
    out = folder / f"llama-{shape}-{preset.lower()}.{graph}.converted"
    row: dict[str, Any] = {"shape": f"{SHAPES[shape].name} ({graph})", "gguf": gguf.stat().st_size}
    row["convert_load"] = load_average()
    conv = child("convert", str(gguf), str(out), graph)
    print(conv["plan"], file=sys.stderr, flush=True)
    row.update(convert_s=conv["seconds"], convert_peak=conv["peak"], folder=folder_bytes(out))
    row.update({k: conv[k] for k in ("packed_s", "packed_peak") if k in conv})
    available = available_memory()
    if answer and (available is None or available > 2 * row["folder"]):
        row["answer_load"] = load_average()
        row.update(child("answer", str(out)))
    elif answer:
        row["skipped"] = f"answer skipped: {gb(available or 0)} available"
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| shape | GGUF | convert: time, peak RSS | packed copy (a child): time, peak RSS "
        "| folder (x GGUF) | load: time, peak RSS | answering: peak RSS | tokens/s (64 new) "
        "| TTFT (42-token prompt) | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        convert = f"{r['convert_s']:.0f} s, {gb(r['convert_peak'])}"
        packed = f"{r['packed_s']:.0f} s, {gb(r['packed_peak'])}" if "packed_s" in r else "-"
        folder = f"{gb(r['folder'])} ({r['folder'] / r['gguf']:.2f}x)"
        if "answer_peak" in r:
            load = f"{r['load_s']:.1f} s, {gb(r['load_peak'])}"
            answer = gb(r["answer_peak"])
            speed, ttft = f"{r['tokens_per_s']:.1f}", f"{r['ttft_s'] * 1000:.0f} ms"
            loads = f"{r['convert_load']} / {r['answer_load']}"
        else:
            load = answer = speed = ttft = r.get("skipped", "-")
            loads = r["convert_load"]
        lines.append(
            f"| {r['shape']} | {gb(r['gguf'])} | {convert} | {packed} | {folder} | {load} "
            f"| {answer} "
            f"| {speed} | {ttft} | {loads} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        kind, *child_args = sys.argv[2:]
        convert_child(*child_args) if kind == "convert" else answer_child(*child_args)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1b,3b,8b")
    parser.add_argument("--type", default="Q4_K_M")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")))
    parser.add_argument("--graph", default="auto", choices=("auto", "native", "stock", "both"))
    parser.add_argument("--keep", action="store_true", help="keep the converted folders")
    parser.add_argument("--no-answer", action="store_true", help="convert only")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        answer = not args.no_answer
        rows.append(measure(shape, args.type, args.dir, args.keep, answer, args.graph))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
