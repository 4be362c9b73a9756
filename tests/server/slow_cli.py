"""`python -m tests.server.slow_cli serve ...`: the real `chatapp` command line, with every
forward pass slowed to 20 ms (tests/serving.slow_down), so that a test can signal it while a
stream is still running. Everything else (arguments, signals, shutdown) is chatapp's own."""

from __future__ import annotations

import sys
from typing import Any

from chatapp.cli import engine_cmds, server_cmds
from chatapp.cli.main import main
from tests.serving import slow_down


def main_slowed() -> int:
    start = engine_cmds.start_engine

    def slowed(*args: Any) -> Any:
        engine = start(*args)
        slow_down(engine, 0.02)
        return engine

    server_cmds.start_engine = slowed  # type: ignore[assignment]
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main_slowed())
