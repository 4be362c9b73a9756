"""Real clients against `chatapp serve`: pass or fail per check, with the reason (issue 38).

    PYTHONPATH=. .venv/bin/python scripts/client_checks.py \
        [--clients-python /work/venvs/clients/bin/python] [--model DIR] [--parallel N]
        [--only openai,langchain,...] [--markdown]

Starts `chatapp serve --port 0` on the default model (or --model), then runs each group of
checks (scripts/client_cases*.py) in the interpreter that has its client:
the openai SDK in this one; langchain-openai, instructor, litellm and the `llm` CLI in
--clients-python, a venv of their own, never chatapp's:

    python -m venv /work/venvs/clients
    /work/venvs/clients/bin/pip install langchain-openai instructor litellm llm

Without it those groups are listed as skipped. Prints one line per check as it ends, then the
table and the total. Not part of the test suite (CI has no such venv): a server bug a check
finds gets a unit test in tests/server/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
GROUPS = {  # group -> which interpreter: "own" (this one) or "clients"
    "openai": "own",
    "langchain": "clients",
    "instructor": "clients",
    "litellm": "clients",
    "llm": "clients",
}


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str, str]:
    command = [sys.executable, "-m", "chatapp", "serve", "--port", "0", "--json", "--quiet"]
    if args.model:
        command += ["--model", args.model]
    if args.parallel > 1:
        command += ["--parallel", str(args.parallel)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert server.stdout is not None
    line = server.stdout.readline()  # printed once the socket listens
    if not line:
        server.wait(10)
        raise SystemExit(f"chatapp serve did not start (exit {server.returncode})")
    announced = json.loads(line)
    return server, announced["url"], announced["model"]


def run_group(group: str, python: str, base: str, model: str, log: Path) -> list[dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(HERE), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [python, str(HERE / "client_cases.py"), group, base, model]
    rows: list[dict[str, object]] = []
    with log.open("a") as errors:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        assert child.stdout is not None
        for line in child.stdout:
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            rows.append(row)
            mark = "pass" if row["ok"] else "FAIL"
            print(f"  {mark}  {group:10} {row['check']}  ({row['seconds']} s)", flush=True)
        child.wait()
    if child.returncode and not rows:
        rows.append(
            {
                "client": group,
                "check": "(the group)",
                "ok": False,
                "reason": f"exit {child.returncode}: see {log}",
                "seconds": 0,
            }
        )
    return rows


def table(rows: list[dict[str, object]], markdown: bool) -> str:
    lines = []
    if markdown:
        lines += ["| client | check | result | reason / what came |", "|---|---|---|---|"]
    for r in rows:
        result = "pass" if r["ok"] else "skip" if r["ok"] is None else "FAIL"
        reason = str(r["reason"]).replace("|", "/").replace("\n", " ")[:110]
        if markdown:
            lines.append(f"| {r['client']} | {r['check']} | {result} | {reason} |")
        else:
            lines.append(f"{result:4}  {r['client']:10}  {r['check']:45}  {reason}")
    passed = sum(1 for r in rows if r["ok"])
    failed = sum(1 for r in rows if r["ok"] is False)
    skipped = sum(1 for r in rows if r["ok"] is None)
    lines.append(f"\n{passed} of {passed + failed} checks pass ({failed} fail, {skipped} skipped)")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients-python", default="/work/venvs/clients/bin/python")
    p.add_argument("--model", default=None, help="a model folder (default: the default model)")
    p.add_argument("--parallel", type=int, default=1, help="chatapp serve --parallel")
    p.add_argument("--only", default=",".join(GROUPS), help="groups, comma-separated")
    p.add_argument("--markdown", action="store_true", help="the table in Markdown")
    args = p.parse_args()
    wanted = [g.strip() for g in args.only.split(",") if g.strip()]
    log = Path("/tmp") / f"client_checks_{os.getpid()}.log"
    started = time.perf_counter()
    server, url, model = start_server(args)
    rows: list[dict[str, object]] = []
    try:
        print(f"chatapp serve: {url} ({model}); client errors go to {log}", flush=True)
        for group in wanted:
            python = sys.executable if GROUPS[group] == "own" else args.clients_python
            if not Path(python).exists():
                rows.append(
                    {
                        "client": group,
                        "check": "(all)",
                        "ok": None,
                        "reason": f"no {python}",
                        "seconds": 0,
                    }
                )
                continue
            rows += run_group(group, python, url, model, log)
    finally:
        server.terminate()
        server.wait(30)
    print()
    print(table(rows, args.markdown))
    print(f"({time.perf_counter() - started:.0f} s, model {model}, --parallel {args.parallel})")
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
