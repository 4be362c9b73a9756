"""Host and Origin checks, CORS and the API key against a real server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from chatapp.engine.engine import Engine
from chatapp.server.security import AccessPolicy
from tests.serving import Served, serving

KEY = "k" * 24
ALLOWED = "http://localhost:5173"
AUTH = {"Authorization": f"Bearer {KEY}"}
HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def guarded(tiny_model_dir: Path) -> Iterator[Served]:
    policy = AccessPolicy(
        "127.0.0.1", frozenset({"my-box.lan"}), frozenset({ALLOWED, "https://app.example"})
    )
    app_args = {"access": policy, "aliases": ("gpt-3.5-turbo", "gpt-4o")}
    with serving(Engine(tiny_model_dir, threads=1), KEY, app_args=app_args) as s:
        yield s


def get(served: Served, path: str, **headers: str) -> httpx2.Response:
    return httpx2.get(f"{served.url}{path}", headers={**AUTH, **headers}, trust_env=False)


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:8000", "127.0.0.1.nip.io"])
def test_a_foreign_host_is_misdirected(guarded: Served, host: str) -> None:
    # DNS rebinding: the attacker's name resolves to 127.0.0.1, so Host carries that name.
    for path in ("/v1/models", "/health"):
        response = get(guarded, path, Host=host)
        assert response.status_code == 421, path
        assert "--allow-host" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "host",
    [
        "localhost:8000@evil.com",  # the port parsed loosely, the name after @ ignored
        "localhost:abc",
        "localhost:",
        "localhost:0",
        "localhost:65536",
        "localhost:+80",
        "localhost:8000:8000",
        "127.0.0.1:80/evil",
        "localhost@evil.com",
        "evil.com#localhost",
        "[::1]evil.com",
        "[::1]:x",
        "[::1",
        "[localhost]:80",
        "localhost..",
        "local host",
    ],
)
def test_a_malformed_host_is_misdirected(guarded: Served, host: str) -> None:
    records = len(guarded.worker.records)
    for path in ("/v1/models", "/health"):
        assert get(guarded, path, Host=host).status_code in (400, 421), (host, path)
    response = httpx2.post(
        f"{guarded.api}/chat/completions",
        json=HELLO,
        headers={**AUTH, "Host": host},
        timeout=60,
        trust_env=False,
    )
    assert response.status_code in (400, 421)  # 400: uvicorn's h11 refused it first
    assert len(guarded.worker.records) == records


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost:8000",
        "[::1]:8000",
        "[::1]",
        "LOCALHOST",
        "my-box.lan:1",
        "localhost.",
        "localhost.:8000",
        "127.0.0.1:65535",
    ],
)
def test_loopback_names_and_allowed_hosts_are_answered(guarded: Served, host: str) -> None:
    assert get(guarded, "/v1/models", Host=host).status_code == 200


def test_a_foreign_origin_is_forbidden_even_without_a_preflight(guarded: Served) -> None:
    # A cross-site form or fetch with Content-Type text/plain needs no preflight: it must
    # not reach the engine.
    records = len(guarded.worker.records)
    response = httpx2.post(
        f"{guarded.api}/chat/completions",
        content=b'{"messages": [{"role": "user", "content": "hi"}]}',
        headers={**AUTH, "Origin": "http://evil.example.com", "Content-Type": "text/plain"},
        trust_env=False,
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in response.headers
    assert len(guarded.worker.records) == records
    for origin in ("null", "http://localhost:5174", "https://localhost:5173", "file://"):
        assert get(guarded, "/v1/models", Origin=origin).status_code == 403, origin


@pytest.mark.parametrize("site", ["cross-site", "same-site", "CROSS-SITE", "Cross-Site"])
def test_a_request_another_site_sent_without_origin_is_forbidden(
    guarded: Served, site: str
) -> None:
    # A browser names the sender in Sec-Fetch-Site even where it leaves Origin out.
    records = len(guarded.worker.records)
    for content_type in ("application/json", "text/plain"):
        response = httpx2.post(
            f"{guarded.api}/chat/completions",
            content=json.dumps(HELLO).encode(),
            headers={**AUTH, "Sec-Fetch-Site": site, "Content-Type": content_type},
            timeout=60,
            trust_env=False,
        )
        assert response.status_code == 403
        error = response.json()["error"]
        assert error["code"] == "origin_not_allowed" and "--allow-origin" in error["message"]
    assert get(guarded, "/v1/models", **{"Sec-Fetch-Site": site}).status_code == 403
    assert len(guarded.worker.records) == records


@pytest.mark.parametrize("site", ["same-origin", "none"])
def test_a_request_of_the_same_origin_or_typed_is_answered(guarded: Served, site: str) -> None:
    answer = httpx2.post(
        f"{guarded.api}/chat/completions",
        json=HELLO,
        headers={**AUTH, "Sec-Fetch-Site": site},
        timeout=60,
        trust_env=False,
    )
    assert answer.status_code == 200


def test_an_allowed_origin_gets_its_preflight_without_the_key(guarded: Served) -> None:
    response = httpx2.options(
        f"{guarded.api}/chat/completions",
        headers={
            "Origin": ALLOWED,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
            "Access-Control-Request-Private-Network": "true",
        },
        trust_env=False,
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "x-stainless-os" in response.headers["access-control-allow-headers"]
    assert response.headers["access-control-allow-private-network"] == "true"
    foreign = httpx2.options(
        f"{guarded.api}/chat/completions",
        headers={"Origin": "http://evil.example.com", "Access-Control-Request-Method": "POST"},
        trust_env=False,
    )
    assert foreign.status_code == 403


def test_an_allowed_origin_gets_cors_headers_and_still_needs_the_key(guarded: Served) -> None:
    answer = httpx2.post(
        f"{guarded.api}/chat/completions",
        json=HELLO,
        headers={**AUTH, "Origin": "https://app.example:443"},
        timeout=60,
        trust_env=False,
    )
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "https://app.example:443"
    assert "Origin" in answer.headers["vary"]
    keyless = httpx2.post(
        f"{guarded.api}/chat/completions", json=HELLO, headers={"Origin": ALLOWED}, trust_env=False
    )
    assert keyless.status_code == 401  # readable by the page: it carries the CORS header
    assert keyless.headers["access-control-allow-origin"] == ALLOWED


def test_the_servers_own_origin_is_allowed(guarded: Served) -> None:
    assert get(guarded, "/v1/models", Origin=guarded.url).status_code == 200


def test_models_lists_the_id_and_its_aliases(guarded: Served) -> None:
    ids = [m["id"] for m in get(guarded, "/v1/models").json()["data"]]
    assert ids == ["tiny-llama", "gpt-3.5-turbo", "gpt-4o"]
    assert get(guarded, "/v1/models/gpt-4o").json()["id"] == "gpt-4o"
    assert get(guarded, "/v1/models/gpt-5").status_code == 404


def test_policy_rules() -> None:
    wildcard = AccessPolicy("0.0.0.0")
    assert wildcard.host_allowed("192.168.1.5:8000") and wildcard.host_allowed("[fe80::1]:80")
    assert not wildcard.host_allowed("attacker.example")
    lan = AccessPolicy("192.168.1.5")
    assert lan.host_allowed("192.168.1.5:8000") and not lan.host_allowed("192.168.1.6")
    assert AccessPolicy().host_allowed(None)  # HTTP/1.0 without Host: not a browser
    assert not AccessPolicy().origin_allowed("http://127.0.0.1:9", "127.0.0.1:8000")
    assert AccessPolicy(allowed_origins=frozenset({"*"})).origin_allowed("null", None)
    assert AccessPolicy(allowed_origins=frozenset({"*"})).fetch_site_allowed("cross-site")
    assert not AccessPolicy(allowed_origins=frozenset({ALLOWED})).fetch_site_allowed("same-site")
    assert AccessPolicy().fetch_site_allowed(None) and AccessPolicy().fetch_site_allowed("none")
