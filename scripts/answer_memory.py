"""Where a model's memory goes at load and while answering, one process per run.

Each run opens the model, notes its resident memory (file-backed: the mapped model.onnx.data;
anonymous: ONNX Runtime's packed copies, arena, KV, the tokenizer, whose own share it reports)
and the peak of the load, starts the peak again, answers the bench prompt (`--prompt-tokens`
pads it with real text to about that many tokens) greedily for --new tokens and notes the
answer's peak, tokens/s and a digest of the tokens. `--code DIR` runs chatapp from another
checkout (e.g. /work/main for the baseline; `--code .,CHATAPP_BENCH_PRECISION=exact` runs a
precision) and `--llama PYTHON` adds llama.cpp
(llama-cpp-python) on `--gguf` with the same prompt ids in a `--context` of 8192 tokens (chatapp
answers in the folder's). Runs are interleaved repeat by repeat, order flipped each round;
ratios are medians of per-repeat ratios against the first system. Linux only (/proc).

    .venv/bin/python scripts/answer_memory.py FOLDER --code . --code /work/main \
        --llama /work/venvs/llama/bin/python --gguf FILE.gguf --repeats 3 --prompt-tokens 1000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROMPT = "Explain what a KV cache is in a few sentences."


def _status() -> dict[str, float]:
    keys = {"VmRSS": "rss", "VmHWM": "peak", "RssFile": "file", "RssAnon": "anon"}
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in keys:
            found[keys[key]] = int(value.split()[0]) / 1024  # MB (MiB)
    return found


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _mapped(suffix: str) -> float:
    """Resident MiB of the mappings of files whose name ends with `suffix`."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            current = rest.rstrip().endswith(suffix)
        elif head == "Rss:" and current:
            total += int(rest.split()[0])
    return total / 1024


