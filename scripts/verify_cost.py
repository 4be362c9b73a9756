"""What a forward pass of r new rows costs against one row, r = 1..9: the price of verifying
r - 1 drafted tokens in speculative decoding (docs/engine.md, "Speculative decoding").

One thread and its own CPU time (time.thread_time), so that other jobs on a shared machine
change the figures little; medians of --repeats passes after a 60-token prompt, the cache cut
back after each pass. Usage: scripts/verify_cost.py FOLDER [--precision fast] [--repeats 7]

--wall --threads N: the wall clock of passes on N threads instead (row counts interleaved,
medians and minimums): what a pass costs where the weights' reading sets the pace, which
only a quiet machine measures (the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from chatapp.engine.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder")
    parser.add_argument("--precision", default="fast", choices=("fast", "exact"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rows", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--wall", action="store_true", help="wall clock, not one thread's CPU")
    args = parser.parse_args()
    engine = Engine(args.folder, precision=args.precision, threads=args.threads)
    clock = time.perf_counter if args.wall else time.thread_time
    load = os.getloadavg()
    loop = engine.loop()
    prompt = list(range(100, 160))
    loop.prepare(prompt)
    loop.forward(prompt)
    base = len(loop.cached)
    costs: dict[int, list[float]] = {r: [] for r in range(1, args.rows + 1)}
    for _ in range(args.repeats):
        for rows in costs:
            loop.rollback(len(loop.cached) - base)
            started = clock()
            loop.forward(list(range(200, 200 + rows)), all_logits=True)
            costs[rows].append(clock() - started)
    one, least = statistics.median(costs[1]), min(costs[1])
    what = f"wall clock, {args.threads} threads" if args.wall else "one thread's CPU"
    print(f"{engine.info.name}, {args.precision}, {engine.kernels}; {what}")
    print(f"load average before {load}, after {os.getloadavg()}")
    for rows, values in costs.items():
        cost = statistics.median(values)
        line = f"{rows} rows: {cost * 1000:7.2f} ms  {cost / one:5.2f}x one row"
        if args.wall:
            line += f"  (minimums {min(values) * 1000:7.2f} ms, {min(values) / least:5.2f}x)"
        print(line)


if __name__ == "__main__":
    main()
