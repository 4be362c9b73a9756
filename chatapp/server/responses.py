"""Response bodies and stream chunks in OpenAI's shapes (chat and legacy completions).

A `Reply` turns the worker's events into one endpoint's bodies and stream chunks; the HTTP
side (app.py) reads the events the same way for every endpoint (the Responses API's reply is
in responses_output.py)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatapp.engine.structured.tool_calls import StreamPiece
from chatapp.engine.text.chat import ToolCall
from chatapp.server.errors import ApiError
from chatapp.server.events import Delta, Done, TokenOut
from chatapp.server.request_body import GenerationRequest


class Reply(Protocol):
    """One request's answer in an endpoint's shapes, built from the worker's events. A request
    of n choices (chat and completions) has events for choices 0..n-1 (`index`)."""

    def opening(self) -> list[bytes]:
        """A stream's first events, once the request runs."""
        ...

    def delta(self, event: Delta, index: int = 0) -> list[bytes]:
        """A stream's events for more of the answer."""
        ...

    def closing(self, done: Done, index: int = 0, last: bool = True) -> list[bytes]:
        """A stream's events when a choice ends; `last`: the last choice to end (the stream's
        last events)."""
        ...

    def failure(self, error: ApiError) -> list[bytes]:
        """A stream's last events when the answer fails after the status line went out."""
        ...

    def add(self, event: Delta, index: int = 0) -> None:
        """More of a whole (not streamed) answer."""
        ...

    def whole(self, done: Done, *others: Done) -> dict[str, Any]:
        """The whole answer's body (`others`: how choices 1..n-1 ended)."""
        ...


class ChatReply:
    """/v1/chat/completions and /v1/completions: one `Answer` per choice, as bodies and chunks
    (the choices share the id; usage counts the prompt once and the tokens of every choice)."""

    def __init__(self, request: GenerationRequest, model: str, chat: bool = True) -> None:
        first = Answer(request, model, chat)
        self.answers = [first] + [
            Answer(request, model, chat, id=first.id, created=first.created, index=i)
            for i in range(1, request.n)
        ]
        self.dones: dict[int, Done] = {}

    def opening(self) -> list[bytes]:
        firsts = (answer.first_chunk() for answer in self.answers)
        return [sse(first) for first in firsts if first is not None]

    def delta(self, event: Delta, index: int = 0) -> list[bytes]:
        return [sse(self.answers[index].delta_chunk(event.text, event.tokens, event.tool))]

    def closing(self, done: Done, index: int = 0, last: bool = True) -> list[bytes]:
        self.dones[index] = done
        answer = self.answers[index]
        out = [sse(answer.last_chunk(done))]
        if not last:
            return out
        if answer.request.include_usage:
            out.append(sse(answer.usage_chunk(*(self.dones[i] for i in sorted(self.dones)))))
        return [*out, sse("[DONE]")]

    def failure(self, error: ApiError) -> list[bytes]:
        return [sse(error.body()), sse("[DONE]")]

    def add(self, event: Delta, index: int = 0) -> None:
        self.answers[index].delta_chunk(event.text, event.tokens, event.tool)

    def whole(self, done: Done, *others: Done) -> dict[str, Any]:
        dones = (done, *others)
        choices = [answer.choice(d) for answer, d in zip(self.answers, dones, strict=True)]
        return {
            **self.answers[0].head("whole"),
            "choices": choices,
            "usage": usage(*dones),
            "chatapp": done.figures,  # choice 0's; a stream sends each choice's with its end
        }


