"""ASGI guards in front of the routes: Host and Origin (security.AccessPolicy), CORS, the key.

Order: a foreign or malformed Host gets 421 and a foreign Origin 403 (so does a request
without Origin that `Sec-Fetch-Site` says another site sent) before anything else; an allowed
origin's CORS preflight (OPTIONS) is answered here without the API key, as the CORS standard
requires (a browser never sends credentials on a preflight); every other request then needs
the key when there is one, and the answers to an allowed origin carry its CORS headers.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatapp.server.errors import ApiError
from chatapp.server.security import ALLOWED_METHODS, PREFLIGHT_MAX_AGE_S, AccessPolicy


class AccessGuard:
    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            shown = (host or "")[:100]
            message = (
                f"This server does not answer for the host '{shown}'; start it with "
                "--allow-host NAME to allow that name."
            )
            await _refuse(ApiError(421, message, code="misdirected_request"), scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is None and not self.policy.fetch_site_allowed(headers.get("sec-fetch-site")):
            message = (
                "Requests from other web sites are refused (Sec-Fetch-Site: "
                f"{headers['sec-fetch-site'][:30]}); start the server with --allow-origin "
                "ORIGIN to allow a page."
            )
            error = ApiError(403, message, code="origin_not_allowed", kind="permission_error")
            await _refuse(error, scope, receive, send)
            return
        if origin is None:  # not a browser's cross-origin request: nothing to add
            await self.app(scope, receive, send)
            return
        if not self.policy.origin_allowed(origin, host):
            message = (
                f"Requests from web pages at '{origin[:100]}' are refused; start the server "
                "with --allow-origin ORIGIN to allow that page."
            )
            error = ApiError(403, message, code="origin_not_allowed", kind="permission_error")
            await _refuse(error, scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(origin, headers)(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                response_headers["Access-Control-Allow-Origin"] = origin
                response_headers.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)


class BearerAuth:
    """Every route but /health needs `Authorization: Bearer <key>` (compared in constant time):
    /metrics and /slots tell what clients are doing."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                error = ApiError(
                    401,
                    "A valid API key is needed: send the header 'Authorization: Bearer <key>'.",
                    code="invalid_api_key",
                )
                response = JSONResponse(
                    error.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    # The first of repeated headers: a request with two Host headers is checked on the first,
    # which is the one uvicorn's h11 gives the application too.
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


async def _refuse(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)


def _preflight(origin: str, headers: dict[str, str]) -> Response:
    allowed = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": ALLOWED_METHODS,
        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
        "Vary": "Origin",
    }
    requested = headers.get("access-control-request-headers")
    if requested:  # the openai SDK sends its own x-stainless-* headers beside Authorization
        allowed["Access-Control-Allow-Headers"] = requested[:2000]
    if headers.get("access-control-request-private-network") == "true":
        allowed["Access-Control-Allow-Private-Network"] = "true"  # Chrome, page -> loopback
    return Response(status_code=204, headers=allowed)
