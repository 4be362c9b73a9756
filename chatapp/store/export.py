"""One conversation as Markdown (for people) and as JSON (for chatapp to import again).

JSON export format, version 1
-----------------------------
UTF-8 JSON object::

    {
      "format": "chatapp-conversation",        # required, exactly this
      "version": 1,                            # required; a higher number is refused
      "exported": "2026-11-03T12:00:00.000000+00:00",
      "generator": "chatapp 0.1.0",
      "conversation": {                        # required
        "title": "Ducks",                      # required, string
        "created": "<ISO 8601 with offset>",   # optional (default: import time)
        "updated": "<ISO 8601 with offset>",   # optional (default: import time)
        "model": "SmolLM2-135M-Instruct",      # optional, string or null
        "system_prompt": "You are ...",        # optional, string (default "")
        "messages": [                          # required, in order
          {"role": "user", "content": "Hi", "created": "<ISO 8601>"},
          {"role": "assistant", "content": "Hello!", "created": "<ISO 8601>",
           "figures": {                        # optional, assistant only; each key optional
             "mode": "nocache" | "naive" | "iobinding", "device": str, "tokens_per_s": float,
             "ttft_s": float, "perplexity": float, "prompt_perplexity": float,
             "prompt_tokens": int, "reused_tokens": int, "generated_tokens": int,
             "context_length": int, "finish_reason": "eos" | "length" | "stop" | "error",
             "model": str, "h2d_bytes_per_token": float, "d2h_bytes_per_token": float},
           "alternatives": [                   # optional, assistant only: the answer's other
             {"content": "Hi!", "created": "<ISO 8601>", "figures": {...}}   # versions
           ],
           "version": 1}                       # optional: where this one sits among them all
        ]
      }
    }

"figures" has one key per field of chatapp.engine.figures.AnswerFigures (a string, a whole
number >= 0 or a number, as the field's type says): a figure added there is exported and
imported without a change here, and keeps version 1 (an older reader ignores the key).
An answer that was regenerated carries its other versions in order ("alternatives"), and
"version" places the one in "content" among them: all versions are
alternatives[:version] + [this] + alternatives[version:]. A reader that does not know these
keys imports the version shown, which is what the model saw. Each alternative counts as a
message against the import limits.
Any value shown may be null where the store has "unknown". Times carry a UTC offset. Unknown
keys are ignored: adding optional keys keeps version 1; anything an old reader would get wrong
bumps the version. `parse_json` checks everything before the store writes anything.

Imports are bounded (`ImportLimits`): a file of at most 32 MB, at most 20 000 messages of at
most 4 Mi characters each, titles and model names of at most 1 000 characters, a system prompt
of at most 1 Mi characters, whole numbers that SQLite can hold, text without lone surrogates
(which JSON can spell as escapes but UTF-8 cannot store). Anything beyond is refused with a
message naming the place; nothing is written.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, TypeGuard, cast

from chatapp import __version__
from chatapp.engine.modes import MODES, mode_label
from chatapp.store.errors import ImportFormatError, ImportTooLargeError, StoreError
from chatapp.store.models import (
    FIGURE_FLOATS,
    FIGURE_INTS,
    FIGURE_TEXTS,
    ROLES,
    Alternative,
    ConversationDraft,
    Figures,
    MessageDraft,
    Role,
    StoredConversation,
    StoredMessage,
    from_iso,
    to_iso,
)
from chatapp.units import fmt_bytes

FORMAT = "chatapp-conversation"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ImportLimits:
    file_bytes: int = 32 << 20
    messages: int = 20_000
    message_chars: int = 4 << 20
    title_chars: int = 1000
    system_prompt_chars: int = 1 << 20


LIMITS = ImportLimits()
MAX_SQLITE_INT = (1 << 63) - 1

REMOTE = "remote"  # the mode and device of a server's answer (chatapp.remote.engine)
_FINISH_LABELS = {
    "eos": "finished",
    "length": "hit the token limit",
    "stop": "stopped",
    "stop_string": "ended at a stop string",
    "error": "failed",
}


# ---------------------------------------------------------------------------------------------
# JSON out


def to_json_dict(conv: StoredConversation, exported: datetime | None = None) -> dict[str, Any]:
    info = conv.info
    messages: list[dict[str, Any]] = []
    for m in conv.messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content, "created": to_iso(m.created)}
        if m.figures is not None:
            item["figures"] = m.figures.to_dict()
        if m.alternatives:
            item["alternatives"] = [_alternative_dict(a) for a in m.alternatives]
            item["version"] = m.version
        messages.append(item)
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exported": to_iso(exported or datetime.now(UTC)),
        "generator": f"chatapp {__version__}",
        "conversation": {
            "title": info.title,
            "created": to_iso(info.created),
            "updated": to_iso(info.updated),
            "model": info.model,
            "system_prompt": info.system_prompt,
            "messages": messages,
        },
    }


def _alternative_dict(other: Alternative) -> dict[str, Any]:
    item: dict[str, Any] = {"content": other.content}
    if other.created is not None:
        item["created"] = to_iso(other.created)
    if other.figures is not None:
        item["figures"] = other.figures.to_dict()
    return item


def to_json(conv: StoredConversation, exported: datetime | None = None) -> str:
    # allow_nan=False: Figures already turned NaN into None; anything else is a bug to see.
    return json.dumps(to_json_dict(conv, exported), ensure_ascii=False, indent=2, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# JSON in


def parse_json(data: str | bytes, now: datetime | None = None) -> ConversationDraft:
    """Validate a JSON export completely; raises ImportFormatError naming the bad spot."""
    check_import_size(len(data))
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ImportFormatError(f"the file is not UTF-8 text ({exc.reason})") from exc
    try:
        # NaN/Infinity are not JSON; Python would accept them by default.
        doc = json.loads(data, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        if _is_markdown_export(data):
            raise ImportFormatError(
                "it is the Markdown transcript of a chat, written for reading. "
                "Import the chat's JSON export (.json) instead"
            ) from None
        raise ImportFormatError(
            f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        ) from exc
    except RecursionError:
        raise ImportFormatError("its JSON is nested too deeply") from None
    except ValueError:  # Python refuses integers of more than 4300 digits
        raise ImportFormatError("it holds a number with thousands of digits") from None
    return _conversation_from(doc, now or datetime.now(UTC))


def _is_markdown_export(text: str) -> bool:
    """Whether `text` starts like what to_markdown writes (a title, then the export line)."""
    head = text.lstrip("\ufeff \t\r\n").split("\n", 3)
    return (
        len(head) > 2 and head[0].startswith("# ") and head[2].startswith("*Exported from chatapp")
    )


def check_import_size(size: int) -> None:
    if size > LIMITS.file_bytes:
        raise ImportTooLargeError(
            f"This chat export is {size / 2**20:.0f} MB; chatapp imports exports of up to "
            f"{LIMITS.file_bytes >> 20} MB. Nothing was imported."
        )


def read_export_file(path: Path | str) -> bytes:
    """The bytes of a file to import; a pipe, a device or a file over the size limit is
    refused before anything is read from it."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path} is not a regular file; choose a chat export (.json).")
        check_import_size(info.st_size)
        with open(path, "rb") as fh:
            return fh.read(LIMITS.file_bytes + 1)  # a file that grew meanwhile is refused
    except OSError as exc:
        raise StoreError(f"Could not read {path}: {exc.strerror or exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ImportFormatError(f"{name} is not allowed in JSON")


def _conversation_from(doc: Any, now: datetime) -> ConversationDraft:
    top = _object(doc, "the top level")
    fmt = top.get("format")
    if fmt != FORMAT:
        raise ImportFormatError(f'"format" must be "{FORMAT}", found {_show(fmt)}')
    version = top.get("version")
    if not _is_int(version):
        raise ImportFormatError(f'"version" must be a whole number, found {_show(version)}')
    if version > FORMAT_VERSION:
        raise ImportFormatError(
            f"format version {_show(version)} comes from a newer chatapp; this one reads up to "
            f"version {FORMAT_VERSION}"
        )
    if version < 1:
        raise ImportFormatError(f"unknown format version {_show(version)}")

    conv = _object(top.get("conversation"), "conversation")
    title = _string(conv.get("title"), "conversation.title", LIMITS.title_chars)
    created = _time(conv.get("created"), "conversation.created", now)
    updated = _time(conv.get("updated"), "conversation.updated", now)
    model = _optional_string(conv.get("model"), "conversation.model", LIMITS.title_chars)
    system_prompt = _optional_string(
        conv.get("system_prompt"), "conversation.system_prompt", LIMITS.system_prompt_chars
    )
    raw_messages = conv.get("messages")
    if not isinstance(raw_messages, list):
        raise ImportFormatError(
            f"must be a list, found {_show(raw_messages)}", "conversation.messages"
        )
    _check_message_count(len(raw_messages))
    messages = tuple(
        _message_from(raw, f"conversation.messages[{i}]", now) for i, raw in enumerate(raw_messages)
    )
    _check_message_count(sum(1 + len(m.alternatives) for m in messages))
    return ConversationDraft(
        title=title,
        created=created,
        updated=updated,
        model=model,
        system_prompt=system_prompt or "",
        messages=messages,
    )


def _check_message_count(count: int) -> None:
    if count > LIMITS.messages:
        raise ImportTooLargeError(
            f"This chat export has {count} messages (other versions of answers included); "
            f"chatapp imports chats of up to {LIMITS.messages}. Nothing was imported."
        )


def _message_from(raw: Any, where: str, now: datetime) -> MessageDraft:
    obj = _object(raw, where)
    role = obj.get("role")
    if role not in ROLES:
        raise ImportFormatError(f'"role" must be "user" or "assistant", found {_show(role)}', where)
    content = _string(obj.get("content"), f"{where}.content", LIMITS.message_chars)
    created = _time(obj.get("created"), f"{where}.created", now)
    figures = None
    if obj.get("figures") is not None:
        if role != "assistant":
            raise ImportFormatError("only assistant messages have figures", where)
        figures = _figures_from(obj["figures"], f"{where}.figures")
    others: tuple[Alternative, ...] = ()
    version = 0
    if obj.get("alternatives") is not None:
        if role != "assistant":
            raise ImportFormatError("only assistant messages have other versions", where)
        others = _alternatives_from(obj["alternatives"], f"{where}.alternatives", now)
        version = obj.get("version", 0)
        if not (_is_int(version) and 0 <= version <= len(others)):
            raise ImportFormatError(
                f"must be a whole number from 0 to {len(others)}, found {_show(version)}",
                f"{where}.version",
            )
    return MessageDraft(cast(Role, role), content, figures, created, others, version)


def _alternatives_from(raw: Any, where: str, now: datetime) -> tuple[Alternative, ...]:
    if not isinstance(raw, list):
        raise ImportFormatError(f"must be a list, found {_show(raw)}", where)
    _check_message_count(len(raw))
    others = []
    for i, item in enumerate(raw):
        obj = _object(item, f"{where}[{i}]")
        content = _string(obj.get("content"), f"{where}[{i}].content", LIMITS.message_chars)
        created = _time(obj.get("created"), f"{where}[{i}].created", now)
        figures = None
        if obj.get("figures") is not None:
            figures = _figures_from(obj["figures"], f"{where}[{i}].figures")
        others.append(Alternative(content, figures, created))
    return tuple(others)


def _figures_from(raw: Any, where: str) -> Figures | None:
    obj = _object(raw, where)
    values: dict[str, Any] = {}
    for name in FIGURE_TEXTS:
        values[name] = _optional_string(obj.get(name), f"{where}.{name}", LIMITS.title_chars)
    for name in FIGURE_INTS:
        value = obj.get(name)
        if value is not None and not (_is_int(value) and 0 <= value <= MAX_SQLITE_INT):
            raise ImportFormatError(
                f"must be a whole number >= 0 or null, found {_show(value)}", f"{where}.{name}"
            )
        values[name] = value
    for name in FIGURE_FLOATS:
        value = obj.get(name)
        if value is not None and not (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            raise ImportFormatError(
                f"must be a number or null, found {_show(value)}", f"{where}.{name}"
            )
        values[name] = value
    figures = Figures(**values)
    return None if figures.is_empty() else figures


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ImportFormatError(f"must be a JSON object, found {_show(value)}", where)
    return value


def _string(value: Any, where: str, max_chars: int = 1000) -> str:
    if not isinstance(value, str):
        raise ImportFormatError(f"must be a string, found {_show(value)}", where)
    if len(value) > max_chars:
        raise ImportFormatError(
            f"is {len(value)} characters long; at most {max_chars} are imported", where
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ImportFormatError("holds a lone surrogate, which is not text", where) from None
    return value


def _optional_string(value: Any, where: str, max_chars: int = 1000) -> str | None:
    return None if value is None else _string(value, where, max_chars)


def _time(value: Any, where: str, default: datetime) -> datetime:
    if value is None:
        return default
    text = _string(value, where)
    try:
        return from_iso(text)
    except ValueError as exc:
        raise ImportFormatError(
            f"must be an ISO 8601 time with a UTC offset, found {_show(text)}", where
        ) from exc


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not None else "nothing"
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------------
# Markdown out


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
        lines += ["---", "", f"### {m.role.capitalize()} · {_when(m.created, tz)}{which}", ""]
        lines += [_closed_fences(m.content.rstrip("\n")), ""]
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
        body += [_closed_fences(other.content.rstrip("\n"))]
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
        if fig.model:
            parts.append(fig.model)
        if fig.device:
            parts.append(fig.device)
        if fig.mode:
            parts.append(f"{mode_label(fig.mode)} loop" if fig.mode in MODES else fig.mode)
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
    if fig.finish_reason:
        parts.append(_FINISH_LABELS.get(fig.finish_reason, fig.finish_reason))
    return " · ".join(parts)


def _when(when: datetime, tz: tzinfo | None) -> str:
    local = when.astimezone(tz)
    return local.strftime("%Y-%m-%d %H:%M ") + (local.strftime("%z") or "UTC")


def _one_line(text: str) -> str:
    return " ".join(text.split())
