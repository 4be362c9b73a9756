"""Binding the socket and running uvicorn, in the foreground (`chatapp serve`) or a thread."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

# A stream still open at shutdown is cut after this long (its job is cancelled too).
GRACEFUL_SHUTDOWN_S = 3


class PortUnavailable(Exception):
    """The address cannot be bound; one line for the user."""


def bind(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so a busy port is one clear line and port 0 picks one."""
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortUnavailable(
            f"Cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port."
        ) from exc
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _config(app: ASGIApp) -> uvicorn.Config:
    # uvicorn's access lines go to stdout (where `--json` prints the address); the worker logs
    # one line per request with its figures to stderr instead.
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        server_header=False,
    )


def serve_forever(app: ASGIApp, sock: socket.socket) -> None:
    """Until Ctrl+C / SIGTERM (uvicorn's own handlers in the main thread)."""
    uvicorn.Server(_config(app)).run(sockets=[sock])


@dataclass
class ServerThread:
    """A server in a background thread (tests, and later the window's toggle)."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    @classmethod
    def start(cls, app: ASGIApp, sock: socket.socket, timeout: float = 30.0) -> ServerThread:
        server = uvicorn.Server(_config(app))
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="chatapp-http", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        return cls(server, thread, base_url(sock))

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
