"""How figures read on screen. Value labels hold bare numbers (units sit in the caption) so
that UI automation can parse them; an unknown figure (None) reads as "–"."""

from __future__ import annotations

import math

from chatapp.engine import modes
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.guards import PRECISION_LABELS
from chatapp.engine.nocache import SEQUENCE_CAP
from chatapp.units import fmt_bytes

MISSING = "–"
REMOTE = "remote"  # the "mode" of an answer from a server (chatapp.remote): its loop is unknown


def mode_label(mode: str) -> str:
    """A loop as people read it (Mode.label: "No cache", "Naive", "IO-Binding")."""
    return "remote server" if mode == REMOTE else modes.mode_label(mode)


def next_answer_loop(mode: str) -> str:
    """What choosing a loop means for the next answer (the status bar says it)."""
    text = f"The next answer uses the {mode_label(mode)} loop."
    if mode in modes.MODES and not modes.Mode(mode).caches:
        text += (
            " Every token re-reads the whole conversation, so each takes longer than the last;"
            f" answers stop at {SEQUENCE_CAP} tokens of conversation."
        )
    return text


def rate(tokens_per_s: float | None) -> str:
    return f"{tokens_per_s:.1f}" if tokens_per_s is not None and tokens_per_s > 0 else MISSING


def millis(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f}" if seconds is not None and seconds > 0 else MISSING


PERPLEXITY_CEILING = 1000.0  # above it the exact figure says nothing more than "very unlikely"


def perplexity(value: float | None) -> str:
    """Two decimals; "> 1,000" above the ceiling (1.64e+27 told a reader nothing)."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:.2f}" if value < PERPLEXITY_CEILING else f"> {PERPLEXITY_CEILING:,.0f}"


def context_usage(used: int, total: int) -> str:
    return f"{used} / {total}" if total else MISSING


FINISH_LABELS = {
    "length": "hit the token limit",
    "stop": "stopped",
    "stop_string": "ended at a stop string",
    "tool_calls": "called a tool",
    "error": "failed",
}


def describe_writer(fig: AnswerFigures) -> str:
    """ "SmolLM2 (model_gguf.onnx) · IO-Binding · CPU · 8-bit": who wrote an answer, and how."""
    parts = [
        fig.written_by,
        mode_label(fig.mode) if fig.mode else "",
        "" if fig.device == fig.mode else _device(fig.device),
        PRECISION_LABELS.get(fig.precision or "", ""),
    ]
    return " · ".join(p for p in parts if p)


def figures_line(fig: AnswerFigures, tokens: bool = True) -> str:
    """The one line under a finished answer: the model that wrote it first, then how;
    `tokens=False` leaves out its token count (the transcript shows one beside the answer's
    name when it knows what it takes of the context)."""
    parts = [
        describe_writer(fig),
        f"{rate(fig.tokens_per_s)} tok/s",
        f"TTFT {millis(fig.ttft_s)} ms",
        f"perplexity {perplexity(fig.perplexity)}",
        f"{fig.generated_tokens or 0} tokens" if tokens else "",
    ]
    if fig.transfer_bytes_per_token > 0:
        parts.append(f"host↔device {fmt_bytes(fig.transfer_bytes_per_token)}/token")
    if fig.speculative_summary:
        parts.append(fig.speculative_summary)
    if fig.continued_summary:
        parts.append(fig.continued_summary)
    if fig.finish_reason and fig.finish_reason != "eos":
        parts.append(FINISH_LABELS.get(fig.finish_reason, fig.finish_reason))
    return " · ".join(p for p in parts if p)  # a restored answer may lack mode or device


# Short names of the devices an answer records (AnswerFigures.device), as the window shows them.
DEVICE_NAMES = {
    "cpu": "CPU",
    "cuda": "CUDA GPU",
    "dml": "DirectML GPU",
    "webgpu": "WebGPU",
    "webgpu-software": "WebGPU (software)",
    "remote": "remote",
}


def _device(device: str | None) -> str:
    if device in DEVICE_NAMES:
        return DEVICE_NAMES[device]
    return device.upper() if device and len(device) <= 4 else device or ""
