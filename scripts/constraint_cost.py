"""What a JSON constraint costs per token: the sampling step with and without it.

One engine, both loops; per repeat, the same prompt answered greedily without a constraint,
with a JSON schema (an object with one long string, so the answer runs to max tokens inside the
grammar), and with the auto tool grammar (free text, the costliest mask: nearly every token is
allowed). Prints the median sampling time per token (the mask is part of it) and the decode
rate, then medians of per-repeat ratios against the unconstrained run.

    .venv/bin/python scripts/constraint_cost.py [MODEL_FOLDER] --tokens 64 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import replace
from pathlib import Path

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.structured.constraints import OutputFormat
from chatapp.engine.structured.tool_calls import Tool, ToolChoice, ToolPlan
from chatapp.engine.text.chat import Message

PROMPT = [Message("user", "Write a long story about a lighthouse keeper, as JSON.")]
STORY = {
    "type": "object",
    "properties": {"story": {"type": "string"}},
    "required": ["story"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path, default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from chatapp.cli.engine_cmds import resolve_model

    engine = Engine(resolve_model(args.model), threads=args.threads)
    tool = Tool("lookup", "", {"type": "object", "properties": {"q": {"type": "string"}}})
    plan = ToolPlan([tool], ToolChoice("auto"), engine.tokenizer.template_source, False)
    formats = {
        "none": None,
        "json_schema": OutputFormat.json_schema(STORY),
        "tools_auto": plan.output_format(),
    }
    settings = replace(GREEDY, max_new_tokens=args.tokens)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.repeats):
        for mode in ("naive", "iobinding"):
            for name, fmt in formats.items():
                gen = engine.chat(PROMPT, settings, mode, output_format=fmt)
                stats = gen.run()
                sample = statistics.median(s.sample_s for s in stats.steps)
                results.setdefault((mode, name), []).append((sample, stats.tokens_per_s))
    print(f"load average: {os.getloadavg()}")
    print("| loop | constraint | sample us/token | tok/s | sample x | tok/s x |")
    print("|---|---|---|---|---|---|")
    for (mode, name), runs in results.items():
        base = results[(mode, "none")]
        ratio_sample = statistics.median(r[0] / b[0] for r, b in zip(runs, base, strict=True))
        ratio_rate = statistics.median(r[1] / b[1] for r, b in zip(runs, base, strict=True))
        print(
            f"| {mode} | {name} | {statistics.median(r[0] for r in runs) * 1e6:.0f} | "
            f"{statistics.median(r[1] for r in runs):.1f} | {ratio_sample:.2f} | "
            f"{ratio_rate:.2f} |"
        )


if __name__ == "__main__":
    main()
