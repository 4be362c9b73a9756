"""Fidelity, measured: a shipped real text through the model, every scored position's logits
against the float64 reference of the same GGUF (chatapp/convert/reference.py), for each
precision of the GGUF kernels and each way the engine reads text (engine/bench/fidelity.py says
what is scored and how). `chatapp bench --fidelity` and scripts/fidelity.py print it; other
systems' logits (llama.cpp's, in scripts/fidelity.py) join as precomputed arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from chatapp.convert.reference import ReferenceModel
from chatapp.engine.bench.fidelity import (
    WAYS,
    WINDOW,
    FidelityMetrics,
    FidelityTally,
    engine_window_logits,
    scored_positions,
    windows,
)
from chatapp.engine.bench.llamacpp_logits import llama_logits
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.guards import PRECISION_LABELS, PRECISIONS
from chatapp.error_text import first_line

TEXT_RESOURCE = "fidelity_text.txt"  # its source: chatapp/resources/fidelity_text.source.md
TEXT_SOURCE = "Alice's Adventures in Wonderland, chapter I (Project Gutenberg #11)"

Progress = Callable[[str], None]
# A system's logits of one window: (window index, the window's ids) -> [scored, vocab].
WindowLogits = Callable[[int, Sequence[int]], np.ndarray]


def fidelity_text() -> str:
    return resources.files("chatapp.resources").joinpath(TEXT_RESOURCE).read_text("utf-8")


@dataclass(frozen=True)
class FidelityRow:
    system: str  # "chatapp fast, prompt", "llama.cpp", "float64 reference"
    metrics: FidelityMetrics


@dataclass(frozen=True)
class FidelityResult:
    model: str
    kernels: str  # the engine's kernels line without a precision
    text: str  # what was read
    tokens: int  # of the text
    window: int
    windows: int
    rows: tuple[FidelityRow, ...]
    note: str = ""  # e.g. random weights: KL figures say less

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kernels": self.kernels,
            "text": self.text,
            "tokens": self.tokens,
            "window": self.window,
            "windows": self.windows,
            "rows": [{"system": r.system, **r.metrics.to_dict()} for r in self.rows],
            "note": self.note,
        }


def text_windows(engine: Engine, text: str, window: int) -> list[list[int]]:
    """The text's tokens cut into windows; each starts with BOS where the model wants one (in
    place of the window's first token, as llama.cpp's perplexity tool does)."""
    ids = engine.tokenizer.encode(text)
    bos = engine.tokenizer.with_bos([])
    cut = [ids[r.start : r.stop] for r in windows(len(ids), window)]
    if not cut:
        raise EngineError(
            f"The text has {len(ids)} tokens: fewer than one window of {window} tokens."
        )
    return [bos + w[len(bos) :] for w in cut]


def measure_fidelity(
    folder: Path,
    gguf: Path,
    precisions: Sequence[str] = PRECISIONS,
    ways: Sequence[str] = WAYS,
    window: int = WINDOW,
    max_windows: int | None = None,
    threads: int | None = None,
    others: Mapping[str, WindowLogits] | None = None,
    text: str | None = None,
    progress: Progress | None = None,
) -> FidelityResult:
    """Every system's figures against the float64 reference of `gguf` (the GGUF `folder` was
    converted from): chatapp at each of `precisions` read each of `ways`, then `others`."""
    report = progress or (lambda _m: None)
    engines = {
        p: Engine(folder, threads=threads, max_context=window, precision=p) for p in precisions
    }
    first = next(iter(engines.values()))
    if first.precision_in_effect is None:  # no GGUF kernels: the precisions are one system
        engines = {"": first}
    cut = text_windows(first, text if text is not None else fidelity_text(), window)
    cut = cut[:max_windows] if max_windows else cut
    report(f"reading the float64 reference of {gguf.name}")
    try:
        reference = ReferenceModel(gguf)
    except Exception as exc:  # gguf-py raises many kinds for a file that is not a GGUF
        raise EngineError(f"{gguf.name} cannot be read as a GGUF ({first_line(exc)}).") from exc
    if reference.head.shape[0] != first.info.vocab_size:
        raise EngineError(
            f"{gguf.name} is not the GGUF {first.info.name} was converted from (a vocabulary "
            f"of {reference.head.shape[0]} tokens, the folder's {first.info.vocab_size})."
        )
    tallies: dict[str, FidelityTally] = {"float64 reference": FidelityTally()}
    scored = scored_positions(window)
    for index, ids in enumerate(cut):
        report(f"window {index + 1} of {len(cut)}: the float64 reference")
        ref = reference.logits(ids)[scored.start : scored.stop]
        targets = ids[scored.start + 1 : scored.stop + 1]
        tallies["float64 reference"].add(ref, ref, targets)
        for precision, engine in engines.items():
            for way in ways:
                name = _system(precision, way)
                report(f"window {index + 1} of {len(cut)}: {name}")
                logits = engine_window_logits(engine, ids, way)
                tallies.setdefault(name, FidelityTally()).add(ref, logits, targets)
        for name, logits_of in (others or {}).items():
            tallies.setdefault(name, FidelityTally()).add(ref, logits_of(index, ids), targets)
    rows = tuple(FidelityRow(name, tally.metrics()) for name, tally in tallies.items())
    return FidelityResult(
        model=first.info.name,
        kernels=first.model.kernels,
        text=TEXT_SOURCE if text is None else "the text given",
        tokens=len(first.tokenizer.encode(text if text is not None else fidelity_text())),
        window=window,
        windows=len(cut),
        rows=rows,
    )


def llama_cpp_logits(python: str, gguf: Path, threads: int | None) -> WindowLogits:
    """llama.cpp's logits of a window, the scored rows of one batch with all logits kept, in a
    process of `python` (which has llama-cpp-python): engine/bench/llamacpp_logits.py."""

    def logits_of(_index: int, ids: Sequence[int]) -> np.ndarray:
        scored = scored_positions(len(ids))
        try:
            rows = llama_logits(python, str(gguf), [ids], scored.start, scored.stop, threads or 2)
        except (OSError, RuntimeError) as exc:
            raise EngineError(f"llama.cpp's logits could not be read: {first_line(exc)}") from exc
        return np.asarray(rows[0])

    return logits_of


def _system(precision: str, way: str) -> str:
    label = PRECISION_LABELS.get(precision)
    return f"chatapp {label}, {way}" if label else f"chatapp, {way}"


def markdown_table(result: FidelityResult) -> str:
    """The figures as a Markdown table ready to paste, with a line on what was measured."""
    lines = [
        f"**{result.model}** ({result.kernels}): {result.text}, {result.tokens} tokens; "
        f"{result.windows} windows of {result.window} tokens, the second half of each scored "
        f"({result.rows[0].metrics.positions} positions) against the float64 reference.",
    ]
    if result.note:
        lines.append(result.note)
    lines += [
        "",
        "| system | mean KLD | 99th pct KLD | top-1 agreement | perplexity |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result.rows:
        m = row.metrics
        lines.append(
            f"| {row.system} | {m.mean_kld:.3g} | {m.p99_kld:.3g} | "
            f"{m.top1_agreement * 100:.2f}% | {m.perplexity:.4f} |"
        )
    return "\n".join(lines)
