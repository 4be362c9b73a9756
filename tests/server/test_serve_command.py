"""`chatapp serve` as a user runs it: refusals in one line, a real process that answers and
stops on Ctrl+C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.cli import server_cmds
from chatapp.convert import default_model
from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.engine.engine import Engine
from chatapp.engine.slots import slots_refusal
from chatapp.engine.text.chat import NO_TEMPLATE_NOTICE


def chatapp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatapp", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chatapp: error: "), out.stderr
    return lines[0]


def test_another_address_without_the_flag_is_refused() -> None:
    line = one_error_line(chatapp("serve", "--host", "0.0.0.0"))
    assert "Refusing to listen on 0.0.0.0" in line and "--allow-remote" in line


def test_the_flag_without_a_key_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CHATAPP_API_KEY"}
    line = one_error_line(chatapp("serve", "--host", "0.0.0.0", "--allow-remote", env=env))
    assert "needs an API key" in line


def test_a_busy_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(chatapp("serve", "--port", str(port)))
    assert f"Cannot listen on 127.0.0.1:{port}" in line and "--port" in line


def test_serve_answers_then_stops_on_ctrl_c(tiny_model_dir: Path) -> None:
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "chatapp", "serve", "--model", str(tiny_model_dir)),
            *("--threads", "1", "--port", "0", "--json", "--mode", "naive"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = _first_line(process, timeout=120)
        info = json.loads(started)
        assert info["url"].startswith("http://127.0.0.1:") and info["model"] == "tiny-llama"
        answer = httpx2.post(
            f"{info['url']}/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
            trust_env=False,
        ).json()
        assert answer["chatapp"]["loop"] == "naive"  # the server's default loop
        models = httpx2.get(f"{info['url']}/models", timeout=30, trust_env=False).json()
        assert models["data"][0]["chatapp"]["parallel"] == 1  # slots run on IO-Binding only
        err = stop(process, signal.SIGINT, timeout=30)
    finally:
        reap(process)
    assert process.returncode == 0, err
    assert "request 1: " in err and "Traceback" not in err
    assert err.strip().endswith("chatapp serve: stopped")


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The first stdout line, or fail after `timeout` seconds (readline alone could hang)."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if not found or not found[0]:
        process.kill()
        pytest.fail(f"chatapp serve did not start: {process.communicate()[1][-2000:]}")
    return found[0]


def serve_process(
    *args: str, module: str = "chatapp"
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    process = subprocess.Popen(
        [sys.executable, "-m", module, "serve", *args, "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, json.loads(_first_line(process, timeout=120))


def stop(process: subprocess.Popen[str], sig: signal.Signals, timeout: float = 60) -> str:
    """Sends `sig` to a serve process and returns its stderr once it has exited."""
    process.send_signal(sig)
    return process.communicate(timeout=timeout)[1]


def reap(process: subprocess.Popen[str]) -> None:
    """Kills a serve process a failed test left running."""
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_open_streams_with_an_error_and_done_then_exits_0(
    tiny_model_dir: Path, stop: signal.Signals
) -> None:
    process, info = serve_process(
        "--model", str(tiny_model_dir), "--threads", "1", module="tests.server.slow_cli"
    )
    lines: list[str] = []
    ended = threading.Event()
    got_token = threading.Event()

    def read_stream() -> None:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 400}
        with httpx2.stream(
            "POST", f"{info['url']}/chat/completions", json=body, timeout=60, trust_env=False
        ) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                    if '"content"' in line and len(lines) > 2:
                        got_token.set()
        ended.set()

    reader = threading.Thread(target=read_stream, daemon=True)
    try:
        reader.start()
        assert got_token.wait(60), lines  # tokens are streaming (400 take 8 s at 20 ms each)
        signalled = time.monotonic()
        process.send_signal(stop)
        assert ended.wait(10), lines
        stream_ended_s = time.monotonic() - signalled
        _, err = process.communicate(timeout=30)
    finally:
        reap(process)
    assert stream_ended_s < 1.0 + 0.5 * _load_slack(), stream_ended_s
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert error["code"] == "server_shutting_down" and "shutting down" in error["message"]
    assert process.returncode == 0, err
    assert "Traceback" not in err and err.strip().endswith("chatapp serve: stopped")


def _load_slack() -> float:
    """A busy shared machine delays the child's signal handling; the bound scales with load."""
    return max(0.0, os.getloadavg()[0] / (os.cpu_count() or 1) - 1.0)


