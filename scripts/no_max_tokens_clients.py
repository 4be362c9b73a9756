"""Four OpenAI-SDK clients that send no `max_tokens`, against `chatapp serve` as a user starts it.

The server runs with its defaults (4 slots where the model can batch, a KV budget of one
context). Each round, in alternating order: one client asks the four prompts one after another,
and four clients ask one each at the same time. No `max_tokens` and no temperature (the
server's default, 1, what an SDK client that sets nothing gets); each prompt has its own `seed`,
so that its answers can be compared; each answer runs to its end of text. (Greedy, the small
model repeats itself to the end of the context: thousands of tokens.)

Printed per phase: tokens, wall seconds, aggregate tokens per second, the server process's CPU
seconds per token, and from /metrics the batched steps, the rows they carried and the
pre-emptions. Each four-at-once answer is compared with the same prompt's one-at-a-time answer
(equal on a native graph at the fast precision). The load average is printed at the start and
the end: wall figures on a shared machine move with it.

    python scripts/no_max_tokens_clients.py [--model FOLDER] [--rounds 2] [--serve-args ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
from openai import OpenAI

# Prompts whose seeded answers on the default model end on their own, in 80 to 600 tokens (the
# longest grows its reservation past a first piece of 256 positions twice).
PROMPTS = (
    "Describe a sunny day.",
    "Why do birds sing?",
    "Who wrote Hamlet?",
    "Tell me a fact about dogs.",
)
COUNTERS = ("batched_steps_total", "batched_rows_total", "preemptions_total")


@dataclass
class Phase:
    tokens: int
    wall_s: float
    cpu_s: float
    counters: dict[str, float]
    texts: list[str]


def metrics(url: str) -> dict[str, float]:
    text = httpx2.get(f"{url}/metrics", trust_env=False).text
    found = {}
    for line in text.splitlines():
        for name in COUNTERS:
            if line.startswith(f"chatapp_{name} "):
                found[name] = float(line.split()[1])
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ask(client: OpenAI, model: str, prompt: str) -> tuple[str, int]:
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], seed=len(prompt)
    )
    assert answer.usage is not None
    return answer.choices[0].message.content or "", answer.usage.completion_tokens


def phase(client: OpenAI, model: str, url: str, pid: int, together: bool) -> Phase:
    before, cpu0, t0 = metrics(url), cpu_seconds(pid), time.perf_counter()
    results: list[tuple[str, int]] = [("", 0)] * len(PROMPTS)
    if together:

        def run(i: int) -> None:
            results[i] = ask(client, model, PROMPTS[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        results = [ask(client, model, p) for p in PROMPTS]
    wall, cpu, after = time.perf_counter() - t0, cpu_seconds(pid) - cpu0, metrics(url)
    counters = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    return Phase(sum(n for _, n in results), wall, cpu, counters, [t for t, _ in results])


def show(name: str, p: Phase) -> None:
    steps, rows = p.counters["batched_steps_total"], p.counters["batched_rows_total"]
    print(
        f"  {name}: {p.tokens} tokens in {p.wall_s:.1f} s = {p.tokens / p.wall_s:.1f} tok/s; "
        f"server CPU {p.cpu_s / p.tokens * 1000:.1f} ms/token; steps {steps:.0f}, rows "
        f"{rows:.0f} ({rows / max(steps, 1):.2f} a step); pre-emptions "
        f"{p.counters['preemptions_total']:.0f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a model folder (default: the app's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--serve-args",
        default="",
        help="more `chatapp serve` options, e.g. '--context 384' (a budget that forces "
        "pre-emptions)",
    )
    args = parser.parse_args()
    command = [sys.executable, "-m", "chatapp", "serve", "--port", "0", "--json", "--quiet"]
    if args.model:
        command += ["--model", args.model]
    command += args.serve_args.split()
    print(f"load average at start: {os.getloadavg()}")
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        started = json.loads(server.stdout.readline())
        api, model = started["url"], started["model"]
        url = api.removesuffix("/v1")
        slots = httpx2.get(f"{url}/slots", trust_env=False).json()
        budget = httpx2.get(f"{url}/metrics", trust_env=False).text
        capacity = next(
            line.split()[1]
            for line in budget.splitlines()
            if line.startswith("chatapp_kv_tokens_capacity ")
        )
        print(f"{model}: {len(slots)} slots, KV budget {capacity} positions")
        client = OpenAI(base_url=api, api_key="none", max_retries=0, timeout=1200)
        ask(client, model, "Hi")  # warm up: the first answer faults in pages
        ratios, same = [], True
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            done = {together: phase(client, model, url, server.pid, together) for together in order}
            one, four = done[False], done[True]
            print(f"round {r + 1}:")
            show("one client, 4 prompts in turn", one)
            show("4 clients at once", four)
            ratio = (four.tokens / four.wall_s) / (one.tokens / one.wall_s)
            ratios.append(ratio)
            equal = four.texts == one.texts
            same = same and equal
            print(f"  aggregate tok/s, 4 at once / one: {ratio:.2f}x; same answers: {equal}")
        print(f"ratios: {', '.join(f'{x:.2f}' for x in ratios)}; every answer the same: {same}")
    finally:
        server.terminate()
        server.wait(60)
        print(f"load average at end: {os.getloadavg()}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
