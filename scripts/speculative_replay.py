"""What the draft planner would give on the bench's prompts for a table of pass costs: the
ceiling that cheaper verifying passes could reach (docs/engine.md, "Speculative decoding").

Greedy speculative decoding gives the plain decode's tokens, so a drafted token is kept exactly
where it equals the plain answer's next token. This script answers each bench prompt
(chatapp/resources/speculative_prompts.json) once, plain, then replays PromptLookup and
DraftPlanner over those answers with passes of r rows costing --costs[r - 1] one-row steps,
as the bench does: one planner for all prompts, a first round it learns in, then the round
whose figures are printed. The ratio is an answer's tokens after the first over the steps its
passes cost, so only the passes' cost is modelled: no sampling or Python time, no noise.

    PYTHONPATH=. .venv/bin/python scripts/speculative_replay.py [--model FOLDER] \
        [--costs 1,1.2,1.5,1.8,2.4] [--share 0.2] [--most 8] [--known]

--costs: one thread's CPU of a pass of 1, 2, ... rows over one row's (scripts/verify_cost.py);
rows past the list cost its last entry plus --share a row (default: the last row's step).
--share alone (no --costs): every row past the first costs that share of a step.
--known: the planner starts with every length's cost measured (no exploring).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.speculative import MAX_DRAFT, DraftPlanner, PromptLookup


@dataclass(frozen=True)
class Answer:
    name: str
    kind: str
    prompt: list[int]
    tokens: list[int]


def plain_answers(model: Path | None, new_tokens: int) -> list[Answer]:
    from chatapp.convert.default_model import default_model_dir
    from chatapp.engine.bench.speculative import answer_once, bench_prompts, prompt_ids
    from chatapp.engine.engine import Engine
    from chatapp.engine.sampling import SamplingSettings

    engine = Engine(model or default_model_dir(), threads=1, precision="fast")
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=new_tokens)
    answers = []
    for prompt in bench_prompts():
        ids = prompt_ids(engine, prompt)
        stats = answer_once(engine, ids, settings, False)
        answers.append(Answer(prompt.name, prompt.kind, ids, list(stats.token_ids)))
    return answers


def replay(
    answer: Answer, planner: DraftPlanner, cost: Callable[[int], float]
) -> tuple[float, int]:
    """The steps an answer's passes cost after its first token, and how many passes."""
    lookup = PromptLookup(answer.prompt)
    tokens = answer.tokens
    lookup.append(tokens[0])
    at, steps, passes = 1, 0.0, 0
    while at < len(tokens):
        draft = lookup.draft(len(tokens) - at - 1)
        k = planner.length(draft) if draft is not None else 0
        planner.record_run(k + 1, cost(k + 1))
        steps += cost(k + 1)
        passes += 1
        kept = 0
        if draft is not None and k:
            while kept < k and draft.tokens[kept] == tokens[at + kept]:
                kept += 1
            planner.record_draft(draft.matched, kept + (1 if kept < k else 0), kept)
        for token in tokens[at : at + kept + 1]:
            lookup.append(token)
        at += kept + 1
    return steps, passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--costs", default="")
    parser.add_argument("--share", type=float, default=None)
    parser.add_argument("--most", type=int, default=MAX_DRAFT)
    parser.add_argument("--row-share", type=float, default=0.5, help="the planner's guess")
    parser.add_argument("--known", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="rounds before the one shown")
    args = parser.parse_args()
    table = [float(c) for c in args.costs.split(",") if c.strip()] or [1.0]
    share = (
        args.share if args.share is not None else (table[-1] - table[-2] if len(table) > 1 else 0.5)
    )

    def cost(rows: int) -> float:
        return table[rows - 1] if rows <= len(table) else table[-1] + (rows - len(table)) * share

    answers = plain_answers(args.model, args.max_new_tokens)
    planner = DraftPlanner(most=args.most, row_share=args.row_share)
    if args.known:
        planner.record_run(1, cost(1))
        for rows in range(2, args.most + 2):
            for _ in range(3):
                planner.record_run(rows, cost(rows))
    for _ in range(args.rounds):  # rounds the planner learns in (the bench: 1 answer, then 3)
        for answer in answers:
            replay(answer, planner, cost)
    by_kind: dict[str, list[float]] = {}
    print(f"costs {[round(cost(r), 2) for r in range(1, args.most + 2)]} one-row steps")
    for answer in answers:
        steps, passes = replay(answer, planner, cost)
        ratio = (len(answer.tokens) - 1) / steps
        by_kind.setdefault(answer.kind, []).append(ratio)
        print(
            f"{answer.name[:40]:40} {answer.kind:8} {ratio:5.2f}x "
            f"{(len(answer.tokens) - 1) / passes:5.2f} tokens a pass"
        )
    for kind, ratios in by_kind.items():
        print(f"{kind}: {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
