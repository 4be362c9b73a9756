"""`python -m tests.server.slow_pass_cli serve ...`: the real command line, with every forward
pass slowed by 50 ms *inside* the pass (after its weight files are checked and held), so that a
test can change a weight file while a pass is reading it."""

from __future__ import annotations

import sys
import time
from typing import Any

from chatapp.cli import engine_cmds, server_cmds
from chatapp.cli.main import main


def main_slowed() -> int:
    start = engine_cmds.start_engine

    def slowed(*args: Any) -> Any:
        engine = start(*args)
        for mode in ("naive", "iobinding"):
            loop = engine.loop(mode)
            inner = loop._forward_ids

            def forward_ids(*a: Any, _inner: Any = inner, **k: Any) -> Any:
                time.sleep(0.05)
                return _inner(*a, **k)

            loop._forward_ids = forward_ids  # type: ignore[method-assign]
        return engine

    server_cmds.start_engine = slowed  # type: ignore[assignment]
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main_slowed())
