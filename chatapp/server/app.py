"""The HTTP side: Starlette routes for /v1/chat/completions, /v1/completions and /v1/models.

Why Starlette on uvicorn: a small, well-kept ASGI pair (Starlette's only dependency is anyio;
uvicorn with h11 is pure Python), streaming responses are plain async iterators, and uvicorn
tells a handler when the client disconnects. Server-sent events are `data: ...\n\n` lines, too
simple to need a library. FastAPI would add pydantic models we do not need; aiohttp brings its
own C extensions and a second HTTP stack beside httpx2 (the client side).

Each request is watched for the client going away (uvicorn's `http.disconnect`): the job is
then cancelled, and the engine stops within one step, whether the job runs or still waits.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from chatapp.server.errors import ApiError, invalid
from chatapp.server.request_body import (
    GenerationRequest,
    check_model,
    parse_chat,
    parse_completion,
)
from chatapp.server.responses import Answer, sse
from chatapp.server.worker import Delta, Done, EngineWorker, Failed, Job, JobEvent

MAX_BODY_BYTES = 8 * 1024 * 1024


def build_app(worker: EngineWorker, api_key: str | None = None) -> ASGIApp:
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model_entry(worker)]})

    async def model(request: Request) -> Response:
        check_model(request.path_params["model"], worker.card.id)
        return JSONResponse(_model_entry(worker))

    async def chat(request: Request) -> Response:
        body = await _read_json(request)
        req = parse_chat(body, worker.default_mode, worker.card.max_context)
        return await _answer(request, worker, req, chat=True)

    async def completions(request: Request) -> Response:
        body = await _read_json(request)
        req = parse_completion(body, worker.default_mode)
        return await _answer(request, worker, req, chat=False)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _crash},
    )
    return BearerAuth(app, api_key) if api_key else app


class BearerAuth:
    """Every /v1 route needs `Authorization: Bearer <key>`; compared in constant time."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                error = ApiError(
                    401,
                    "A valid API key is needed: send the header 'Authorization: Bearer <key>'.",
                    code="invalid_api_key",
                )
                response = JSONResponse(
                    error.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _answer(
    request: Request, worker: EngineWorker, req: GenerationRequest, chat: bool
) -> Response:
    check_model(req.model, worker.card.id)
    events: asyncio.Queue[JobEvent] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    job = Job(req, lambda event: loop.call_soon_threadsafe(events.put_nowait, event))
    worker.submit(job)
    watcher = asyncio.create_task(_cancel_on_disconnect(request.receive, job))
    streaming = False
    try:
        first = await events.get()  # the job waits its turn in the queue until then
        if isinstance(first, Failed):
            raise first.error
        answer = Answer(req, worker.card.id, chat)
        if req.stream:
            streaming = True  # from here the stream owns the job and the watcher
            return EventStream(_stream(answer, events), on_close=lambda: _close(job, watcher))
        return await _whole(answer, events)
    finally:
        if not streaming:
            _close(job, watcher)


async def _whole(answer: Answer, events: asyncio.Queue[JobEvent]) -> Response:
    while True:
        event = await events.get()
        if isinstance(event, Delta):
            answer.delta_chunk(event.text, event.tokens, event.tool)
        elif isinstance(event, Done):
            return JSONResponse(answer.whole(event))
        elif isinstance(event, Failed):
            raise event.error


async def _stream(answer: Answer, events: asyncio.Queue[JobEvent]) -> AsyncIterator[bytes]:
    first = answer.first_chunk()
    if first is not None:
        yield sse(first)
    while True:
        event = await events.get()
        if isinstance(event, Delta):
            yield sse(answer.delta_chunk(event.text, event.tokens, event.tool))
        elif isinstance(event, Done):
            yield sse(answer.last_chunk(event))
            if answer.request.include_usage:
                yield sse(answer.usage_chunk(event))
            break
        elif isinstance(event, Failed):
            # The status line has gone out: the error travels in the stream (as vLLM does).
            yield sse(event.error.body())
            break
    yield sse("[DONE]")


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
            pass  # the client went away mid-send: on_close cancels the job
        finally:
            self.on_close()


async def _cancel_on_disconnect(receive: Receive, job: Job) -> None:
    """The only reader of `receive` once the body is read: waits for the client to leave."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            job.cancel()
            return


def _close(job: Job, watcher: asyncio.Task[None]) -> None:
    job.cancel()  # a no-op once the job has finished
    watcher.cancel()


async def _read_json(request: Request) -> dict[str, Any]:
    # Any content type: curl's -d says form-urlencoded; the body is what counts.
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"The request body is larger than {MAX_BODY_BYTES // 2**20} MiB.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"The request body is larger than {MAX_BODY_BYTES // 2**20} MiB.")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"The request body is not valid JSON ({exc}).") from exc
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def _model_entry(worker: EngineWorker) -> dict[str, Any]:
    card = worker.card
    return {
        "id": card.id,
        "object": "model",
        "created": 0,
        "owned_by": "chatapp",
        "max_model_len": card.max_context,  # vLLM's name for it; clients read it there
        "chatapp": {
            "device": card.device,
            "device_label": card.device_label,
            "layout": card.layout,
            "default_loop": card.default_mode,
        },
    }


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"There is no {request.url.path} here.", 405: "Method not allowed."}
    error = ApiError(exc.status_code, message.get(exc.status_code, str(exc.detail)))
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _crash(request: Request, exc: Exception) -> Response:
    lines = str(exc).strip().splitlines()
    error = ApiError(500, f"Internal error: {type(exc).__name__}: {lines[0] if lines else ''}")
    return JSONResponse(error.body(), status_code=500)
