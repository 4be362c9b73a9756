"""`python -m tests.server.slow_pass_cli serve ...`: the real command line, with every forward
pass slowed by 50 ms *inside* the pass (after its weight files are checked and held): a prompt
or a step of one loop, and a batched step of the server's slots. So a test can change a weight
file while a pass is reading it. With CHATAPP_TEST_NO_LEASES=1 no read lease can be had (as on
NFS or for another user's file), so only the SIGBUS net stands between a cut and the process."""

from __future__ import annotations

import errno
import os
import sys
import time
from typing import Any

from chatapp.cli.main import main
from chatapp.engine import mapped_weights
from chatapp.engine.loops import KVLoop
from chatapp.engine.slots import SlotBatch


def no_lease(_fd: int) -> None:
    raise OSError(errno.EAGAIN, "no lease here (test)")


def _slowed(method: Any) -> Any:
    def slowed(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)
        return method(*args, **kwargs)

    return slowed


if __name__ == "__main__":
    if os.environ.get("CHATAPP_TEST_NO_LEASES") == "1":
        mapped_weights._lease = no_lease  # type: ignore[assignment]
    KVLoop._forward_ids = _slowed(KVLoop._forward_ids)  # type: ignore[method-assign]
    SlotBatch._run = _slowed(SlotBatch._run)  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
