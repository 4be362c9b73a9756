"""Tool calling: prompting for tools, constraining the call, and reading it back.

Models whose chat template describes tools (Qwen 2.5/3, Llama 3.1+, Hermes-style templates) get
the tools through their template and answer in their own format: Qwen's
`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, Llama's bare
`{"name": ..., "parameters": ...}`. Other models get the tools described in the system prompt
and answer with a bare `{"name": ..., "arguments": ...}` object, as llama.cpp's server does.

Either way the calls are constrained by a grammar (chatapp/engine/structured/constraints.py): with
tool_choice "required" or a named function the answer must be valid calls (one, or up to
MAX_PARALLEL_CALLS one per line with parallel_tool_calls); with "auto" it may instead be free
text that does not start like a call, or the JSON a response_format asks for. So a call always
parses, and its arguments always match the tool's parameter schema, read as llama.cpp reads
one (chatapp/engine/structured/json_schema.py: an object admits only the properties it lists).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from chatapp.engine.structured.constraints import ConstraintError, OutputFormat, lark_json
from chatapp.engine.structured.tool_stream import CALL_SEPARATOR, ToolCallStream
from chatapp.engine.structured.tool_stream import StreamPiece as StreamPiece  # the server's import
from chatapp.engine.text.chat import Message, ToolCall

ChoiceMode = Literal["auto", "none", "required", "named"]
ANY_OBJECT: dict[str, Any] = {"type": "object"}
MAX_PARALLEL_CALLS = 8  # in one answer, with parallel_tool_calls


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
    parallel: bool = False  # several calls in one answer (OpenAI's parallel_tool_calls)


NO_TOOLS = ToolChoice("none")  # a request without tools


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


def argument_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameters as the schema of its arguments, which are always a JSON object:
    a schema without a type gets "object"; one of another type is refused (ConstraintError),
    as OpenAI refuses it."""
    kind = parameters.get("type")
    if kind is None:
        return {**parameters, "type": "object"}
    if kind == "object" or kind == ["object"]:
        return dict(parameters)
    raise ConstraintError(
        f'A tool\'s parameters must describe a JSON object ("type": "object"), not {kind!r}.'
    )


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
    def output_format(self, answer: OutputFormat | None = None) -> OutputFormat | None:
        """The grammar of the answer: a call (several, one per line, with `parallel`), or
        with tool_choice "auto" free text instead, or the JSON `answer` when one is asked for
        (response_format)."""
        if not self.active:
            return None
        named = [t for t in self.tools if self.choice.mode != "named" or t.name == self.choice.name]
        rules = [self._calls_rule(), *self._call_rules(named)]
        if self.choice.mode == "auto" and answer is not None:
            schema = answer.schema if answer.kind == "json_schema" else ANY_OBJECT
            assert schema is not None
            rules.insert(0, "start: answer | calls")
            rules.append(f"answer: {lark_json(schema, answer.strict)}")
        elif self.choice.mode == "auto":
            rules[0:0] = ["start: TEXT | calls", self._text_rule()]
        else:
            rules.insert(0, "start: calls")
        return OutputFormat.from_lark("\n".join(rules))

    def _calls_rule(self) -> str:
        if not self.choice.parallel:
            return "calls: call"
        more = MAX_PARALLEL_CALLS - 1
        return f"calls: call ({_lark_string(CALL_SEPARATOR)} call){{0,{more}}}"

    def _call_rules(self, tools: Sequence[Tool]) -> list[str]:
        """One rule per tool, its arguments a JSON schema of their own: a `$ref` in them
        resolves against the tool's parameters, as the client wrote them."""
        fmt = self.format
        names = [f"call_{i}" for i in range(len(tools))]
        rules = ["call: " + " | ".join(names)]
        for rule, tool in zip(names, tools, strict=True):
            # `{"name":"f","arguments":` cut where JSON's own lexemes end, so that the lexer
            # can still take a `{` as the start of a JSON answer (response_format) instead.
            head = ["{", '"name"', ":", json.dumps(tool.name), ",", f'"{fmt.arguments_key}"', ":"]
            parts = [fmt.prefix, *head] if fmt.prefix else head
            body = lark_json(argument_schema(tool.parameters), tool.strict)
            tail = ["}", fmt.suffix] if fmt.suffix else ["}"]
            rules.append(
                f"{rule}: " + " ".join([*map(_lark_string, parts), body, *map(_lark_string, tail)])
            )
        return rules

    def _text_rule(self) -> str:
        """Free text that does not start like a call (one that does must be a valid call)."""
        opener = self.format.prefix or "{"
        return f"TEXT: /(.|\\n)+/ & ~/{_regex_literal(opener)}(.|\\n)*/"

    # ---- reading the answer -----------------------------------------------------------
    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """(content, calls): the answer's text when it is not a call, else "" and the calls,
        read as the stream reads them."""
        if not self.active:
            return text, []
        stream = self.stream()
        stream.push(text)
        stream.finish()
        calls = list(stream.calls())
        return ("", calls) if calls else (text, [])

    def stream(self) -> ToolCallStream:
        fmt = self.format
        return ToolCallStream(fmt.prefix, fmt.suffix, fmt.arguments_key)


def _lark_string(text: str) -> str:
    return json.dumps(text)


_REGEX_META = set("\\.+*?()|[]{}^$#&-~/")


def _regex_literal(text: str) -> str:
    """`text` as a literal in a Lark /regex/ (Rust regex syntax refuses needless escapes)."""
    escaped = (f"\\{c}" if c in _REGEX_META else c for c in text)
    return "".join(escaped).replace("\n", "\\n")


# ---- as people read them -------------------------------------------------------------
def pretty_arguments(arguments: str) -> str:
    """A call's arguments (JSON text) indented for a person; as they are if not JSON."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments


def call_markdown(call: ToolCall) -> str:
    """A call as the transcript shows it: its name, then its arguments as a JSON code block
    (a fence longer than any run of backticks in them)."""
    arguments = pretty_arguments(call.arguments)
    longest = max((len(run) for run in re.findall(r"`+", arguments)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"**Tool call: {call.name}**\n\n{fence}json\n{arguments}\n{fence}"


def with_calls(text: str, calls: Sequence[ToolCall]) -> str:
    """An answer's text with its tool calls after it, as the window and the transcript show it."""
    parts = [text.rstrip()] if text.strip() else []
    parts += [call_markdown(call) for call in calls]
    return "\n\n".join(parts) if calls else text
