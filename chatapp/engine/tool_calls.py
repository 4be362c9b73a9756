"""Tool calling: prompting for tools, constraining the call, and reading it back.

Models whose chat template describes tools (Qwen 2.5/3, Llama 3.1+, Hermes-style templates) get
the tools through their template and answer in their own format: Qwen's
`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, Llama's bare
`{"name": ..., "parameters": ...}`. Other models get the tools described in the system prompt
and answer with a bare `{"name": ..., "arguments": ...}` object, as llama.cpp's server does.

Either way the call is constrained by a grammar (chatapp/engine/constraints.py): with
tool_choice "required" or a named function the answer must be exactly one valid call; with
"auto" it is free text that must not start like a call, or one valid call. So a call always
parses, and its arguments always match the tool's parameter schema.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from chatapp.engine.chat import Message, ToolCall
from chatapp.engine.constraints import OutputFormat, lark_json

ChoiceMode = Literal["auto", "none", "required", "named"]
ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(ANY_OBJECT))
    strict: bool = False

    def as_dict(self) -> dict[str, Any]:
        """OpenAI's function entry, which chat templates take as is."""
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    mode: ChoiceMode = "auto"
    name: str | None = None  # with mode "named"


@dataclass(frozen=True)
class CallFormat:
    """How a model writes a call: text around the JSON object, and the arguments' key."""

    prefix: str = ""
    suffix: str = ""
    arguments_key: str = "arguments"
    # The template reads the tools from the system message (`message['tools']`), not from a
    # `tools` variable.
    in_system: bool = False


GENERIC = CallFormat()
HERMES = CallFormat("<tool_call>\n", "\n</tool_call>")  # Qwen 2.5/3, Hermes, SmolLM3
LLAMA = CallFormat(arguments_key="parameters")  # Llama 3.1+: a bare object
# Phi-4-mini: tools in its system block; its own call tags are special tokens, which the text
# never shows, so the call is constrained to a bare object.
PHI4 = CallFormat(in_system=True)
_SYSTEM_TOOLS = ("message['tools']", 'message["tools"]', "message.tools")


def call_format(template: str, native: bool) -> CallFormat:
    if not native:
        return GENERIC
    if any(marker in template for marker in _SYSTEM_TOOLS):
        return PHI4
    if "<tool_call>" in template:
        return HERMES
    if '"parameters"' in template:
        return LLAMA
    return GENERIC


def generic_instructions(tools: Sequence[Tool]) -> str:
    """The system prompt's part for a model whose template knows no tools."""
    listed = json.dumps(
        [t.as_dict()["function"] for t in tools], ensure_ascii=False, separators=(",", ":")
    )
    return (
        f"Tools you can call (arguments as JSON schemas): {listed}\n"
        'To call one, answer only {"name":<tool name>,"arguments":<object>}.'
    )


