"""Convert each given GGUF file in a fresh process and print how it ended, how long it took and
the process's peak memory (VmHWM, else ru_maxrss: the whole interpreter, imports included).

    .venv/bin/python scripts/hostile_gguf.py FILE.gguf [FILE.gguf ...] [--json]

tests/convert/test_hostile_gguf.py runs it on its crafted files; docs/security.md quotes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def peak_mb() -> float:
    """This process's peak resident memory in MB."""
    # VmHWM: this program's own peak. ru_maxrss would also count the parent's memory, which
    # Linux carries over into the child across fork and exec.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource  # not on Windows

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 1024)


# Runs in the child: one conversion, then its own figures as one JSON line.
CHILD = r"""
import json, sys, time
from pathlib import Path
from scripts.hostile_gguf import peak_mb
from chatapp.convert.converter import convert_gguf
from chatapp.convert.errors import ConversionError
src, out = Path(sys.argv[1]), Path(sys.argv[2])
started = time.perf_counter()
try:
    convert_gguf(src, out)
    refused, message = False, ""
except ConversionError as exc:
    refused, message = True, str(exc)
seconds = time.perf_counter() - started
print(json.dumps({"refused": refused, "message": message, "seconds": round(seconds, 3),
                  "peak_rss_mb": round(peak_mb(), 1)}))
"""


def measure(path: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [sys.executable, "-c", CHILD, str(path), str(Path(tmp) / "out")],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=False,
        )
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["(nothing)"]
        return {"file": path.name, "refused": False, "crashed": tail[0]}
    row: dict[str, object] = {"file": path.name, **json.loads(result.stdout.splitlines()[-1])}
    return row


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    rows = [measure(Path(a)) for a in argv if a != "--json"]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'file':32} {'seconds':>8} {'peak MB':>8}  message")
    for row in rows:
        message = str(row.get("message") or row.get("crashed") or "converted")
        print(
            f"{row['file']:32} {row.get('seconds', '-'):>8} {row.get('peak_rss_mb', '-'):>8}  "
            f"{message[:90]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