@dataclass
class Answer:
    """One choice being built: an id, a creation time, and what came so far."""

    request: GenerationRequest
    model: str
    chat: bool
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    index: int = 0  # the choice's
    text: str = ""
    tokens: list[TokenOut] = field(default_factory=list)

    def __post_init__(self) -> None:
        prefix = "chatcmpl" if self.chat else "cmpl"
        self.id = self.id or f"{prefix}-{secrets.token_hex(12)}"

    # ---- streaming ----------------------------------------------------------------
    def first_chunk(self) -> dict[str, Any] | None:
        """Chat streams open with the role (as OpenAI's do); completions have none."""
        if not self.chat:
            return None
        return self._chunk({"role": "assistant", "content": ""}, None, None)

    def delta_chunk(
        self, text: str, tokens: Sequence[TokenOut], tool: StreamPiece | None = None
    ) -> dict[str, Any]:
        offset = len(self.text)
        self.text += text
        self.tokens.extend(tokens)
        logprobs = self._logprobs(tokens, offset) if self.request.logprobs else None
        delta: Any = {"content": text} if self.chat else text
        if tool is not None:
            delta = {"tool_calls": [_call_delta(tool)]}
        return self._chunk(delta, logprobs, None)

    def last_chunk(self, done: Done) -> dict[str, Any]:
        chunk = self._chunk({} if self.chat else "", None, done.finish_reason)
        chunk["chatapp"] = done.figures
        if self.request.include_usage:
            chunk["usage"] = None  # OpenAI: usage comes in its own chunk, after this one
        return chunk

    def usage_chunk(self, *dones: Done) -> dict[str, Any]:
        return {**self.head("chunk"), "choices": [], "usage": usage(*dones)}

    # ---- whole answers --------------------------------------------------------------
    def choice(self, done: Done) -> dict[str, Any]:
        logprobs = self._logprobs(self.tokens, 0) if self.request.logprobs else None
        if not self.chat:
            return {
                "index": self.index,
                "text": self.text,
                "logprobs": logprobs,
                "finish_reason": done.finish_reason,
            }
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if done.tool_calls:  # OpenAI: no content beside the calls
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call(c) for c in done.tool_calls],
            }
        return {
            "index": self.index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": done.finish_reason,
        }

    def head(self, kind: str) -> dict[str, Any]:
        if self.chat:
            obj = "chat.completion.chunk" if kind == "chunk" else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    # ---- parts ----------------------------------------------------------------------
    def _chunk(self, delta: Any, logprobs: Any, finish: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": self.index}
        choice["delta" if self.chat else "text"] = delta
        choice["logprobs"] = logprobs
        choice["finish_reason"] = finish
        return {**self.head("chunk"), "choices": [choice]}

    def _logprobs(self, tokens: Sequence[TokenOut], offset: int) -> dict[str, Any]:
        if self.chat:
            return {"content": [_chat_entry(t) for t in tokens], "refusal": None}
        offsets, at = [], offset
        for t in tokens:
            offsets.append(at)
            at += len(t.token)
        return {
            "tokens": [t.token for t in tokens],
            "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": (
                [{tok: lp for tok, _, lp in t.top} for t in tokens]
                if self.request.answer.top_logprobs
                else None
            ),
            "text_offset": offsets,
        }


def _call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _call_delta(piece: StreamPiece) -> dict[str, Any]:
    """OpenAI's stream: the first delta of a call has its id, type, name and empty
    arguments; the ones after it add to the arguments."""
    if piece.call_id is not None:
        return {
            "index": piece.index,
            "id": piece.call_id,
            "type": "function",
            "function": {"name": piece.name, "arguments": piece.arguments or ""},
        }
    return {"index": piece.index, "function": {"arguments": piece.arguments or ""}}


def _chat_entry(t: TokenOut) -> dict[str, Any]:
    return {
        "token": t.token,
        "logprob": t.logprob,
        "bytes": list(t.bytes),
        "top_logprobs": [
            {"token": tok, "logprob": lp, "bytes": list(raw)} for tok, raw, lp in t.top
        ],
    }


def usage(done: Done, *others: Done) -> dict[str, int]:
    """The prompt once (the choices share it), the tokens of every choice."""
    completion = done.completion_tokens + sum(d.completion_tokens for d in others)
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": done.prompt_tokens + completion,
    }


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event; JSON without NaN (a stray NaN is a bug, not a value)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, allow_nan=False)
    return f"data: {text}\n\n".encode()
