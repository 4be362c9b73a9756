"""What a history search costs the GUI thread when the history holds huge messages.

Builds a history of 2 chats x 4 messages of 4 million characters (what imports allow) in a
temporary folder and times HistoryStore.search for a word in every message and for one in
none. Prints medians.

    .venv/bin/python scripts/search_cost.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from chatapp.store import HistoryStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    big = ("lorem ipsum dolor " * 240_000)[:4_000_000]
    with tempfile.TemporaryDirectory() as folder, HistoryStore(Path(folder) / "h.db") as store:
        for number in range(2):
            conv = store.create_conversation(f"big {number}")
            for i in range(4):
                store.append_message(conv.id, "user" if i % 2 == 0 else "assistant", big)
        for query in ("lorem", "nothing-matches"):
            times, hits = [], 0
            for _ in range(args.repeats):
                started = time.perf_counter()
                hits = len(store.search(query))
                times.append(time.perf_counter() - started)
            print(f"{query!r}: {hits} hits, median {statistics.median(times) * 1000:.0f} ms")
    with open("/proc/loadavg") as fh:
        print(f"load average: {fh.read().strip()}")


if __name__ == "__main__":
    main()
