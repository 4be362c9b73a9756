"""Who may reach the server: loopback by default; another address needs a flag and a key."""

from __future__ import annotations

import ipaddress

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
