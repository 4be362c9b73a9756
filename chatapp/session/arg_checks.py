"""Argument types for the command line and the window (`chatapp gui` checks its options with
the same functions): each refuses a bad value with one line (exit code 2).

argparse calls a `type=` function on the text of an argument; an `ArgumentTypeError` becomes
`chatapp COMMAND: error: argument --x: <message>`. `OneLineParser` prints only that line (no
usage block), so every bad command line ends the same way: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import PurePath
from typing import NoReturn

from chatapp.engine.guards import THREADS_PER_CPU as THREADS_PER_CPU  # the CLI names it
from chatapp.engine.guards import max_threads

MAX_CONTEXT = 1 << 20  # tokens: beyond any model's context, far below what would exhaust memory
MAX_NEW_TOKENS = 1 << 20
MAX_REPEATS = 1000
MAX_SWEEP_POINTS = 32
MAX_TEMPERATURE = 100.0
MAX_PENALTY = 100.0
MAX_SEED = (1 << 64) - 1
MAX_NAME = 4096  # characters of a file name given on the command line (PATH_MAX)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (its subcommand parsers are too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message)}\n")


def whole(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{_quote(text)} is not {what} (from {low} to {high})"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: from {low} to {high}")
        return value

    parse.__name__ = what
    return parse


def number(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    bounds = f"above {low:g}, up to {high:g}" if low_open else f"from {low:g} to {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_quote(text)} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text.strip()} is not a finite number")
        if value > high or value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: {bounds}")
        return value

    return parse


def threads(text: str) -> int:
    """1 to 4 per logical CPU: more only contend (see engine/guards.py)."""
    cap = max_threads()
    return whole(1, cap, f"a thread count ({THREADS_PER_CPU} per CPU here)")(text)


def sweep(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise argparse.ArgumentTypeError(
            "expected comma-separated context lengths, e.g. 128,512,1024"
        )
    if len(parts) > MAX_SWEEP_POINTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SWEEP_POINTS} context lengths")
    return [whole(1, MAX_CONTEXT, "a context length")(p) for p in parts]


def peers(value: str) -> str:
    """Comma-separated peer names, checked before a model is loaded."""
    from chatapp.engine.bench.peers import PEER_NAMES

    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in PEER_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer {_quote(unknown[0])}; choose from {', '.join(PEER_NAMES)}"
        )
    return ",".join(names)


def modes(value: str) -> tuple[str, ...]:
    """Comma-separated loop names (`chatapp bench --modes nocache,naive,iobinding`), in the
    order the loops are listed, each once."""
    from chatapp.engine.modes import MODES

    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown loop {_quote(unknown[0])}; choose from {', '.join(MODES)}"
        )
    if not names:
        raise argparse.ArgumentTypeError(f"name at least one loop of {', '.join(MODES)}")
    return tuple(m for m in MODES if m in names)


def text(value: str) -> str:
    """Text as the user typed it; bytes that are not UTF-8 arrive as lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            "is not valid UTF-8 text (the terminal passed bytes that are not characters)"
        ) from None
    return value


def onnx_file(value: str) -> str:
    """A graph's path inside the model folder (the engine then checks that it is a regular
    file there, links resolved)."""
    value = text(value)
    if not value.strip() or "\0" in value or len(value) > MAX_NAME:
        raise argparse.ArgumentTypeError(
            f"{_quote(value)} is not a file name inside the model folder, e.g. onnx/model_q4.onnx"
        )
    if PurePath(value).is_absolute() or value.startswith(("/", "\\")):
        raise argparse.ArgumentTypeError(
            f"{_quote(value)} is an absolute path; give the graph's path inside the model "
            "folder, e.g. onnx/model_q4.onnx"
        )
    return value


def printable(message: str) -> str:
    """One line, with undecodable bytes (lone surrogates) spelled as escapes."""
    text = " ".join(message.split())
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _quote(value: str) -> str:
    shown = value if len(value) <= 40 else value[:37] + "..."
    return repr(shown.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace"))


def safe_output_streams() -> None:
    """Printing to stdout never fails: a path with undecodable bytes goes out as those bytes,
    text a non-UTF-8 terminal cannot show is escaped. (stderr escapes by default.) Only the
    process's own stream is changed, not one a caller put in its place."""
    stream = sys.stdout
    reconfigure = getattr(stream, "reconfigure", None)
    if stream is not sys.__stdout__ or reconfigure is None:
        return
    encoding = (getattr(stream, "encoding", "") or "").lower().replace("-", "")
    reconfigure(errors="surrogateescape" if encoding == "utf8" else "backslashreplace")
