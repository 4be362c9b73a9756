"""The HTTP side: Starlette routes for /v1/chat/completions, /v1/completions, /v1/responses
and /v1/models, and the operators' /health, /metrics and /slots (operators.py).

Why Starlette on uvicorn: a small, well-kept ASGI pair (Starlette's only dependency is anyio;
uvicorn with h11 is pure Python), streaming responses are plain async iterators, and uvicorn
tells a handler when the client disconnects. Server-sent events are `data: ...\n\n` lines, too
simple to need a library. FastAPI would add pydantic models we do not need; aiohttp brings its
own C extensions and a second HTTP stack beside httpx2 (the client side).

Each request is watched for the client going away (uvicorn's `http.disconnect`): the request is
then cancelled, and the engine stops within one step, whether it runs or still waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from chatapp.server.access import AccessGuard, BearerAuth
from chatapp.server.errors import ApiError, invalid
from chatapp.server.events import Delta, Done, Failed, RequestEvent, ServedRequest
from chatapp.server.operators import CONTENT_TYPE as METRICS_TYPE
from chatapp.server.operators import ServerCounters, slot_views
from chatapp.server.request_body import GenerationRequest, parse_chat, parse_completion
from chatapp.server.responses import ChatReply, Reply
from chatapp.server.responses_output import ResponsesReply
from chatapp.server.responses_request import parse_responses
from chatapp.server.responses_store import ResponseStore
from chatapp.server.security import AccessPolicy
from chatapp.server.worker import EngineWorker

MAX_BODY_BYTES = 8 * 1024 * 1024

log = logging.getLogger(__name__)


class ShutdownNotice:
    """Tells the open streams that the server is stopping, so that they end at once.

    uvicorn's graceful shutdown waits for open responses; a stream would run on until its
    answer ends (or the grace period cuts it without a word). `trigger` may be called from a
    signal handler or another thread: it only schedules work on each stream's event loop.
    """

    def __init__(self) -> None:
        # Reentrant: `trigger` may run in a signal handler on the thread that holds the lock.
        self._lock = threading.RLock()
        self._listeners: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = set()
        self.triggered = False

    def listen(self, loop: asyncio.AbstractEventLoop, events: asyncio.Queue[Any]) -> None:
        with self._lock:
            self._listeners.add((loop, events))
            if not self.triggered:
                return
        events.put_nowait(SHUTTING_DOWN)

    def forget(self, loop: asyncio.AbstractEventLoop, events: asyncio.Queue[Any]) -> None:
        with self._lock:
            self._listeners.discard((loop, events))

    def trigger(self) -> None:
        with self._lock:
            self.triggered = True
            listeners = list(self._listeners)
        for loop, events in listeners:
            with contextlib.suppress(RuntimeError):  # RuntimeError: that loop has closed
                loop.call_soon_threadsafe(events.put_nowait, SHUTTING_DOWN)


class _ShuttingDown:
    """The event a stream receives when the server stops."""


SHUTTING_DOWN = _ShuttingDown()
# A choice's event (its index, for a request of n choices), or the server stopping.
StreamEvent = tuple[int, RequestEvent] | _ShuttingDown


def build_app(
    worker: EngineWorker,
    api_key: str | None = None,
    *,
    access: AccessPolicy | None = None,
    aliases: tuple[str, ...] = (),
    shutdown: ShutdownNotice | None = None,
    responses: ResponseStore | None = None,
) -> ASGIApp:
    """`aliases`: more names for the one model in /v1/models (any `model` is answered by it);
    `responses`: where /v1/responses keeps finished responses (a bounded one of its own)."""
    notice = shutdown or ShutdownNotice()
    kept = responses if responses is not None else ResponseStore()

    def names() -> list[str]:
        return list(dict.fromkeys((worker.card.id, *aliases)))

    async def models(request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [_model_entry(worker, name) for name in names()]}
        )

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        if name not in names():
            raise ApiError(
                404,
                f"The model '{name[:200]}' is not served here; this server serves "
                f"'{worker.card.id}'.",
                param="model",
                code="model_not_found",
            )
        return JSONResponse(_model_entry(worker, name))

    async def chat(request: Request) -> Response:
        body = await _read_json(request)
        card = worker.card
        req = parse_chat(
            body, worker.default_mode, card.max_context, card.max_chars, card.vocab_size
        )
        return await _answer(request, worker, req, notice, lambda: ChatReply(req, worker.card.id))

    async def completions(request: Request) -> Response:
        body = await _read_json(request)
        card = worker.card
        req = parse_completion(
            body, worker.default_mode, card.max_context, card.max_chars, card.vocab_size
        )
        return await _answer(
            request, worker, req, notice, lambda: ChatReply(req, worker.card.id, chat=False)
        )

    async def create_response(request: Request) -> Response:
        body = await _read_json(request)
        card = worker.card
        parsed = parse_responses(body, worker.default_mode, card.max_context, card.max_chars, kept)
        return await _answer(
            request,
            worker,
            parsed.request,
            notice,
            lambda: ResponsesReply(parsed, worker.card.id, kept),
        )

    async def stored_response(request: Request) -> Response:
        response_id = request.path_params["response_id"]
        stored = kept.get(response_id)
        if stored is None:
            raise ApiError(
                404, f"No response with id '{response_id[:100]}' is kept here.", param="id"
            )
        if request.method == "DELETE":
            kept.delete(response_id)
            return JSONResponse({"id": response_id, "object": "response", "deleted": True})
        return JSONResponse(stored.body)

    async def health(request: Request) -> Response:
        # Open to any prober (no key): whether a request would start now, nothing else.
        return JSONResponse({"status": "ok", "state": worker.load().state})

    async def metrics(request: Request) -> Response:
        return Response(worker.counters.render(worker.load()), media_type=METRICS_TYPE)

    async def slots(request: Request) -> Response:
        client = request.client.host if request.client else ""
        if not _loopback(client):
            raise ApiError(403, "/slots answers only on this machine (localhost).")
        with_prompts = request.query_params.get("prompts", "") in ("1", "true")
        views = slot_views(
            worker.running_requests(), worker.slot_batch, worker.card.max_context, with_prompts
        )
        return JSONResponse(views)

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", stored_response, methods=["GET", "DELETE"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/slots", slots, methods=["GET"]),
    ]
    counters = worker.counters

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        counters.error(exc.status, exc.kind)
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        counters.error(exc.status_code, "invalid_request_error")
        return await _http_error(request, exc)

    async def crash(request: Request, exc: Exception) -> Response:
        counters.error(500, "server_error")
        return await _crash(request, exc)

    app: ASGIApp = Starlette(
        routes=routes,
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: crash},
    )
    if api_key:
        app = BearerAuth(app, api_key)
    return AccessGuard(app, access or AccessPolicy())


async def _answer(
    request: Request,
    worker: EngineWorker,
    req: GenerationRequest,
    notice: ShutdownNotice,
    make_reply: Callable[[], Reply],
) -> Response:
    """Queue `req` (its n choices, each a request of its own: with --parallel they decode
    together), then answer in the shape `make_reply` gives (chat, completion, response)."""
    # Any `model` is answered by the one model served, under its own id (as llama.cpp does):
    # clients send "gpt-3.5-turbo" and the like by default.
    events: asyncio.Queue[StreamEvent] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def deliver(index: int) -> Callable[[RequestEvent], object]:
        return lambda event: loop.call_soon_threadsafe(events.put_nowait, (index, event))

    served = [ServedRequest(r, deliver(i)) for i, r in enumerate(req.choices())]
    worker.submit_all(served)
    notice.listen(loop, events)
    watcher = asyncio.create_task(_cancel_on_disconnect(request.receive, served))
    streaming = False

    def close() -> None:
        _close(served, watcher)
        notice.forget(loop, events)

    try:
        first = await events.get()  # the request waits its turn in the queue until then
        if isinstance(first, _ShuttingDown):
            raise ApiError(503, SHUTDOWN_MESSAGE, code="server_shutting_down")
        if isinstance(first[1], Failed):
            raise first[1].error
        reply = make_reply()
        if req.stream:
            streaming = True  # from here the stream owns the request and the watcher
            return EventStream(_stream(reply, events, len(served), worker.counters), on_close=close)
        return await _whole(reply, events, len(served))
    finally:
        if not streaming:
            close()


SHUTDOWN_MESSAGE = "The server is shutting down; the answer was cut short."


async def _whole(reply: Reply, events: asyncio.Queue[StreamEvent], choices: int) -> Response:
    dones: dict[int, Done] = {}
    while True:
        item = await events.get()
        if isinstance(item, _ShuttingDown):
            raise ApiError(503, SHUTDOWN_MESSAGE, code="server_shutting_down")
        index, event = item
        if isinstance(event, Delta):
            reply.add(event, index)
        elif isinstance(event, Done):
            dones[index] = event
            if len(dones) == choices:
                return JSONResponse(reply.whole(*(dones[i] for i in range(choices))))
        elif isinstance(event, Failed):
            raise event.error


async def _stream(
    reply: Reply, events: asyncio.Queue[StreamEvent], choices: int, counters: ServerCounters
) -> AsyncIterator[bytes]:
    for chunk in reply.opening():
        yield chunk
    ended = 0
    while True:
        item = await events.get()
        if isinstance(item, _ShuttingDown):  # on_close cancels the request
            error = ApiError(503, SHUTDOWN_MESSAGE, code="server_shutting_down")
            counters.error(error.status, error.kind)
            pieces, last = reply.failure(error), True
        else:
            index, event = item
            if isinstance(event, Delta):
                pieces, last = reply.delta(event, index), False
            elif isinstance(event, Done):
                ended += 1
                last = ended == choices
                pieces = reply.closing(event, index, last)
            elif isinstance(event, Failed):
                # The status line has gone out: the error travels in the stream (as vLLM does).
                counters.error(event.error.status, event.error.kind)
                pieces, last = reply.failure(event.error), True
            else:
                continue
        for chunk in pieces:
            yield chunk
        if last:
            return


class EventStream(StreamingResponse):
    """A server-sent event stream that always runs `on_close`, however the stream ends.

    Starlette's own `__call__` also reads `receive` to notice a disconnect; here the request's
    watcher is the only reader, so this one just sends.
    """

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(
            chunks,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            media_type="text/event-stream",
        )
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-send: on_close cancels the request
        finally:
            self.on_close()


async def _cancel_on_disconnect(receive: Receive, served: list[ServedRequest]) -> None:
    """The only reader of `receive` once the body is read: waits for the client to leave."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            for choice in served:
                choice.cancel()
            return


