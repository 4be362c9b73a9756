"""The desktop app: the only package that imports Qt (PySide6). docs/architecture.md has the map.

Importing this package imports no Qt. The command line reaches the GUI only through the two
functions below, and only when it needs them: `run_app` starts the window, `write_bench_report`
draws `chatapp bench --report`'s charts with QtCharts (offscreen when there is no display).
tests/test_architecture.py enforces both rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["run_app", "write_bench_report"]


def run_app(argv: list[str]) -> int:
    """Start the desktop app with the GUI's command-line options; returns the exit code."""
    from chatapp.gui.app import main

    return main(argv)


def write_bench_report(result: dict[str, Any], folder: Path) -> None:
    """Charts (PNG), JSON, CSV and a Markdown page of a `chatapp bench` result in `folder`."""
    from chatapp.gui.compare.report import write_report

    write_report(result, folder)
