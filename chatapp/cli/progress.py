"""A one-line text progress bar for the terminal (stderr), no dependency needed."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.perf_counter()
        self._last = ""
        self._tty = self.stream.isatty()
        self._open = False  # a tty line written without its newline yet

    def __call__(self, fraction: float, message: str) -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(fraction * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.perf_counter() - self.started
        line = f"{self.label} [{bar}] {fraction * 100:3.0f}% {elapsed:5.1f}s {message}"
        if self._tty:
            self.stream.write("\r" + line.ljust(len(self._last)))
            self._open = fraction < 1.0
            if not self._open:
                self.stream.write("\n")
        elif message != self._last:
            # Not a terminal (CI logs): one line per stage instead of carriage returns.
            self.stream.write(line + "\n")
        self.stream.flush()
        self._last = line if self._tty else message

    def close(self) -> None:
        """End an unfinished bar's line, so that an error printed next starts on its own line."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
