"""`POST /v1/responses` answers: the response object and its stream of events.

The shapes follow the openai SDK's types (openai/types/responses): a response holds output
items, a `message` (its `output_text`) and/or `function_call`s; a stream says
`response.created`, `response.in_progress`, then for each item `output_item.added`, its
deltas (`output_text.delta`, `function_call_arguments.delta`) and its `.done` events, then
`response.completed` (or `response.incomplete` when `max_output_tokens` cut it, or `error`
and `response.failed`). The worker's events are the chat path's (worker.py): text deltas and
tool call pieces from the one tool-call parser, turned into items here. A finished response is
kept in the store for `previous_response_id` unless the request said `store: false`.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from chatapp.engine.text.chat import Message, ToolCall
from chatapp.server.errors import ApiError
from chatapp.server.events import Delta, Done
from chatapp.server.responses_request import ResponsesRequest
from chatapp.server.responses_store import ResponseStore, StoredResponse


@dataclass
class _Item:
    """One output item as it grows: a message's text or a function call's arguments."""

    kind: str  # message | function_call
    id: str
    text: str = ""  # the message's text, or the call's arguments
    call_id: str = ""
    name: str = ""
    status: str = "in_progress"

    def body(self) -> dict[str, Any]:
        if self.kind == "message":
            return {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "status": self.status,
                "content": [_text_part(self.text)] if self.status != "in_progress" else [],
            }
        return {
            "id": self.id,
            "type": "function_call",
            "status": self.status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.text,
        }


@dataclass
class ResponsesReply:
    """One response being built (app.Reply): stream events, or the whole object at the end.
    A response has one choice (the Responses API has no `n`)."""

    parsed: ResponsesRequest
    model: str
    store: ResponseStore
    id: str = field(default_factory=lambda: f"resp_{secrets.token_hex(24)}")
    created_at: int = field(default_factory=lambda: int(time.time()))
    items: list[_Item] = field(default_factory=list)
    sequence: int = 0

    # ---- a stream --------------------------------------------------------------------
    def opening(self) -> list[bytes]:
        head = self.response("in_progress")
        return [
            self._event("response.created", response=head),
            self._event("response.in_progress", response=head),
        ]

    def delta(self, event: Delta, index: int = 0) -> list[bytes]:
        piece = event.tool
        if piece is None or (piece.call_id is None and piece.arguments is None):
            text = event.text if piece is None else piece.content
            return self._more_text(text) if text else []
        out: list[bytes] = []
        if piece.call_id is not None:
            out += self._close_open()
            item = _Item("function_call", _new_id("fc"), call_id=piece.call_id)
            item.name = piece.name or ""
            out += self._open(item)
        current = self.items[-1] if self.items else None
        if piece.arguments and current is not None and current.kind == "function_call":
            current.text += piece.arguments
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=current.id,
                    output_index=len(self.items) - 1,
                    delta=piece.arguments,
                )
            )
        return out

    def closing(self, done: Done, index: int = 0, last: bool = True) -> list[bytes]:
        out = self._settle(done)
        response = self.response(_status(done), done)
        self._keep(response)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return [*out, self._event(kind, response=response)]

    def failure(self, error: ApiError) -> list[bytes]:
        failed = self.response("failed")
        failed["error"] = {"code": error.code or error.kind, "message": error.message}
        return [
            self._event("error", code=error.code, message=error.message, param=error.param),
            self._event("response.failed", response=failed),
        ]

    # ---- a whole response ------------------------------------------------------------
    def add(self, event: Delta, index: int = 0) -> None:
        self.delta(event)

    def whole(self, done: Done, *others: Done) -> dict[str, Any]:
        self._settle(done)
        response = self.response(_status(done), done)
        self._keep(response)
        return response

    # ---- the response object ---------------------------------------------------------
    def response(self, status: str, done: Done | None = None) -> dict[str, Any]:
        parsed, settings = self.parsed, self.parsed.request.answer.settings
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": parsed.instructions,
            "max_output_tokens": parsed.max_output_tokens,
            "model": self.model,
            "output": [i.body() for i in self.items] if done is not None else [],
            "parallel_tool_calls": parsed.parallel_tool_calls,
            "previous_response_id": parsed.previous_response_id,
            "store": parsed.store,
            "temperature": settings.temperature,
            "text": {"format": parsed.text_format},
            "tool_choice": parsed.tool_choice,
            "tools": list(parsed.tools),
            "top_p": settings.top_p,
            "truncation": "disabled",
            "metadata": parsed.metadata,
            "usage": None,
        }
        if done is not None:
            if status == "incomplete":
                body["incomplete_details"] = {"reason": "max_output_tokens"}
            body["completed_at"] = int(time.time()) if status == "completed" else None
            body["usage"] = {
                "input_tokens": done.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": done.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": done.prompt_tokens + done.completion_tokens,
            }
            body["chatapp"] = done.figures
        return body

    # ---- parts -------------------------------------------------------------------------
    def _more_text(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        current = self.items[-1] if self.items else None
        if current is None or current.kind != "message" or current.status != "in_progress":
            out += self._close_open()
            current = _Item("message", _new_id("msg"))
            out += self._open(current)
        current.text += text
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=current.id,
                output_index=len(self.items) - 1,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return out

    def _open(self, item: _Item) -> list[bytes]:
        self.items.append(item)
        index = len(self.items) - 1
        out = [self._event("response.output_item.added", output_index=index, item=item.body())]
        if item.kind == "message":
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        return out

    def _close_open(self, status: str = "completed") -> list[bytes]:
        if not self.items or self.items[-1].status != "in_progress":
            return []
        item, index = self.items[-1], len(self.items) - 1
        item.status = status
        where = {"item_id": item.id, "output_index": index}
        if item.kind == "message":
            out = [
                self._event(
                    "response.output_text.done",
                    **where,
                    content_index=0,
                    text=item.text,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    **where,
                    content_index=0,
                    part=_text_part(item.text),
                ),
            ]
        else:
            out = [
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item.name,
                    arguments=item.text,
                )
            ]
        out.append(self._event("response.output_item.done", output_index=index, item=item.body()))
        return out

    def _settle(self, done: Done) -> list[bytes]:
        """The calls as the worker finally parsed them, an empty message if nothing came, and
        the last item closed."""
        by_id = {i.call_id: i for i in self.items if i.kind == "function_call"}
        for call in done.tool_calls:
            item = by_id.get(call.id)
            if item is None:
                self.items.append(
                    _Item("function_call", _new_id("fc"), call.arguments, call.id, call.name)
                )
                self.items[-1].status = "completed"
            elif item.status == "in_progress":  # the one still open: its final arguments
                item.text, item.name = call.arguments, call.name
        out = [] if self.items else self._open(_Item("message", _new_id("msg")))
        return out + self._close_open(_status(done))

    def _keep(self, response: dict[str, Any]) -> None:
        if not self.parsed.store:
            return
        message = _as_message(self.items)
        self.store.put(self.id, StoredResponse(response, (*self.parsed.conversation, message)))

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        return f"event: {kind}\ndata: {text}\n\n".encode()


def _as_message(items: list[_Item]) -> Message:
    """The output as the next turn's history sees it: one assistant message."""
    text = "".join(i.text for i in items if i.kind == "message")
    calls = tuple(ToolCall(i.call_id, i.name, i.text) for i in items if i.kind == "function_call")
    return Message("assistant", text, tool_calls=calls)


def _status(done: Done) -> str:
    return "incomplete" if done.finish_reason == "length" else "completed"


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"
