"""A scripted HTTP server on 127.0.0.1 for the failures a real server rarely shows on cue:
malformed streams, a connection cut mid-answer, silence, redirects, and a hostile server
(`endless_tokens`, `endless_bytes`, `html_page`, `models_listing`: one that ignores
max_tokens, streams a gigabyte, lists absurd numbers, answers with an HTML error page).

Each connection's request is read and handed to the script, which returns what to do: bytes
to send, a pause, or a cut. Bounded: it serves at most `max_connections`, each socket times
out, and `close()` (always called by the fixture) ends the thread.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

Action = bytes | float | None  # bytes: send them; float: pause that long; None: cut


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Script = Callable[[Request], Iterable[Action]]  # a generator may go on for ever


@dataclass
class FakeServer:
    script: Script
    max_connections: int = 20
    requests: list[Request] = field(default_factory=list)
    sent_bytes: int = 0  # by every answer so far
    cut_by_client: int = 0  # answers the client closed before the script ended

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()

    def _serve(self) -> None:
        served = 0
        while not self._stop.is_set() and served < self.max_connections:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            served += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                request = _read_request(conn)
            except (OSError, ValueError):
                return
            self.requests.append(request)
            for action in self.script(request):
                if self._stop.is_set():
                    return
                if action is None:
                    return  # cut: close the socket mid-answer
                if isinstance(action, float):
                    self._stop.wait(action)
                    continue
                try:
                    conn.sendall(action)
                except OSError:
                    self.cut_by_client += 1
                    return
                self.sent_bytes += len(action)


def _read_request(conn: socket.socket) -> Request:
    data = b""
    deadline = time.monotonic() + 10
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk or time.monotonic() > deadline:
            raise ValueError("no request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return Request(method, path, headers, body)


# ---- building answers -------------------------------------------------------------------
def response(status: int, body: bytes, kind: str = "application/json", **headers: str) -> bytes:
    extra = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n"
        f"connection: close\r\n{extra}\r\n"
    ).encode() + body


def json_response(status: int, data: Any) -> bytes:
    return response(status, json.dumps(data).encode())


def stream_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )


def chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk of the body."""
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def sse(data: Any) -> bytes:
    """One server-sent event, before HTTP's chunked framing."""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


def event(data: Any) -> bytes:
    return chunk(sse(data))


def delta(text: str, finish: str | None = None, logprob: float | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    if logprob is not None:
        choice["logprobs"] = {"content": [{"token": text, "logprob": logprob, "bytes": None}]}
    return {"object": "chat.completion.chunk", "choices": [choice]}


END = chunk(b"")  # the last chunk of a chunked body

MODELS = json_response(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})


def with_models(answer: Script) -> Script:
    """A script that lists one model, `fake`, and answers chat requests with `answer`."""

    def script(request: Request) -> list[Action]:
        if request.path.endswith("/models"):
            return [MODELS]
        return answer(request)

    return script


# ---- a hostile server ---------------------------------------------------------------------
def endless_tokens(
    text: str = "tok", logprob: float | None = -0.5, per_batch: int = 64, pause: float = 0.0
) -> Iterator[Action]:
    """A stream that ignores max_tokens: tokens until the client closes the connection
    (`per_batch` at a time, `pause` seconds between batches)."""
    yield stream_head()
    batch = event(delta(text, logprob=logprob)) * per_batch
    while True:
        yield batch
        if pause:
            yield pause


def endless_bytes(piece: bytes, total: int = 2**30) -> Iterator[Action]:
    """A stream of `total` bytes made of `piece` (in ~1 MB chunks): comments, blank lines,
    one event's endless text... whatever `piece` holds; stops early when the client leaves."""
    yield stream_head()
    block = piece * max(1, 2**20 // len(piece))
    for _ in range(total // len(block) + 1):
        yield chunk(block)
    yield END


def html_page(status: int = 500, size: int = 0) -> list[Action]:
    """An error page as a proxy or a web framework sends it (`size`: padded to that)."""
    page = (
        b"<!DOCTYPE html>\n<html><head><title>500 Internal Server Error</title></head>\n"
        b"<body><h1>Internal Server Error</h1><p>The server encountered an internal error "
        b"and was unable to complete your request.</p></body></html>\n"
    )
    page += b" " * max(0, size - len(page))
    return [response(status, page, "text/html; charset=utf-8")]


def models_listing(**fields: Any) -> bytes:
    """GET /v1/models with one model `fake` carrying `fields` (max_model_len=2**31...)."""
    entry = {"id": "fake", "object": "model", "owned_by": "someone", **fields}
    return json_response(200, {"object": "list", "data": [entry]})


def hostile(answer: Script, listing: bytes = MODELS) -> Script:
    """`with_models`, with the model list given."""

    def script(request: Request) -> Iterable[Action]:
        if request.path.endswith("/models"):
            return [listing]
        return answer(request)

    return script