def chatapp_child(folder: str, new: int, threads: int, tokens: int) -> dict[str, Any]:
    from chatapp.engine.bench.run import bench_prompt_ids, fixed_length
    from chatapp.engine.engine import Engine

    started = time.perf_counter()
    # --code DIR,CHATAPP_BENCH_PRECISION=exact: the GGUF kernels' precision (issue 46).
    precision = os.environ.get("CHATAPP_BENCH_PRECISION")
    engine = Engine(folder, threads=threads, **({"precision": precision} if precision else {}))
    load_s = time.perf_counter() - started
    loaded = _status()
    # The tokenizer's share, measured as it loaded (0 for a checkout that does not measure it).
    loaded["tokenizer"] = getattr(engine.tokenizer, "resident_bytes", 0) / 2**20
    # A first load saves the packed copy in a child process (engine/packed_cache.py): its peak.
    loaded["child_peak"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    loaded["mapped_data"] = _mapped(".onnx.data")
    _reset_peak()
    ids = bench_prompt_ids(engine, PROMPT, tokens or None)
    stats = fixed_length(engine, ids, "iobinding", new).run()
    answered = _status()
    answered["mapped_data"] = _mapped(".onnx.data")
    return {
        "load_s": load_s,
        "after_load": loaded,
        "after_answer": answered,
        "prompt_ids": ids,
        "tokens_per_s": stats.tokens_per_s,
        "ttft_s": stats.ttft_s,
        "tokens": hashlib.sha1(str(stats.token_ids).encode()).hexdigest()[:10],
    }


def llama_child(gguf: str, ids: list[int], new: int, threads: int, context: int) -> dict[str, Any]:
    from llama_cpp import Llama

    started = time.perf_counter()
    llm = Llama(gguf, n_ctx=context, n_threads=threads, verbose=False, flash_attn=True)
    load_s = time.perf_counter() - started
    loaded = _status()
    _reset_peak()
    llm.reset()
    llm.eval(ids)
    first = time.perf_counter()
    out = []
    for _ in range(new):
        token = int(llm.sample(temp=0.0))
        out.append(token)
        llm.eval([token])
    decode_s = time.perf_counter() - first
    return {
        "load_s": load_s,
        "after_load": loaded,
        "after_answer": _status(),
        "ttft_s": first - started - load_s,
        "tokens_per_s": (new - 1) / decode_s,
        "tokens": hashlib.sha1(str(out).encode()).hexdigest()[:10],
    }


def run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        help="a chatapp checkout, optionally with environment settings: DIR[,VAR=VALUE...]",
    )
    parser.add_argument("--llama", help="a Python with llama-cpp-python")
    parser.add_argument("--gguf", help="the GGUF llama.cpp runs")
    parser.add_argument(
        "--context", type=int, default=8192, help="llama.cpp's context (the folder's: its own)"
    )
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=0,
        help="pad the prompt with real text to about this many tokens (default: the bare prompt)",
    )
    args = parser.parse_args()
    codes = args.code or ["."]
    systems = [f"chatapp@{c}" for c in codes] + (["llama.cpp"] if args.llama else [])
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    ids: list[int] | None = None
    for r in range(args.repeats):
        for system in systems if r % 2 == 0 else systems[::-1]:
            env = os.environ.copy()
            if system == "llama.cpp":
                if ids is None:
                    continue  # the prompt ids come from chatapp's first run
                env.setdefault("OMP_WAIT_POLICY", "ACTIVE")
                env.setdefault("GOMP_SPINCOUNT", "300000")
                cmd = [args.llama, __file__, "--llama-child", args.gguf, json.dumps(ids)]
            else:
                checkout, *settings = system.split("@", 1)[1].split(",")
                env["PYTHONPATH"] = str(Path(checkout).resolve())
                for setting in settings:
                    name, _, value = setting.partition("=")
                    env[name] = value
                cmd = [sys.executable, __file__, "--chatapp-child", args.folder]
            extra = [str(args.context if system == "llama.cpp" else args.prompt_tokens)]
            res = run([*cmd, str(args.new), str(args.threads), *extra], env)
            ids = ids or res.get("prompt_ids")
            res["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
            runs[system].append(res)
            a, b = res["after_load"], res["after_answer"]
            print(
                f"repeat {r + 1} {system}: load {res['load_s']:.1f} s, peak at load "
                f"{a['peak']:.0f} MiB (a child's {a.get('child_peak', 0):.0f}), after load "
                f"{a['rss']:.0f} (anon {a['anon']:.0f}, file "
                f"{a['file']:.0f}; tokenizer {a.get('tokenizer', 0):.0f}), prompt "
                f"{len(res.get('prompt_ids') or ids or [])} tokens, answer peak "
                f"{b['peak']:.0f} (anon {b['anon']:.0f}, file "
                f"{b['file']:.0f}), {res['tokens_per_s']:.1f} tok/s, tokens {res['tokens']}, "
                f"load average {res['loadavg']}",
                flush=True,
            )
    first = systems[0]
    print(f"\n{args.new} new tokens, {args.threads} threads, medians of {args.repeats} repeats")
    print(
        "| system | load s | peak at load MiB | peak answering MiB | tokenizer MiB | tok/s "
        "| tok/s / first | TTFT ms | tokens |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for system in systems:
        mine = runs[system]
        if not mine:
            continue
        pairs = zip(mine, runs[first], strict=False)
        ratio = statistics.median(a["tokens_per_s"] / b["tokens_per_s"] for a, b in pairs)
        print(
            f"| {system} | {statistics.median(m['load_s'] for m in mine):.2f} "
            f"| {statistics.median(m['after_load']['peak'] for m in mine):.0f} "
            f"| {statistics.median(m['after_answer']['peak'] for m in mine):.0f} "
            f"| {statistics.median(m['after_load'].get('tokenizer', 0) for m in mine):.0f} "
            f"| {statistics.median(m['tokens_per_s'] for m in mine):.1f} | {ratio:.2f} "
            f"| {1000 * statistics.median(m.get('ttft_s', float('nan')) for m in mine):.0f} "
            f"| {','.join(sorted({m['tokens'] for m in mine}))} |"
        )
    print("load average:", Path("/proc/loadavg").read_text().strip())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--chatapp-child":
        res = chatapp_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        print(json.dumps(res))
    elif len(sys.argv) > 1 and sys.argv[1] == "--llama-child":
        ids = json.loads(sys.argv[3])
        res = llama_child(sys.argv[2], ids, int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
        print(json.dumps(res))
    else:
        main()
