"""A local stand-in for the Hugging Face Hub's HTTP API, for the real `huggingface_hub` client.

It speaks what chatapp.hub asks of it: the model search (/api/models?search=...), a model's
info with its siblings' LFS sizes and sha256 (/api/models/{repo}[/revision/{rev}]?blobs=true),
and `resolve` URLs that redirect to a file server answering Range requests with ETag,
X-Repo-Commit and X-Linked-Size/X-Linked-Etag headers. Faults can be injected per file:
an HTTP status, a connection dropped after some bytes (a number of times), wrong bytes.

It listens on 127.0.0.1 only, on a free port, and its URL is known only once the socket
listens (`FakeHub.start`). Point the client at it with HF_ENDPOINT.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Fault:
    status: int | None = None  # answer this instead of the file
    drop_after: int | None = None  # close the connection when the file reaches this byte
    times: int = 1 << 30  # how many requests the fault hits, then it is gone
    wrong_bytes: bool = False  # serve other bytes of the same length (a bad hash)


@dataclass
class HostedRepo:
    repo: str
    files: dict[str, bytes]
    architecture: str | None = "llama"
    context_length: int | None = 2048
    gated: bool = False
    downloads: int = 100
    no_lfs: frozenset[str] = frozenset()  # files served as plain git blobs (no sha256)
    token: str | None = None  # gated: info and files only with "Authorization: Bearer TOKEN"

    def sibling(self, name: str) -> dict[str, Any]:
        data = self.files[name]
        entry: dict[str, Any] = {"rfilename": name, "size": len(data), "blobId": "b" * 40}
        if name not in self.no_lfs:
            entry["lfs"] = {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "pointerSize": 134,
            }
        return entry


@dataclass
class FakeHub:
    repos: dict[str, HostedRepo] = field(default_factory=dict)
    faults: dict[str, Fault] = field(default_factory=dict)  # by file name, or "api" / "search"
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Range
    url: str = ""
    chunk: int = 64 << 10
    throttle_s: float = 0.0  # a pause after each chunk (a slow network, to cancel during)

    def add(self, repo: HostedRepo) -> HostedRepo:
        self.repos[repo.repo] = repo
        return repo

    # ---- the app -------------------------------------------------------------------------
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/models", self._search),
                Route("/api/models/{owner}/{name}", self._info),
                Route("/api/models/{owner}/{name}/revision/{rev}", self._info),
                Route(
                    "/{owner}/{name}/resolve/{rev}/{path:path}",
                    self._resolve,
                    methods=["GET", "HEAD"],
                ),
                Route("/cdn/{owner}/{name}/{path:path}", self._file, methods=["GET", "HEAD"]),
            ]
        )

    def _log(self, request: Request) -> None:
        self.requests.append((request.method, request.url.path, request.headers.get("range")))

    def _fault(self, key: str) -> Fault | None:
        fault = self.faults.get(key)
        if fault is None or fault.times <= 0:
            return None
        fault.times -= 1
        return fault

    @staticmethod
    def _refused(repo: HostedRepo, request: Request) -> Response | None:
        """A gated repository without the token: 401, as the hub says it (GatedRepo)."""
        if repo.token is None or request.headers.get("authorization") == f"Bearer {repo.token}":
            return None
        return JSONResponse(
            {"error": "Access to this repository is restricted."},
            401,
            headers={"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"},
        )

    def _status(self, key: str) -> Response | None:
        fault = self.faults.get(key)
        if fault is not None and fault.status is not None and self._fault(key) is not None:
            headers = {"X-Error-Code": "GatedRepo"} if fault.status == 403 else {}
            return JSONResponse({"error": f"fault {fault.status}"}, fault.status, headers=headers)
        return None

    async def _search(self, request: Request) -> Response:
        self._log(request)
        failed = self._status("search")
        if failed is not None:
            return failed
        text = request.query_params.get("search", "").lower()
        found = sorted(
            (r for r in self.repos.values() if text in r.repo.lower()),
            key=lambda r: -r.downloads,
        )
        limit = int(request.query_params.get("limit", "1000"))
        return JSONResponse(
            [
                {
                    "id": r.repo,
                    "downloads": r.downloads,
                    "likes": 3,
                    "gated": r.gated,
                    "lastModified": "2026-01-02T03:04:05.000Z",
                    "tags": ["gguf"],
                    "pipeline_tag": "text-generation",
                }
                for r in found[:limit]
            ]
        )

    async def _info(self, request: Request) -> Response:
        self._log(request)
        failed = self._status("api")
        if failed is not None:
            return failed
        repo = self.repos.get(f"{request.path_params['owner']}/{request.path_params['name']}")
        if repo is None or request.path_params.get("rev", "main") not in ("main", COMMIT):
            return JSONResponse(
                {"error": "Repository not found"}, 404, headers={"X-Error-Code": "RepoNotFound"}
            )
        refused = self._refused(repo, request)
        if refused is not None:
            return refused
        blobs = request.query_params.get("blobs") in ("1", "true", "True")
        siblings = [repo.sibling(n) if blobs else {"rfilename": n} for n in sorted(repo.files)]
        info: dict[str, Any] = {
            "id": repo.repo,
            "sha": COMMIT,
            "gated": repo.gated,
            "private": False,
            "siblings": siblings,
            "tags": ["gguf"],
        }
        if repo.architecture:
            info["gguf"] = {
                "architecture": repo.architecture,
                "context_length": repo.context_length,
            }
        return JSONResponse(info)

    def _repo_file(self, request: Request) -> tuple[HostedRepo, str, bytes] | None:
        repo = self.repos.get(f"{request.path_params['owner']}/{request.path_params['name']}")
        path = request.path_params["path"]
        if repo is None or path not in repo.files:
            return None
        return repo, path, repo.files[path]

    async def _resolve(self, request: Request) -> Response:
        self._log(request)
        found = self._repo_file(request)
        if found is None or request.path_params["rev"] not in ("main", COMMIT):
            return JSONResponse(
                {"error": "Entry not found"}, 404, headers={"X-Error-Code": "EntryNotFound"}
            )
        repo, path, data = found
        failed = self._refused(repo, request) or self._status(path)
        if failed is not None:
            return failed
        sha = hashlib.sha256(data).hexdigest()
        headers = {
            "X-Repo-Commit": COMMIT,
            "X-Linked-Size": str(len(data)),
            "X-Linked-Etag": f'"{sha}"',
            "ETag": '"' + "b" * 40 + '"',
            "Location": f"{self.url}/cdn/{repo.repo}/{path}",
        }
        return RedirectResponse(headers["Location"], 302, headers=headers)

    async def _file(self, request: Request) -> Response:
        self._log(request)
        found = self._repo_file(request)
        if found is None:
            return JSONResponse({"error": "not found"}, 404)
        _repo, path, data = found
        sha = hashlib.sha256(data).hexdigest()
        start = 0
        status = 200
        headers = {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"}
        wanted = request.headers.get("range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            start = int(first)
            end = int(last) + 1 if last else len(data)
            if start >= len(data):
                return Response(b"", 416, headers={"Content-Range": f"bytes */{len(data)}"})
            end = min(end, len(data))
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
            status = 206
        else:
            end = len(data)
        body = data[start:end]
        fault = self._fault(path) if request.method == "GET" else None
        if fault is not None and fault.wrong_bytes:
            body = bytes(len(body))
        headers["Content-Length"] = str(len(body))
        if request.method == "HEAD":
            return Response(b"", status, headers=headers)
        drop = max(0, fault.drop_after - start) if fault and fault.drop_after is not None else None
        return StreamingResponse(self._stream(body, drop), status, headers=headers)

    async def _stream(self, body: bytes, drop_after: int | None) -> AsyncIterator[bytes]:
        import asyncio

        sent = 0
        while sent < len(body):
            piece = body[sent : sent + self.chunk]
            if drop_after is not None and sent + len(piece) > drop_after:
                piece = piece[: drop_after - sent]
                if piece:
                    yield piece
                raise ConnectionResetError("fake hub: dropped mid-file")
            yield piece
            sent += len(piece)
            if self.throttle_s:
                await asyncio.sleep(self.throttle_s)


@contextmanager
def running(hub: FakeHub) -> Iterator[FakeHub]:
    """Serve `hub` on 127.0.0.1 and a free port; `hub.url` is set once the socket listens."""
    config = uvicorn.Config(
        hub.app(), host="127.0.0.1", port=0, log_level="critical", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-hub", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive(), "the fake hub did not start"
        assert time.monotonic() < deadline, "the fake hub did not start listening"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    hub.url = f"http://127.0.0.1:{port}"
    try:
        yield hub
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def write_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
