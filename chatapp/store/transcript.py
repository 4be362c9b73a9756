"""One conversation as Markdown, for people to read (the JSON export for chatapp to import again
is store/export.py)."""

from __future__ import annotations

import re
from datetime import datetime, tzinfo

from chatapp import __version__
from chatapp.engine.guards import PRECISION_LABELS
from chatapp.engine.modes import MODES, mode_label
from chatapp.engine.structured.tool_calls import with_calls
from chatapp.store.models import Alternative, Figures, StoredConversation, StoredMessage
from chatapp.units import fmt_bytes

REMOTE = "remote"  # the mode and device of a server's answer (chatapp.remote.engine)
_FINISH_LABELS = {
    "eos": "finished",
    "length": "hit the token limit",
    "stop": "stopped",
    "stop_string": "ended at a stop string",
    "tool_calls": "called a tool",
    "error": "failed",
}


def to_markdown(conv: StoredConversation, tz: tzinfo | None = None) -> str:
    """A readable transcript; times in `tz` (default: this computer's local time)."""
    info = conv.info
    lines = [f"# {_one_line(info.title) or 'Untitled'}", ""]
    meta = [f"{len(conv.messages)} messages", f"started {_when(info.created, tz)}"]
    if info.model:
        meta.append(f"model {info.model}")
    lines += [f"*Exported from chatapp {__version__} · {' · '.join(meta)}*", ""]
    if info.system_prompt.strip():
        lines += ["**System prompt**", ""]
        lines += [f"> {line}".rstrip() for line in info.system_prompt.strip().splitlines()]
        lines.append("")
    for m in conv.messages:
        count = len(m.alternatives) + 1
        which = f" · version {m.version + 1} of {count}" if count > 1 else ""
        role = m.role.capitalize()
        if m.role == "tool":
            role = f"Tool result: {m.tool_name or m.tool_call_id}"
        lines += ["---", "", f"### {role} · {_when(m.created, tz)}{which}", ""]
        lines += [_closed_fences(with_calls(m.content, m.tool_calls).rstrip("\n")), ""]
        if m.figures is not None:
            lines += [f"*{figures_line(m.figures)}*", ""]
        if m.alternatives:
            lines += _other_versions(m, count, tz)
    return "\n".join(lines)


def _other_versions(message: StoredMessage, count: int, tz: tzinfo | None) -> list[str]:
    """The versions not shown, each quoted: whatever Markdown an answer holds (headings, rules,
    a code fence left open) stays inside its quote and cannot look like the transcript's own."""
    lines = [f"#### Other versions ({count - 1})", ""]
    for number, other in _numbered_others(message):
        when = f" · {_when(other.created, tz)}" if other.created is not None else ""
        body = [f"**Version {number} of {count}**{when}", ""]
        body += [_closed_fences(with_calls(other.content, other.tool_calls).rstrip("\n"))]
        if other.figures is not None:
            body += ["", f"*{figures_line(other.figures)}*"]
        lines += [f"> {line}" if line else ">" for line in "\n".join(body).split("\n")]
        lines.append("")
    return lines


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def _closed_fences(text: str) -> str:
    """`text` with a code fence it leaves open closed (CommonMark's rules for fences at the
    top level): an open fence would swallow the rest of the transcript."""
    opened = ""
    for line in text.split("\n"):
        match = _FENCE.fullmatch(line)
        if match is None:
            continue
        fence, rest = match.groups()
        if not opened:
            if not (fence[0] == "`" and "`" in rest):  # an info string holds no backtick
                opened = fence
        elif fence[0] == opened[0] and len(fence) >= len(opened) and not rest.strip():
            opened = ""
    return f"{text}\n{opened}" if opened else text


def _numbered_others(message: StoredMessage) -> list[tuple[int, Alternative]]:
    """The other versions of an answer with their numbers among all versions (1-based)."""
    return [
        (i + 1 if i < message.version else i + 2, other)
        for i, other in enumerate(message.alternatives)
    ]


def figures_line(fig: Figures) -> str:
    """One line of figures; unknown ones are left out."""
    parts: list[str] = []
    if REMOTE in (fig.mode, fig.device):  # a server's answer: its loop and device are its own
        parts.append(f"remote · {fig.model}" if fig.model else "remote server")
    else:
        if fig.written_by:
            parts.append(fig.written_by)
        if fig.device:
            parts.append(fig.device)
        if fig.mode:
            parts.append(f"{mode_label(fig.mode)} loop" if fig.mode in MODES else fig.mode)
        if fig.precision in PRECISION_LABELS:
            parts.append(PRECISION_LABELS[fig.precision])
    if fig.tokens_per_s is not None:
        parts.append(f"{fig.tokens_per_s:.1f} tokens/s")
    if fig.ttft_s is not None:
        parts.append(f"TTFT {fig.ttft_s * 1000:.0f} ms")
    if fig.perplexity is not None:
        parts.append(f"perplexity {fig.perplexity:.2f}")
    if fig.prompt_perplexity is not None:
        parts.append(f"prompt perplexity {fig.prompt_perplexity:.2f}")
    if fig.prompt_tokens is not None:
        parts.append(f"{fig.prompt_tokens} prompt tokens")
    if fig.generated_tokens is not None:
        parts.append(f"{fig.generated_tokens} generated tokens")
    moved = (fig.h2d_bytes_per_token or 0) + (fig.d2h_bytes_per_token or 0)
    if moved:
        parts.append(f"host↔device {fmt_bytes(moved)} per token")
    if fig.speculative_summary:
        parts.append(fig.speculative_summary)
    if fig.continued_summary:
        parts.append(fig.continued_summary)
    if fig.finish_reason:
        parts.append(_FINISH_LABELS.get(fig.finish_reason, fig.finish_reason))
    return " · ".join(parts)


def _when(when: datetime, tz: tzinfo | None) -> str:
    local = when.astimezone(tz)
    return local.strftime("%Y-%m-%d %H:%M ") + (local.strftime("%z") or "UTC")


def _one_line(text: str) -> str:
    return " ".join(text.split())
