"""Loopback by default; another address needs --allow-remote and a key; the key is checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from chatapp.engine.engine import Engine
from chatapp.server.security import BindRefused, check_bind
from tests.serving import Served, serving

KEY = "k" * 24


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_nothing(host: str) -> None:
    assert check_bind(host, 8000, False, None) in ("127.0.0.1", "::1", "127.0.0.2")


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::"])
def test_other_addresses_are_refused_without_the_flag(host: str) -> None:
    with pytest.raises(BindRefused, match="--allow-remote and an API key"):
        check_bind(host, 8000, False, KEY)


@pytest.mark.parametrize("key", [None, "", "short"])
def test_the_flag_alone_is_not_enough(key: str | None) -> None:
    with pytest.raises(BindRefused, match="needs an API key of at least 16"):
        check_bind("0.0.0.0", 8000, True, key)


def test_flag_and_key_allow_another_address() -> None:
    assert check_bind("0.0.0.0", 8000, True, KEY) == "0.0.0.0"


def test_a_host_name_is_refused_rather_than_resolved() -> None:
    with pytest.raises(BindRefused, match="takes an IP address"):
        check_bind("example.org", 8000, True, KEY)


@pytest.fixture(scope="module")
def keyed(tiny_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(tiny_model_dir, threads=1), api_key=KEY) as served:
        yield served


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong", f"Bearer {KEY}x", KEY, f"Basic {KEY}", f"bearer  {KEY}"]
)
def test_every_api_route_needs_the_key(keyed: Served, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    for method, path in (("GET", "models"), ("POST", "chat/completions"), ("POST", "completions")):
        response = httpx2.request(
            method, f"{keyed.api}/{path}", headers=headers, json={}, trust_env=False
        )
        assert response.status_code == 401, (path, header)
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert response.headers["www-authenticate"] == "Bearer"
    assert len(keyed.worker.records) == 0  # nothing reached the engine


def test_the_right_key_is_served(keyed: Served) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    models = httpx2.get(f"{keyed.api}/models", headers=headers, trust_env=False)
    assert models.status_code == 200
    answer = httpx2.post(
        f"{keyed.api}/chat/completions",
        headers=headers,
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=60,
        trust_env=False,
    )
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] <= 3


def test_health_needs_no_key_and_tells_nothing(keyed: Served) -> None:
    health = httpx2.get(f"{keyed.url}/health", trust_env=False)
    # Whether a request would start now; no model, device or client is named.
    assert health.status_code == 200 and health.json() == {"status": "ok", "state": "ready"}


@pytest.mark.parametrize("path", ["/metrics", "/slots"])
def test_what_clients_are_doing_needs_the_key(keyed: Served, path: str) -> None:
    refused = httpx2.get(f"{keyed.url}{path}", trust_env=False)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx2.get(f"{keyed.url}{path}", headers=headers, trust_env=False).status_code == 200
