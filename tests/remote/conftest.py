"""A chatapp server in this process for the remote client, and one in a process to kill."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from tests.serving import Served, serving

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(varied_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(varied_model_dir, threads=1)) as s:
        yield s


@pytest.fixture(scope="module")
def reference(varied_model_dir: Path) -> Engine:
    return Engine(varied_model_dir, threads=1)


class ServerProcess:
    def __init__(self, args: list[str], timeout: float = 120.0) -> None:
        self.process = subprocess.Popen(
            args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.url = self._first_line(timeout)

    def _first_line(self, timeout: float) -> str:
        found: list[str] = []
        reader = threading.Thread(
            target=lambda: found.append(self.process.stdout.readline())  # type: ignore[union-attr]
        )
        reader.start()
        reader.join(timeout)
        if not found or not found[0].strip():
            self.stop()
            pytest.fail(f"the server did not start: {self.process.communicate()[1][-2000:]}")
        return found[0].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


@pytest.fixture
def killable_server(tiny_model_dir: Path) -> Iterator[ServerProcess]:
    server = ServerProcess([sys.executable, "-m", "tests.remote.slow_serve", str(tiny_model_dir)])
    try:
        yield server
    finally:
        server.stop()
