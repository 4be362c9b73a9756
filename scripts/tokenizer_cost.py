"""What a model folder's tokenizer costs: memory to load and keep, CPU time for a 1 MB paste.

Each --code checkout loads `ChatTokenizer(FOLDER)` in a fresh process and prints its peak while
loading, the anonymous memory after (/proc/self/status; a process that does not hand the freed
heap back keeps the parse's garbage too), the CPU time of the load, and the best of 3 CPU times
of `chat_ids` on a 1 MB paste of real text (with the number of ids, which must agree). Linux.

    .venv/bin/python scripts/tokenizer_cost.py FOLDER --code . --code /work/main
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _status() -> dict[str, float]:
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon"):
            found[key] = int(value.split()[0]) / 1024  # MiB
    return found


def child(folder: str) -> dict[str, object]:
    from chatapp.engine.chat import ChatTokenizer, Message

    before = _status()
    started = time.process_time()
    tokenizer = ChatTokenizer(Path(folder))
    load_cpu = time.process_time() - started
    loaded = _status()
    base = (Path(__file__).parent.parent / "chatapp/resources/bench_text.md").read_text("utf-8")
    text = (base * (1_000_000 // len(base) + 1))[:1_000_000]
    times, ids = [], []
    for _ in range(3):
        started = time.process_time()
        ids = tokenizer.chat_ids([Message("user", text)])
        times.append(time.process_time() - started)
    return {
        "class": type(tokenizer.tok).__name__,
        "load_peak_mib": loaded["VmHWM"] - before["RssAnon"],
        "kept_mib": loaded["RssAnon"] - before["RssAnon"],
        "load_cpu_s": load_cpu,
        "paste_cpu_s": min(times),
        "paste_ids": len(ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--code", action="append", default=[], help="a chatapp checkout")
    args = parser.parse_args()
    print("| checkout | class | load peak MiB | kept MiB | load CPU s | 1 MB paste CPU s | ids |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for code in args.code or ["."]:
        env = {**os.environ, "PYTHONPATH": str(Path(code).resolve())}
        out = subprocess.run(
            [sys.executable, __file__, "--child", args.folder],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"{code} failed:\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {code} | {r['class']} | {r['load_peak_mib']:.0f} | {r['kept_mib']:.0f} "
            f"| {r['load_cpu_s']:.2f} | {r['paste_cpu_s']:.2f} | {r['paste_ids']} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
    else:
        main()
