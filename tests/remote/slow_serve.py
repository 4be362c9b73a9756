"""`python -m tests.remote.slow_serve MODEL_DIR`: chatapp's server in a process of its own,
slowed to 10 ms per step, so that a test can kill it mid-answer (SIGKILL, no goodbye).
Prints its base URL on the first line of stdout, once the socket listens (printed after bind()
alone, a client that connected at once was refused: the suite failed on a fresh clone)."""

from __future__ import annotations

import sys

from chatapp.engine.engine import Engine
from chatapp.server.app import build_app
from chatapp.server.runner import base_url, bind, serve_forever
from chatapp.server.worker import EngineWorker
from tests.serving import slow_down


def main() -> None:
    engine = Engine(sys.argv[1], threads=1)
    slow_down(engine, 0.01)
    sock = bind("127.0.0.1", 0)
    url = base_url(sock)
    app = build_app(EngineWorker(engine, "iobinding"))
    serve_forever(app, sock, on_start=lambda: print(url, flush=True))


if __name__ == "__main__":
    main()
