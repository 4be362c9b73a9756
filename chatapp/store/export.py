"""One conversation as JSON, for chatapp to import again (Markdown for people: store/transcript.py).

JSON export format, version 2 (1 without tool calls)
----------------------------------------------------
UTF-8 JSON object::

    {
      "format": "chatapp-conversation",        # required, exactly this
      "version": 2,                            # required; a higher number is refused
      "exported": "2026-11-03T12:00:00.000000+00:00",
      "generator": "chatapp 0.1.0",
      "conversation": {                        # required
        "title": "Ducks",                      # required, string
        "created": "<ISO 8601 with offset>",   # optional (default: import time)
        "updated": "<ISO 8601 with offset>",   # optional (default: import time)
        "model": "SmolLM2-135M-Instruct",      # optional, string or null
        "system_prompt": "You are ...",        # optional, string (default "")
        "settings": {"sampling": {...}, ...},  # optional: the chat's own settings, an object
                                               # as session/chat_settings.py writes it
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
           "version": 1},                      # optional: where this one sits among them all
          {"role": "assistant", "content": "",  # an answer that calls tools (version 2)
           "tool_calls": [{"id": "call_1", "name": "get_weather",
                           "arguments": "{\"city\": \"Paris\"}"}]},   # arguments: JSON text
          {"role": "tool", "content": "18 C", "tool_call_id": "call_1",  # a tool's result
           "name": "get_weather"}
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
A chat with tool calls or results is written as version 2, one without as version 1, which
every chatapp reads: an older reader refuses version 2 rather than drop the calls. The calls
(and an alternative's "tool_calls") are checked as hostile input: store/tool_fields.py.
Any value shown may be null where the store has "unknown". Times carry a UTC offset. Unknown
keys are ignored: adding optional keys keeps version 1; anything an old reader would get wrong
bumps the version. `parse_json` checks everything before the store writes anything.

Imports are bounded (`ImportLimits`): a file of at most 32 MB, at most 20 000 messages of at
most 4 Mi characters each, titles and model names of at most 1 000 characters, a system prompt
of at most 1 Mi characters and the settings (as JSON) of at most 2 Mi, whole numbers that SQLite
can hold, text without lone surrogates (which JSON can spell as escapes but UTF-8 cannot store).
Anything beyond is refused with a message naming the place; nothing is written.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard, cast

from chatapp import __version__
from chatapp.engine.text.chat import ToolCall
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
    from_iso,
    to_iso,
)
from chatapp.store.tool_fields import MAX_NAME_CHARS, call_dict, calls_from, text_field
from chatapp.units import whole_mb_up

FORMAT = "chatapp-conversation"
FORMAT_VERSION = 2  # the newest read and written
PLAIN_VERSION = 1  # written for chats without tool calls or results


@dataclass(frozen=True)
class ImportLimits:
    file_bytes: int = 32 << 20
    messages: int = 20_000
    message_chars: int = 4 << 20
    title_chars: int = 1000
    system_prompt_chars: int = 1 << 20
    # The app's own settings must come back: a tools file of up to 1 MiB (session/tool_specs.py)
    # as the session stores it, beside stops and sampling (at 1 Mi a file near its cap failed).
    settings_chars: int = 2 << 20


LIMITS = ImportLimits()
MAX_SQLITE_INT = (1 << 63) - 1


# ---------------------------------------------------------------------------------------------
# JSON out


def to_json_dict(conv: StoredConversation, exported: datetime | None = None) -> dict[str, Any]:
    info = conv.info
    messages: list[dict[str, Any]] = []
    for m in conv.messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content, "created": to_iso(m.created)}
        if m.tool_calls:
            item["tool_calls"] = [call_dict(c) for c in m.tool_calls]
        if m.tool_call_id is not None:
            item["tool_call_id"] = m.tool_call_id
            item["name"] = m.tool_name
        if m.figures is not None:
            item["figures"] = m.figures.to_dict()
        if m.alternatives:
            item["alternatives"] = [_alternative_dict(a) for a in m.alternatives]
            item["version"] = m.version
        messages.append(item)
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION if any(_has_tools(m) for m in messages) else PLAIN_VERSION,
        "exported": to_iso(exported or datetime.now(UTC)),
        "generator": f"chatapp {__version__}",
        "conversation": {
            "title": info.title,
            "created": to_iso(info.created),
            "updated": to_iso(info.updated),
            "model": info.model,
            "system_prompt": info.system_prompt,
            **_settings_item(info.settings),
            "messages": messages,
        },
    }


def _settings_item(settings: str) -> dict[str, Any]:
    """{"settings": {...}} when the chat has its own settings; what the store cannot parse
    (a hand-edited file) is left out, as the window leaves it out when opening the chat."""
    try:
        value = json.loads(settings)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply
        return {}
    return {"settings": value} if isinstance(value, dict) and value else {}


def _has_tools(item: dict[str, Any]) -> bool:
    others = item.get("alternatives", ())
    return "tool_calls" in item or "tool_call_id" in item or any("tool_calls" in a for a in others)


def _alternative_dict(other: Alternative) -> dict[str, Any]:
    item: dict[str, Any] = {"content": other.content}
    if other.tool_calls:
        item["tool_calls"] = [call_dict(c) for c in other.tool_calls]
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
            f"This chat export is {whole_mb_up(size)} MB; chatapp imports exports of up to "
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
    title = text_field(conv.get("title"), "conversation.title", LIMITS.title_chars)
    created = _time(conv.get("created"), "conversation.created", now)
    updated = _time(conv.get("updated"), "conversation.updated", now)
    model = _optional_string(conv.get("model"), "conversation.model", LIMITS.title_chars)
    system_prompt = _optional_string(
        conv.get("system_prompt"), "conversation.system_prompt", LIMITS.system_prompt_chars
    )
    settings = _settings_from(conv.get("settings"))
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
        settings=settings,
    )


def _settings_from(raw: Any) -> str:
    """The chat's settings as the store keeps them (JSON text). Their content is the session's
    to read, and it leaves out what it cannot use; here only their shape and size count."""
    if raw is None:
        return "{}"
    value = _object(raw, "conversation.settings")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (RecursionError, ValueError):
        raise ImportFormatError("is nested too deeply", "conversation.settings") from None
    if len(text) > LIMITS.settings_chars:
        raise ImportTooLargeError(
            f"This chat's settings are {len(text)} characters as JSON; chatapp imports up to "
            f"{LIMITS.settings_chars}. Nothing was imported."
        )
    text_field(text, "conversation.settings", LIMITS.settings_chars)  # no lone surrogates
    return text


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
        raise ImportFormatError(
            f'"role" must be "user", "assistant" or "tool", found {_show(role)}', where
        )
    content = text_field(obj.get("content"), f"{where}.content", LIMITS.message_chars)
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
    calls, call_id, name = _tool_fields(obj, role, where)
    return MessageDraft(
        cast(Role, role), content, figures, created, others, version, calls, call_id, name
    )


def _tool_fields(
    obj: dict[str, Any], role: str, where: str
) -> tuple[tuple[ToolCall, ...], str | None, str | None]:
    """An answer's calls, or a tool message's call id and tool name."""
    calls: tuple[ToolCall, ...] = ()
    if obj.get("tool_calls") is not None:
        if role != "assistant":
            raise ImportFormatError("only assistant messages call tools", where)
        calls = calls_from(obj["tool_calls"], f"{where}.tool_calls")
    if role != "tool":
        if obj.get("tool_call_id") is not None:
            raise ImportFormatError("only tool messages answer a call (tool_call_id)", where)
        return calls, None, None
    call_id = text_field(obj.get("tool_call_id"), f"{where}.tool_call_id", MAX_NAME_CHARS)
    name = obj.get("name")
    if name is not None:
        name = text_field(name, f"{where}.name", MAX_NAME_CHARS)
    return calls, call_id, name


def _alternatives_from(raw: Any, where: str, now: datetime) -> tuple[Alternative, ...]:
    if not isinstance(raw, list):
        raise ImportFormatError(f"must be a list, found {_show(raw)}", where)
    _check_message_count(len(raw))
    others = []
    for i, item in enumerate(raw):
        obj = _object(item, f"{where}[{i}]")
        content = text_field(obj.get("content"), f"{where}[{i}].content", LIMITS.message_chars)
        created = _time(obj.get("created"), f"{where}[{i}].created", now)
        figures = None
        if obj.get("figures") is not None:
            figures = _figures_from(obj["figures"], f"{where}[{i}].figures")
        calls: tuple[ToolCall, ...] = ()
        if obj.get("tool_calls") is not None:
            calls = calls_from(obj["tool_calls"], f"{where}[{i}].tool_calls")
        others.append(Alternative(content, figures, created, calls))
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


def _optional_string(value: Any, where: str, max_chars: int = 1000) -> str | None:
    return None if value is None else text_field(value, where, max_chars)


def _time(value: Any, where: str, default: datetime) -> datetime:
    if value is None:
        return default
    text = text_field(value, where)
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
