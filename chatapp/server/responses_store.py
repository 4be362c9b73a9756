"""The Responses API's memory: finished responses kept for `previous_response_id`, bounded.

In memory only (a restart forgets them, as `store` promises nothing more here), and bounded
three ways so that no client can grow the server: at most `max_entries` responses (the least
recently used goes first), each for at most `ttl_s` seconds, and at most `max_chars`
characters in all, conversations and response bodies (tools and schemas echoed) together (a
response that alone is larger is not kept).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chatapp.engine.text.chat import Message

MAX_ENTRIES = 100
TTL_S = 3600.0
MAX_CHARS = 32 << 20  # about 64-128 MB of Python strings at most


@dataclass(frozen=True)
class StoredResponse:
    body: dict[str, Any]  # the response object as it was sent
    messages: tuple[Message, ...]  # the conversation it ends (input and output, no instructions)

    @property
    def chars(self) -> int:
        """What it holds: the conversation's text, and the body (its tools, schema, output)."""
        text = sum(
            len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in self.messages
        )
        return text + len(json.dumps(self.body, default=str))


class ResponseStore:
    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        ttl_s: float = TTL_S,
        max_chars: int = MAX_CHARS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.max_chars = max_chars
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, StoredResponse, int]] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._entries)

    def put(self, response_id: str, stored: StoredResponse) -> bool:
        """Keep `stored`; False when it alone is larger than the store may hold."""
        chars = stored.chars
        if chars > self.max_chars:
            return False
        with self._lock:
            self._drop(response_id)
            self._entries[response_id] = (self._clock(), stored, chars)
            self._chars += chars
            self._expire()
            while len(self._entries) > self.max_entries or self._chars > self.max_chars:
                self._drop(next(iter(self._entries)))
        return True

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            self._expire()
            entry = self._entries.get(response_id)
            if entry is None:
                return None
            self._entries.move_to_end(response_id)
            return entry[1]

    def delete(self, response_id: str) -> bool:
        with self._lock:
            self._expire()
            return self._drop(response_id)

    def _drop(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self._chars -= entry[2]
        return True

    def _expire(self) -> None:
        oldest = self._clock() - self.ttl_s
        expired = [key for key, (kept_at, _, _) in self._entries.items() if kept_at < oldest]
        for key in expired:
            self._drop(key)