def _close(served: list[ServedRequest], watcher: asyncio.Task[None]) -> None:
    for choice in served:
        choice.cancel()  # a no-op once it has finished
    watcher.cancel()


async def _read_json(request: Request) -> dict[str, Any]:
    # Any content type: curl's -d says form-urlencoded; the body is what counts.
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"The request body is larger than {MAX_BODY_BYTES // 2**20} MiB.")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                message = f"The request body is larger than {MAX_BODY_BYTES // 2**20} MiB."
                raise ApiError(413, message)
            chunks.append(chunk)
    except ClientDisconnect:  # gone mid-body: nobody to answer, one line for the log
        log.warning("a client closed the connection while sending %s", request.url.path)
        raise ApiError(499, "The client closed the connection while sending its request.") from None
    try:
        body = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"The request body is not valid JSON ({exc}).") from exc
    except RecursionError:  # 100 000 nested `[`: the parser's stack, not a crash
        raise invalid("The request body nests arrays or objects too deeply.") from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _model_entry(worker: EngineWorker, name: str) -> dict[str, Any]:
    card = worker.card
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "chatapp",
        "max_model_len": card.max_context,  # vLLM's name for it; clients read it there
        "chatapp": {
            "device": card.device,
            "device_label": card.device_label,
            "layout": card.layout,
            "default_loop": card.default_mode,
            "parallel": card.parallel,
            # The backend's card: its facts, and which figures each answer reports (or why not).
            **({"card": card.backend.as_dict()} if card.backend is not None else {}),
        },
    }


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"There is no {request.url.path} here.", 405: "Method not allowed."}
    error = ApiError(exc.status_code, message.get(exc.status_code, str(exc.detail)))
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _crash(request: Request, exc: Exception) -> Response:
    lines = str(exc).strip().splitlines()
    error = ApiError(500, f"Internal error: {type(exc).__name__}: {lines[0] if lines else ''}")
    return JSONResponse(error.body(), status_code=500)
