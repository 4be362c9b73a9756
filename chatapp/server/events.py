"""What passes between the HTTP side and the engine's threads for one request: the request
with its way back (`ServedRequest`), the events it receives (`Started`, `Delta`s, then `Done` or
`Failed`) and what became of it (`RequestRecord`). Kept apart from worker.py so that the
operators' views (operators.py) read them without importing the worker."""

from __future__ import annotations

import builtins
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatapp.server.errors import ApiError
from chatapp.server.request_body import GenerationRequest

if TYPE_CHECKING:
    from chatapp.engine.structured.tool_stream import StreamPiece
    from chatapp.engine.text.chat import ToolCall

perf = time.perf_counter


@dataclass(frozen=True)
class TokenOut:
    token: str
    bytes: bytes
    logprob: float
    top: tuple[tuple[str, builtins.bytes, float], ...]  # most likely first


@dataclass(frozen=True)
class Started:
    prompt_tokens: int


@dataclass(frozen=True)
class Delta:
    text: str
    tokens: tuple[TokenOut, ...]
    tool: StreamPiece | None = None  # a tool call's start or more of its arguments


@dataclass(frozen=True)
class Done:
    finish_reason: str  # OpenAI's: stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    figures: dict[str, Any]  # the `chatapp` extension field
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Failed:
    error: ApiError


RequestEvent = Started | Delta | Done | Failed


@dataclass
class ServedRequest:
    """One HTTP request for the engine, with the way back to its client."""

    request: GenerationRequest
    deliver: Callable[[RequestEvent], object]  # its return value is ignored
    id: int = field(default_factory=itertools.count(1).__next__)
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=perf)
    # Written by the thread that answers it, read for /slots (a display figure, no lock).
    slot: int | None = None
    started_at: float | None = None
    prompt_tokens: int = 0
    generated_tokens: int = 0

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass(frozen=True)
class RequestRecord:
    """What became of a request (kept for the log and the tests)."""

    id: int
    queued_at: float
    started_at: float
    finished_at: float
    engine_finish_reason: str  # eos | length | stop | error | cancelled (before it started)
    generated_tokens: int
    cancelled: bool
