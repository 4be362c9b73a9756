"""What a forward pass of r new rows costs against one row, r = 1..9: the price of verifying
r - 1 drafted tokens in speculative decoding (docs/engine.md, "Speculative decoding").

One thread and its own CPU time (time.thread_time), so that other jobs on a shared machine
change the figures little; medians of --repeats passes after a 60-token prompt, the cache cut
back after each pass. Usage: scripts/verify_cost.py FOLDER [--precision fast] [--repeats 7]
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
    args = parser.parse_args()
    engine = Engine(args.folder, precision=args.precision, threads=1)
    loop = engine.loop()
    prompt = list(range(100, 160))
    loop.prepare(prompt)
    loop.forward(prompt)
    base = len(loop.cached)
    costs: dict[int, list[float]] = {r: [] for r in range(1, args.rows + 1)}
    for _ in range(args.repeats):
        for rows in costs:
            loop.rollback(len(loop.cached) - base)
            started = time.thread_time()
            loop.forward(list(range(200, 200 + rows)), all_logits=True)
            costs[rows].append(time.thread_time() - started)
    one = statistics.median(costs[1])
    print(f"{engine.info.name}, {args.precision}, {engine.kernels}; load {os.getloadavg()}")
    for rows, values in costs.items():
        cost = statistics.median(values)
        print(f"{rows} rows: {cost * 1000:7.2f} ms CPU  {cost / one:5.2f}x one row")


if __name__ == "__main__":
    main()