def test_bad_access_options_are_one_line() -> None:
    out = chatapp("serve", "--allow-origin", "http://x.example/app")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "argument --allow-origin: expected an origin" in out.stderr
    out = chatapp("serve", "--allow-host", "http://x/")
    assert out.returncode == 2 and "argument --allow-host: expected a host name" in out.stderr
    env = {k: v for k, v in os.environ.items() if k != "CHATAPP_API_KEY"}
    line = one_error_line(chatapp("serve", "--allow-origin", "*", env=env))
    assert "needs an API key" in line


def test_serve_prepares_the_default_model_on_first_use(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """As the window does: a fresh data folder gets the bundled model converted (here the tiny
    one), then serving goes on; a prepared one is used as it is."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(default_model, "bundled_gguf", lambda: tiny_gguf)
    server_cmds._prepare_default_model()
    folder = default_model.default_model_dir()
    assert (folder / "model.onnx").is_file()
    assert "preparing the default model" in capsys.readouterr().err
    server_cmds._prepare_default_model()
    assert "preparing" not in capsys.readouterr().err


def test_the_printed_address_already_listens(tiny_model_dir: Path) -> None:
    # A client that reads the line and connects at once (no retry) used to be refused: the
    # address was printed before uvicorn listened.
    process, info = serve_process("--model", str(tiny_model_dir), "--threads", "1")
    try:
        host, port = info["url"].removeprefix("http://").removesuffix("/v1").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") and b'{"status":"ok","state":"ready"}' in reply
        err = stop(process, signal.SIGTERM)
    finally:
        reap(process)
    assert process.returncode == 0, err


def test_sigterm_right_after_start_is_a_clean_stop(tiny_model_dir: Path) -> None:
    # The address is printed before uvicorn installs its handlers: a service manager's SIGTERM
    # in between used to kill the process (status -15).
    process, _ = serve_process("--model", str(tiny_model_dir), "--threads", "1")
    err = stop(process, signal.SIGTERM)
    assert process.returncode == 0, err
    assert err.strip().endswith("chatapp serve: stopped") and "Traceback" not in err


def test_serve_says_a_base_model_has_no_chat_template(
    base_model_dir: Path, tiny_model_dir: Path
) -> None:
    """Issue 47: the window and `generate` say so; `serve` too, once, as it starts (that its
    answers end at the model's own next turn: tests/session/test_answer_base_models.py)."""

    def started_err(model: Path) -> str:
        process, _ = serve_process("--model", str(model), "--threads", "1")
        try:
            err = stop(process, signal.SIGTERM)
        finally:
            reap(process)
        assert process.returncode == 0, err
        return err

    err = started_err(base_model_dir)
    assert f"chatapp serve: {NO_TEMPLATE_NOTICE}" in err.splitlines(), err
    assert "no chat template" not in started_err(tiny_model_dir)


def test_serve_batches_four_requests_by_default_within_one_context(tiny_model_dir: Path) -> None:
    """Issue 49: without --parallel, a model that can batch gets 4 slots (1 where it cannot),
    all drawing on one context's KV budget; /health, /metrics and /slots say so."""
    engine = Engine(tiny_model_dir, threads=1)
    slots = 4 if slots_refusal(engine.info, engine.device) is None else 1
    process, info = serve_process("--model", str(tiny_model_dir), "--threads", "1")
    try:
        base = info["url"].removesuffix("/v1")
        models = httpx2.get(f"{info['url']}/models", timeout=30, trust_env=False).json()
        views = httpx2.get(f"{base}/slots", timeout=30, trust_env=False).json()
        metrics = httpx2.get(f"{base}/metrics", timeout=30, trust_env=False).text.splitlines()
        health = httpx2.get(f"{base}/health", timeout=30, trust_env=False).json()
        err = stop(process, signal.SIGTERM)
    finally:
        reap(process)
    assert process.returncode == 0, err
    card = models["data"][0]
    assert card["chatapp"]["parallel"] == slots and len(views) == slots
    assert f"chatapp_slots_total {slots}" in metrics
    # One context's worth, whatever the number of slots.
    assert card["max_model_len"] == views[0]["n_ctx"] == engine.max_context
    assert f"chatapp_kv_tokens_capacity {engine.max_context}" in metrics
    assert health == {"status": "ok", "state": "ready"}


def test_a_kv_budget_below_one_context_is_one_line(tiny_model_dir: Path) -> None:
    out = chatapp(
        *("serve", "--model", str(tiny_model_dir), "--threads", "1", "--port", "0"),
        *("--context", "64", "--kv-budget", "63"),
    )
    line = one_error_line(out)
    assert "--kv-budget 63 is less than one context (64 positions)" in line
