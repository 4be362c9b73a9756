"""What a model folder's tokenizer costs: memory to load and keep, CPU time for a 1 MB paste.

Each --code checkout loads the folder's `ChatTokenizer` in a fresh process and prints its peak
while loading, the anonymous memory after (/proc/self/status; a process that does not hand the freed
heap back keeps the parse's garbage too), the CPU time of the load, the CPU time of the first
`chat_ids` on a 1 MB paste of real text and the best of 3 (each paste a little different, so
that none is the prompt before), with the number of ids, which must agree, and the load average
when the process ended. With --runs N the checkouts take turns N times, each run its own
process, and the medians follow. Linux.

    .venv/bin/python scripts/tokenizer_cost.py FOLDER --code . --code /work/main --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any


def _status() -> dict[str, float]:
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon"):
            found[key] = int(value.split()[0]) / 1024  # MiB
    return found


def child(folder: str) -> dict[str, object]:
    from chatapp.engine.text.chat import ChatTokenizer, Message

    before = _status()
    started = time.process_time()
    # Checkouts before the tokenizer was built from the folder's files read once took a folder.
    from_folder = getattr(ChatTokenizer, "from_folder", ChatTokenizer)
    tokenizer = from_folder(Path(folder))
    load_cpu = time.process_time() - started
    loaded = _status()
    base = (Path(__file__).parent.parent / "chatapp/resources/bench_text.md").read_text("utf-8")
    text = (base * (1_000_000 // len(base) + 1))[:1_000_000]
    times, ids = [], []
    for n in range(3):
        started = time.process_time()
        ids = tokenizer.chat_ids([Message("user", f"{n}{text[1:]}")])
        times.append(time.process_time() - started)
    return {
        "class": type(tokenizer.tok).__name__,
        "load_peak_mib": loaded["VmHWM"] - before["RssAnon"],
        "kept_mib": loaded["RssAnon"] - before["RssAnon"],
        "load_cpu_s": load_cpu,
        "first_paste_cpu_s": times[0],
        "paste_cpu_s": min(times),
        "paste_ids": len(ids),
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--code", action="append", default=[], help="a chatapp checkout")
    parser.add_argument("--runs", type=int, default=1, help="fresh processes per checkout")
    args = parser.parse_args()
    print(
        "| checkout | class | load peak MiB | kept MiB | load CPU s | first paste CPU s "
        "| 1 MB paste CPU s | ids | load avg |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    results: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for code in args.code or ["."]:
            r = _run(code, args.folder)
            results.setdefault(code, []).append(r)
            print(
                f"| {code} | {r['class']} | {r['load_peak_mib']:.0f} | {r['kept_mib']:.0f} "
                f"| {r['load_cpu_s']:.2f} | {r['first_paste_cpu_s']:.2f} "
                f"| {r['paste_cpu_s']:.2f} | {r['paste_ids']} | {r['load_average']:.1f} |",
                flush=True,
            )
    if args.runs > 1:
        print("\nmedians (min-max) of the 1 MB paste's best CPU s, first CPU s, kept MiB:")
        for code, rows in results.items():
            best = [r["paste_cpu_s"] for r in rows]
            first = [r["first_paste_cpu_s"] for r in rows]
            print(
                f"{code}: {median(best):.2f} ({min(best):.2f}-{max(best):.2f}), "
                f"{median(first):.2f} ({min(first):.2f}-{max(first):.2f}), "
                f"{median(r['kept_mib'] for r in rows):.0f}"
            )


def _run(code: str, folder: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(code).resolve())}
    out = subprocess.run(
        [sys.executable, __file__, "--child", folder],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{code} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
    else:
        main()
