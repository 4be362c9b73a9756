"""Reading tool calls out of an answer's text as it grows: content, or calls and their arguments.

The constrained calls are compact JSON with the name first (`{"name":"f","arguments":{...}}`),
each in the model's own wrapping (a prefix and a suffix), several of them one per line. So the
name is known once its closing quote arrives, and the arguments are the characters of one JSON
value, told apart from what follows by counting brackets outside strings. The arguments a
finished answer reports are those characters as they were streamed: a call reads the same
streamed or not.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, replace
from typing import Literal

from chatapp.engine.text.chat import ToolCall

CALL_SEPARATOR = "\n"  # between two calls of one answer


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
    index: int = 0  # of the call in the answer (OpenAI's tool_calls[].index)


class ToolCallStream:
    """Turns the answer's text, as it grows, into content or tool call pieces."""

    def __init__(self, prefix: str, suffix: str, arguments_key: str) -> None:
        self.suffix = suffix
        name = r'\{"name":"((?:[^"\\]|\\.)*)","' + re.escape(arguments_key) + '":'
        self._first = re.compile(re.escape(prefix) + name)
        self._next = re.compile(re.escape(CALL_SEPARATOR + prefix) + name)
        self._opening = prefix + '{"name":"'
        self.text = ""
        self.mode: Literal["undecided", "content", "call"] = "undecided"
        self.sent = 0  # characters of `text` already read into pieces
        self.done: list[ToolCall] = []
        self.call: ToolCall | None = None  # the call whose arguments are arriving
        self.arguments = ""  # of that call, as sent so far
        self._state: Literal["head", "arguments", "tail"] = "head"
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def push(self, text: str) -> list[StreamPiece]:
        self.text += text
        if self.mode == "undecided":
            if len(self.text) < len(self._opening) and self._opening.startswith(self.text):
                return []  # could still become a call
            self.mode = "call" if self.text.startswith(self._opening) else "content"
        if self.mode == "content":
            piece, self.sent = self.text[self.sent :], len(self.text)
            return [StreamPiece(content=piece)] if piece else []
        return self._scan()

    def finish(self) -> list[StreamPiece]:
        if self.mode == "undecided":
            self.mode = "content"
            return [StreamPiece(content=self.text)] if self.text else []
        if self.mode == "content":
            return []
        pieces = self._scan()
        if self.call is None and not self.done:  # no call after all (e.g. a JSON answer)
            self.mode = "content"
            return [StreamPiece(content=self.text)] if self.text else []
        return pieces

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls so far, with the ids their stream announced: none for text; a call cut
        short (by max_tokens) keeps its unfinished arguments, as OpenAI's API does."""
        if self.mode != "call":
            return ()
        cut = (replace(self.call, arguments=self.arguments),) if self.call is not None else ()
        return (*self.done, *cut)

    def _scan(self) -> list[StreamPiece]:
        pieces: list[StreamPiece] = []
        while True:
            if self._state == "head":
                head = (self._next if self.done else self._first).match(self.text, self.sent)
                if head is None:
                    return pieces
                self.call = ToolCall(new_call_id(), json.loads(f'"{head.group(1)}"'), "")
                start = StreamPiece(
                    call_id=self.call.id, name=self.call.name, arguments="", index=len(self.done)
                )
                pieces.append(start)
                self.sent, self._state = head.end(), "arguments"
                self._depth, self._in_string, self._escaped = 0, False, False
            elif self._state == "arguments":
                end, complete = self._arguments_end()
                if end > self.sent:
                    more = self.text[self.sent : end]
                    pieces.append(StreamPiece(arguments=more, index=len(self.done)))
                    self.arguments += self.text[self.sent : end]
                    self.sent = end
                if not complete:
                    return pieces
                self._state = "tail"
            else:
                tail = "}" + self.suffix
                if len(self.text) - self.sent < len(tail):
                    return pieces
                assert self.call is not None
                self.done.append(replace(self.call, arguments=self.arguments))
                self.call, self.arguments = None, ""
                self.sent += len(tail)
                self._state = "head"

    def _arguments_end(self) -> tuple[int, bool]:
        """How far the arguments' JSON goes in the text so far, and whether it is complete."""
        for i in range(self.sent, len(self.text)):
            ch = self.text[i]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth < 0:  # the call's own "}": a value without brackets ended
                    return i, True
                if self._depth == 0:
                    return i + 1, True
        return len(self.text), False
