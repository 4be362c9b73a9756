"""A `chatapp serve` in a thread of the test process, on 127.0.0.1 and a free port.

Shared by tests/server and tests/remote. The server is always stopped (and its engine
thread ended) when the `with` block ends, whatever the test did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from chatapp.engine.engine import Engine
from chatapp.server.app import ShutdownNotice, build_app
from chatapp.server.runner import ServerThread, bind
from chatapp.server.worker import EngineWorker, RequestRecord


@dataclass
class Served:
    url: str  # http://127.0.0.1:PORT (no /v1)
    worker: EngineWorker

    @property
    def api(self) -> str:
        return self.url + "/v1"

    def wait_until(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "the server never got there"
            time.sleep(0.005)

    def wait_for_records(self, count: int, timeout: float = 30.0) -> list[RequestRecord]:
        """The first `count` finished jobs, once there are that many (bounded wait)."""
        deadline = time.monotonic() + timeout
        while len(self.worker.records) < count:
            assert time.monotonic() < deadline, f"{len(self.worker.records)} of {count} jobs ended"
            time.sleep(0.01)
        return list(self.worker.records)[:count]


@contextmanager
def serving(
    engine: Engine,
    api_key: str | None = None,
    app_args: dict[str, Any] | None = None,
    **worker_args: Any,
) -> Iterator[Served]:
    """`app_args`: build_app's keyword arguments (access, aliases)."""
    worker = EngineWorker(engine, "iobinding", **worker_args)
    server = None
    shutdown = ShutdownNotice()
    try:
        app = build_app(worker, api_key, shutdown=shutdown, **(app_args or {}))
        server = ServerThread.start(app, bind("127.0.0.1", 0), on_exit=shutdown.trigger)
        yield Served(server.url, worker)
    finally:
        if server is not None:
            server.stop()
        worker.close()


def slow_down(
    engine: Engine, seconds_per_step: float, gate: threading.Event | None = None
) -> Callable[[], None]:
    """Make every forward pass of both loops take at least this long; returns the undo.

    The tiny model makes hundreds of tokens a second, faster than a client can act; a
    cancellation or queueing test needs generations that last long enough to interrupt.
    With a `gate`, each pass also waits (at most 30 s) until the gate is open.
    """
    undo = []
    for mode in ("naive", "iobinding"):
        loop = engine.loop(mode)
        original = loop.forward

        def forward(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if gate is not None:
                gate.wait(30)
            time.sleep(seconds_per_step)
            return _original(*args, **kwargs)

        loop.forward = forward  # type: ignore[method-assign]
        undo.append((loop, original))

    def restore() -> None:
        for loop, original in undo:
            loop.forward = original  # type: ignore[method-assign]

    return restore
