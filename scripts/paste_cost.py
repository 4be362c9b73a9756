"""What a big paste costs the GUI thread: a plain QPlainTextEdit against the prompt box.

Each (case, box) pair runs in a fresh offscreen process, repeats interleaved; the child
pastes the text through insertFromMimeData (as Ctrl+V does), lets Qt lay it out, then types
one character; then what Send and a failed start cost the box: emptied, and the text given
back (the plain box lays it out again, the prompt box keeps its document aside). Prints
medians; a child that runs past --timeout is shown as "> T s".

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/paste_cost.py --repeats 3 [--only line]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES: dict[str, tuple[str, int]] = {
    # name: (a unit of text repeated, characters in all)
    "6 MB, one line of words": ("lorem ipsum ", 6_000_000),
    "6 MB, one line, no spaces": ("x", 6_000_000),
    "1 MB, one line of words": ("lorem ipsum ", 1_000_000),
    "1 MB, 50 000 lines": ("a line of some text\n", 1_000_000),
    "300 000 characters, no spaces": ("x", 300_000),
    "100 000 characters, no spaces": ("x", 100_000),
    "1 MB of line breaks": ("\n", 1_000_000),
    "1 MB, 333 333 lines": ("ab\n", 1_000_000),
    "1 MB of line separators": ("\u2028", 1_000_000),
    "99 999 line breaks": ("\n", 99_999),
    "99 999 short lines": ("abc def\n", 799_992),
}
BOXES = ("plain", "prompt")


def child(case: str, box: str) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QMimeData, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QPlainTextEdit

    from chatapp.gui.chat.view import PromptEdit

    app = QApplication([])
    unit, size = CASES[case]
    text = (unit * (size // len(unit) + 1))[:size]
    edit = QPlainTextEdit() if box == "plain" else PromptEdit("a message")
    edit.resize(600, 100)
    edit.show()
    edit.setPlainText("typed before")
    app.processEvents()
    mime = QMimeData()
    mime.setText(text)
    started = time.perf_counter()
    edit.insertFromMimeData(mime)
    app.processEvents()
    pasted = time.perf_counter()
    QTest.keyClick(edit, Qt.Key.Key_A)
    app.processEvents()
    typed = time.perf_counter()
    chars = len(edit.toPlainText())
    sent = edit.toPlainText()
    if isinstance(edit, PromptEdit):
        edit.set_aside()
        app.processEvents()
        edit.take_back(sent)
    else:
        edit.setPlainText("")
        app.processEvents()
        edit.setPlainText(sent)
    app.processEvents()
    result = {
        "paste_s": pasted - started,
        "key_s": typed - pasted,
        "giveback_s": time.perf_counter() - typed,
        "chars": chars,
    }
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--only", default="", help="run the cases whose name has this in it")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "BOX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.repeats):
        for case in (c for c in CASES if args.only in c):
            for box in BOXES:
                cmd = [sys.executable, __file__, "--child", case, box]
                try:
                    out = subprocess.run(
                        cmd, capture_output=True, text=True, timeout=args.timeout, check=True
                    )
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                except subprocess.TimeoutExpired:
                    row = {
                        "paste_s": float("inf"),
                        "key_s": float("inf"),
                        "giveback_s": float("inf"),
                        "chars": -1,
                    }
                results.setdefault((case, box), []).append(row)
    with open("/proc/loadavg") as fh:
        print(f"load average: {fh.read().strip()}; medians of {args.repeats}")
    print(
        f"{'case':32} {'box':7} {'paste':>9} {'keystroke':>10} {'send+back':>10} "
        f"{'characters in the box':>22}"
    )
    for (case, box), rows in results.items():
        paste = statistics.median(r["paste_s"] for r in rows)
        key = statistics.median(r["key_s"] for r in rows)
        back = statistics.median(r["giveback_s"] for r in rows)
        chars = int(statistics.median(r["chars"] for r in rows))
        print(
            f"{case:32} {box:7} {_secs(paste, args.timeout):>9} {_secs(key, args.timeout):>10} "
            f"{_secs(back, args.timeout):>10} {chars if chars >= 0 else '-':>22}"
        )


def _secs(value: float, timeout: float) -> str:
    return f"> {timeout:.0f} s" if value == float("inf") else f"{value:.3f} s"


if __name__ == "__main__":
    main()
