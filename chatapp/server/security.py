"""Who may reach the server: loopback by default; another address needs a flag and a key."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MIN_REMOTE_KEY_CHARS = 16
KEY_HINT = 'python -c "import secrets; print(secrets.token_urlsafe(24))"'


class BindRefused(Exception):
    """A listening address this configuration must not use; one line for the user."""


def check_bind(host: str, port: int, allow_remote: bool, api_key: str | None) -> str:
    """The address to bind (an IP literal); refuses what would expose the model unprotected."""
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise BindRefused(
            f"--host takes an IP address such as 127.0.0.1, ::1 or 0.0.0.0 (got '{host}')."
        ) from None
    if address.is_loopback:
        return str(address)
    if not allow_remote:
        raise BindRefused(
            f"Refusing to listen on {address}: other machines could use this model. "
            "Pass --allow-remote and an API key (--api-key or CHATAPP_API_KEY) to allow it."
        )
    if not api_key or len(api_key) < MIN_REMOTE_KEY_CHARS:
        raise BindRefused(
            f"Listening on {address}:{port} needs an API key of at least "
            f"{MIN_REMOTE_KEY_CHARS} characters (--api-key or CHATAPP_API_KEY); make one with "
            f"{KEY_HINT}."
        )
    return str(address)


# ---- who may send requests: the Host and Origin headers -------------------------------------
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
PREFLIGHT_MAX_AGE_S = 600
ALLOWED_METHODS = "GET, POST, DELETE, OPTIONS"


class AccessOptionError(ValueError):
    """An --allow-host or --allow-origin value that cannot be used; one line."""


def host_option(value: str) -> str:
    """`--allow-host NAME`: a host name or IP address, without scheme or port."""
    name = value.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not name or any(c in name for c in "/@?#* \t") or (":" in name and not _is_ip(name)):
        raise AccessOptionError(f"expected a host name such as my-box.lan, got '{value}'.")
    return name


def origin_option(value: str) -> str:
    """`--allow-origin ORIGIN`: scheme://host[:port] as a browser sends it, or `*`."""
    text = value.strip()
    if text == "*":
        return text
    origin = normal_origin(text)
    if origin is None:
        raise AccessOptionError(
            "expected an origin such as http://localhost:5173 (scheme, host and port, no "
            f"path), got '{value}'."
        )
    return origin


def normal_origin(text: str) -> str | None:
    """`scheme://host[:port]` lower-cased with the scheme's default port dropped; None if not."""
    scheme, sep, rest = text.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or not rest or any(c in rest for c in "/?#@ "):
        return None
    host, port = _split_port(rest)
    if not host or (port is not None and not (port.isdigit() and 0 < int(port) < 65536)):
        return None
    default = "80" if scheme == "http" else "443"
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{int(port)}"


@dataclass(frozen=True)
class AccessPolicy:
    """Which `Host` names and which browser `Origin`s the server answers.

    A page on another site can reach 127.0.0.1 through the user's browser: by DNS rebinding
    (its own name made to resolve to 127.0.0.1, so `Host` is that name) or by a cross-site
    request that needs no preflight (`Content-Type: text/plain`, which still runs a
    generation). The first is stopped by the Host check, the second by the Origin check.
    """

    bound_host: str = "127.0.0.1"
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()  # normal_origin() forms, or "*"

    def host_allowed(self, host_header: str | None) -> bool:
        if host_header is None:  # HTTP/1.0 without Host: no browser sends that
            return True
        host = parse_host(host_header)
        if host is None:  # `localhost:8000@evil.com`, `localhost:abc`: not a Host at all
            return False
        if host in LOOPBACK_NAMES or host in self.allowed_hosts or host == self.bound_host:
            return True
        if _is_wildcard(self.bound_host):
            # Bound to every interface: a Host that is an IP address is one of this machine's
            # (or a proxy's); only names can be rebound.
            return _is_ip(host)
        return False

    def fetch_site_allowed(self, site: str | None) -> bool:
        """A request without Origin whose `Sec-Fetch-Site` says another site sent it (a link,
        a form or a script on some page): refused as a foreign Origin is, unless any origin
        is allowed. Browsers send `same-origin` or `none` (typed, a bookmark) otherwise."""
        if site is None or "*" in self.allowed_origins:
            return True
        return site.strip().lower() not in ("cross-site", "same-site")

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        if "*" in self.allowed_origins:
            return True
        normal = normal_origin(origin)
        if normal is None:  # "null" (sandboxed frames, file://) and anything malformed
            return False
        if normal in self.allowed_origins:
            return True
        # The server's own origin (a page it served, or a form on the same host and port).
        return host_header is not None and normal in (
            normal_origin(f"http://{host_header}"),
            normal_origin(f"https://{host_header}"),
        )


_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_host(header: str) -> str | None:
    """The host of a `Host` header (lower case, no trailing dot), or None when the header is
    not `name[:port]`, `ipv4[:port]` or `[ipv6][:port]` with a port from 1 to 65535."""
    text = header.strip().lower()
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or not _is_ip(host) or (rest and not rest.startswith(":")):
            return None
        port: str | None = rest[1:] if rest else None
    elif text.count(":") > 1:
        return text if _is_ip(text) else None  # a bare IPv6 address (no port possible)
    else:
        host, colon, port_text = text.partition(":")
        port = port_text if colon else None
        host = host.removesuffix(".")  # the absolute form of a name: `localhost.`
        if not _HOST_NAME.fullmatch(host):
            return None
    if port is not None and not (_PORT.fullmatch(port) and 0 < int(port) < 65536):
        return None
    return host


def _split_port(text: str) -> tuple[str, str | None]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port
    return text, None  # a bare IPv6 address, or no port


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_wildcard(host: str) -> bool:
    return _is_ip(host) and ipaddress.ip_address(host).is_unspecified