class ToolPlan:
    """One request's tools: the prompt, the constraint, and the reading of the answer."""

    def __init__(
        self,
        tools: Sequence[Tool],
        choice: ToolChoice,
        template: str,
        native: bool,
    ) -> None:
        if choice.mode == "named" and choice.name not in {t.name for t in tools}:
            raise ValueError(f"tool_choice names '{choice.name}', which is not among the tools")
        self.tools = list(tools)
        self.choice = choice
        self.native = native
        self.format = call_format(template, native)

    @property
    def active(self) -> bool:
        """May the answer be a call? (tool_choice "none": plain text, tools not shown.)"""
        return bool(self.tools) and self.choice.mode != "none"

    def template_tools(self) -> list[dict[str, Any]] | None:
        if not (self.active and self.native) or self.format.in_system:
            return None
        return [t.as_dict() for t in self.tools]

    def messages(self, messages: Sequence[Message]) -> list[Message]:
        """The chat as the model should see it: for templates that know no tools, the tools in
        the system prompt, calls as their JSON text, tool results as user messages."""
        if self.native and self.format.in_system:
            return self._with_system_tools(messages)
        if self.native:
            return list(messages)
        out = [self._plain(m) for m in messages]
        if not self.active:
            return out
        note = generic_instructions(self.tools)
        if out and out[0].role == "system":
            return [Message("system", f"{out[0].content}\n\n{note}"), *out[1:]]
        return [Message("system", note), *out]

    def _with_system_tools(self, messages: Sequence[Message]) -> list[Message]:
        """Phi-4-mini's way: the tool list as JSON in the system message; earlier calls as
        their text (its template shows no `tool_calls`), results in its own `tool` turns."""
        out = [
            Message("assistant", self._plain(m).content) if m.tool_calls else m for m in messages
        ]
        if not self.active:
            return out
        listed = json.dumps([t.as_dict()["function"] for t in self.tools], ensure_ascii=False)
        if out and out[0].role == "system":
            return [replace(out[0], tools=listed), *out[1:]]
        return [Message("system", "", tools=listed), *out]

    def _plain(self, message: Message) -> Message:
        if message.role == "tool":
            return Message(
                "user", f"Tool result ({message.tool_call_id or 'call'}):\n{message.content}"
            )
        if message.tool_calls:
            calls = "\n".join(self.call_text(c) for c in message.tool_calls)
            return Message("assistant", "\n".join(p for p in (message.content, calls) if p))
        return message

    def call_text(self, call: ToolCall) -> str:
        try:
            arguments: Any = json.loads(call.arguments)
        except ValueError:
            arguments = {}
        body = json.dumps({"name": call.name, self.format.arguments_key: arguments})
        return f"{self.format.prefix}{body}{self.format.suffix}"

    # ---- the constraint ---------------------------------------------------------------
    def output_format(self) -> OutputFormat | None:
        if not self.active:
            return None
        named = [t for t in self.tools if self.choice.mode != "named" or t.name == self.choice.name]
        call = self._call_rule(named)
        if self.choice.mode == "auto":
            return OutputFormat.from_lark(f"start: TEXT | call\n{call}\n{self._text_rule()}")
        return OutputFormat.from_lark(f"start: call\n{call}")

    def _call_rule(self, tools: Sequence[Tool]) -> str:
        key = self.format.arguments_key
        schemas = [
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, key: dict(t.parameters)},
                "required": ["name", key],
                "additionalProperties": False,
                "x-guidance": {"lenient": not t.strict},
            }
            for t in tools
        ]
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        parts = [_lark_string(self.format.prefix)] if self.format.prefix else []
        parts.append(lark_json(schema))
        if self.format.suffix:
            parts.append(_lark_string(self.format.suffix))
        return "call: " + " ".join(parts)

    def _text_rule(self) -> str:
        """Free text that does not start like a call (one that does must be a valid call)."""
        opener = self.format.prefix or "{"
        return f"TEXT: /(.|\\n)+/ & ~/{_regex_literal(opener)}(.|\\n)*/"

    # ---- reading the answer -----------------------------------------------------------
    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """(content, calls): the answer's text when it is not a call, else "" and the call."""
        if not self.active:
            return text, []
        call = self._read_call(text)
        return ("", [call]) if call is not None else (text, [])

    def _read_call(self, text: str) -> ToolCall | None:
        body = text.strip()
        prefix, suffix = self.format.prefix.strip(), self.format.suffix.strip()
        if not body.startswith(prefix or "{"):
            return None
        body = body[len(prefix) :]
        if suffix and body.endswith(suffix):
            body = body[: -len(suffix)]
        try:
            value = json.loads(body)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        arguments = value.get(self.format.arguments_key, value.get("arguments", {}))
        return ToolCall(new_call_id(), value["name"], json.dumps(arguments, ensure_ascii=False))

    def stream(self) -> ToolCallStream:
        return ToolCallStream(self)


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class StreamPiece:
    """What a stream step adds: content text, or a call's start (id and name), or more of
    its arguments' JSON text."""

    content: str = ""
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class ToolCallStream:
    """Turns the answer's text, as it grows, into content or tool call pieces.

    The constrained call is compact JSON with the name first (`{"name":"f","arguments":{...}}`),
    so the name is known once its closing quote arrives, and from there every character but the
    final `}` (and the suffix) belongs to the arguments.
    """

    _HEAD = re.compile(r'\{"name":"((?:[^"\\]|\\.)*)","(\w+)":')

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.opener = plan.format.prefix or "{"
        self.tail = 1 + len(plan.format.suffix)  # the object's "}" and the suffix
        self.text = ""
        self.mode: Literal["undecided", "content", "call"] = "undecided"
        self.sent = 0  # characters of `text` already turned into pieces
        self.call: ToolCall | None = None
        self.arguments = ""  # of the call, as sent so far

    def push(self, text: str) -> list[StreamPiece]:
        self.text += text
        if self.mode == "undecided":
            stripped = self.text.lstrip()
            if len(stripped) < len(self.opener) and self.opener.startswith(stripped):
                return []  # could still become a call
            self.mode = "call" if stripped.startswith(self.opener) else "content"
        if self.mode == "content":
            piece, self.sent = self.text[self.sent :], len(self.text)
            return [StreamPiece(content=piece)] if piece else []
        return self._call_pieces(final=False)

    def finish(self) -> list[StreamPiece]:
        if self.mode == "undecided":
            self.mode = "content"
            return [StreamPiece(content=self.text)] if self.text else []
        if self.mode == "content":
            return []
        pieces = self._call_pieces(final=True)
        if self.call is None and self.text:  # cut before the name was complete: show the text
            self.mode = "content"
            return [StreamPiece(content=self.text)]
        return pieces

    def _call_pieces(self, final: bool) -> list[StreamPiece]:
        pieces: list[StreamPiece] = []
        body_start = self.text.find(self.opener) + len(self.plan.format.prefix)
        if self.call is None:
            head = self._HEAD.match(self.text, body_start)
            if head is None:
                return []
            self.call = ToolCall(new_call_id(), json.loads(f'"{head.group(1)}"'), "")
            pieces.append(StreamPiece(call_id=self.call.id, name=self.call.name, arguments=""))
            self.sent = head.end()
        end = len(self.text) if final and not self._complete() else len(self.text) - self.tail
        if end > self.sent:
            pieces.append(StreamPiece(arguments=self.text[self.sent : end]))
            self.arguments += self.text[self.sent : end]
            self.sent = end
        return pieces

    def calls(self) -> tuple[ToolCall, ...]:
        """The finished answer's calls, with the id its stream announced: none for text; a call
        cut short (by max_tokens) keeps its unfinished arguments, as OpenAI's API does."""
        if self.mode != "call":
            return ()
        _, calls = self.plan.parse(self.text)
        if self.call is None:
            return tuple(calls)
        if not calls:  # cut short: the arguments so far, as the stream sent them
            return (replace(self.call, arguments=self.arguments),)
        return tuple(replace(c, id=self.call.id) for c in calls)

    def _complete(self) -> bool:
        return self.text.rstrip().endswith(("}" + self.plan.format.suffix).rstrip())


def _lark_string(text: str) -> str:
    return json.dumps(text)


_REGEX_META = set("\\.+*?()|[]{}^$#&-~/")


def _regex_literal(text: str) -> str:
    """`text` as a literal in a Lark /regex/ (Rust regex syntax refuses needless escapes)."""
    escaped = (f"\\{c}" if c in _REGEX_META else c for c in text)
    return "".join(escaped).replace("\n", "\\n")
