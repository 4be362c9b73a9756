"""llama.cpp on the same GGUF, in its own process, measured the same way as the loops.

llama-cpp-python is an optional extra (`[llamacpp]`; it compiles llama.cpp for ~10 minutes), so
`make test` does not install it. The child runs with llama.cpp's own defaults: the caller's
environment as it is, so with no OMP_WAIT_POLICY set libgomp spins its idle threads a while
(GOMP_SPINCOUNT, 300,000 rounds) and then sleeps. Forcing PASSIVE made llama.cpp 3.4x slower on
a quiet machine and the comparison unfair; a busy machine is reported as busy instead
(run.py). The child says which OpenMP settings it got, and the report names them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from chatapp.engine.bench import llamacpp_child
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats

INSTALL_HINT = (
    "pip install 'chatapp[llamacpp]' (compiles llama.cpp, ~10 minutes), or name a Python that "
    "has llama-cpp-python with --peer-python"
)
# A crash is not a missing install: llama.cpp's build did not run here (seen: its AMX path).
CRASH_HINT = (
    "llama-cpp-python is installed but crashed; a build for another CPU, or one whose AMX path "
    'faults on this machine (seen on a virtual machine), does this: docs/engine.md, "Measured on '
    'a memory-bound Intel Xeon", names a build without AMX (--peer-python picks another Python)'
)
# What OpenMP does with no OMP_WAIT_POLICY: libgomp spins GOMP_SPINCOUNT rounds, then sleeps.
DEFAULT_WAIT_POLICY = "libgomp default (spin 300,000 rounds, then sleep)"
OMP_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def describe_wait_policy(settings: dict[str, str | None]) -> str:
    """The OpenMP wait policy a child ran with, in words: the variables set, or the default."""
    named = [f"{key}={settings[key]}" for key in OMP_SETTINGS if settings.get(key) is not None]
    if settings.get("OMP_WAIT_POLICY") is None:
        named.insert(0, DEFAULT_WAIT_POLICY)
    return ", ".join(named)


class LlamaCppPeer:
    """A llama.cpp child process holding one GGUF; one greedy fixed-length run at a time."""

    def __init__(
        self,
        gguf: Path,
        threads: int | None,
        n_ctx: int,
        python: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        if not gguf.is_file():
            raise EngineError(f"llama.cpp needs the GGUF file; {gguf} does not exist.")
        env = dict(os.environ)  # llama.cpp's own defaults: nothing added or removed
        self.wait_policy = describe_wait_policy({k: env.get(k) for k in OMP_SETTINGS})
        self.timeout_s = timeout_s
        self.process = subprocess.Popen(
            [python or sys.executable, llamacpp_child.__file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        config = {"gguf": str(gguf), "n_ctx": n_ctx, "threads": threads or os.cpu_count() or 1}
        ready = self._ask(config)
        if not ready.get("ready"):
            self.close()
            raise EngineError(f"llama.cpp did not start: {ready.get('error')}; {INSTALL_HINT}.")
        self.version = str(ready.get("version", "?"))
        seen = ready.get("omp")
        if isinstance(seen, dict):  # what the child itself saw, when it says
            self.wait_policy = describe_wait_policy({k: seen.get(k) for k in OMP_SETTINGS})

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()
            line = stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise EngineError(f"the llama.cpp process ended ({exc}).") from exc
        if not line:
            ending = self._ending()
            hint = CRASH_HINT if ending.startswith("killed") else INSTALL_HINT
            raise EngineError(f"the llama.cpp process ended ({ending}); {hint}.")
        try:
            answer = json.loads(line)
        except ValueError as exc:
            raise EngineError(f"llama.cpp answered something unexpected: {line[:200]!r}") from exc
        if not isinstance(answer, dict):
            raise EngineError(f"llama.cpp answered something unexpected: {line[:200]!r}")
        return answer

    def _ending(self) -> str:
        """How the child ended, in words (its output closes just before it is reaped)."""
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "it closed its output"
        if code < 0:
            try:
                return f"killed by signal {-code}, {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def run(self, ids: list[int], n: int) -> RunStats:
        answer = self._ask({"ids": ids, "n": n})
        if "error" in answer:
            raise EngineError(f"llama.cpp failed: {answer['error']}")
        stats = RunStats(mode="llamacpp", device="cpu", prompt_tokens=len(ids))
        stats.ttft_s = float(answer["ttft_s"])
        stats.latencies_s = [float(x) for x in answer["latencies_s"]]
        stats.token_ids = [int(t) for t in answer["token_ids"]]
        stats.finish_reason = "length"
        return stats

    def close(self) -> None:
        if self.process.poll() is None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LlamaCppPeer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
