"""Binding the socket and running uvicorn, in the foreground (`chatapp serve`) or a thread."""

from __future__ import annotations

import ipaddress
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

import uvicorn
from starlette.types import ASGIApp

# Streams end at once at shutdown (ShutdownNotice); a response that still does not finish is
# cut after this long (its job is cancelled too).
GRACEFUL_SHUTDOWN_S = 3
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


class _Server(uvicorn.Server):
    """uvicorn's server, which also tells the app when it listens (`on_start`) and when it
    starts to stop (`on_exit`), and exits normally after SIGTERM / SIGINT rather than
    re-raising the signal once stopped."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_exit: Callable[[], None],
        on_start: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(config)
        self.on_exit = on_exit
        self.on_start = on_start

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # the socket listens and connections are accepted from here on
            self.on_start()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.on_exit()  # only schedules work on the event loop: safe in a signal handler

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve_forever(
    app: ASGIApp,
    sock: socket.socket,
    on_exit: Callable[[], None] = lambda: None,
    on_start: Callable[[], None] = lambda: None,
) -> None:
    """Until Ctrl+C / SIGTERM; `on_start` is called once the socket listens (announce the
    address there: a client that connects at once is answered), `on_exit` as soon as a stop
    signal arrives."""
    _Server(_config(app), on_exit, on_start).run(sockets=[sock])


@dataclass
class ServerThread:
    """A server in a background thread (tests, and later the window's toggle)."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str

    @classmethod
    def start(
        cls,
        app: ASGIApp,
        sock: socket.socket,
        timeout: float = 30.0,
        on_exit: Callable[[], None] = lambda: None,
    ) -> ServerThread:
        server = _Server(_config(app), on_exit)
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
        if isinstance(self.server, _Server):
            self.server.on_exit()
        self.thread.join(timeout)
