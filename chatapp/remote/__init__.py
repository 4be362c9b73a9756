"""A client for any OpenAI-compatible server (vLLM, llama.cpp's server, `chatapp serve`).

No Qt here. The rest of chatapp sees a server only through this package's face: `connect`
makes a `Backend` (engine/backend.py) answering from a server, `list_models` says what a
server serves, and `api_base` / `key_notice` check an address. The classes behind them
(engine.py's RemoteEngine, its stats and events; client.py) stay inside this package
(tests/test_architecture.py): a chat drives the backend like `Engine.chat` from a worker
thread, and its `stats` are a RunStats measured on this side of the network (docs/server.md
says what that means for each figure).
"""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.engine.backend import Backend
from chatapp.remote.client import ServedModel, Timeouts, api_base
from chatapp.remote.engine import RemoteEngine, key_notice

__all__ = ["ServedModel", "ServerListing", "Timeouts", "api_base", "connect", "key_notice"]
__all__ += ["list_models"]


@dataclass(frozen=True)
class ServerListing:
    """What a server serves, and a word about the key."""

    server: str  # scheme://host:port
    models: tuple[ServedModel, ...]
    notice: str | None  # the key would travel unencrypted beyond this machine


def connect(
    url: str,
    api_key: str | None = None,
    model: str | None = None,
    timeouts: Timeouts | None = None,
    listing_timeouts: Timeouts | None = None,
) -> Backend:
    """A backend answering from the server at `url` (its `model`, else its first); lists the
    models once with `listing_timeouts`. Raises a BackendError saying why it cannot."""
    return RemoteEngine(url, api_key, model, timeouts, listing_timeouts)


def list_models(url: str, api_key: str | None, timeouts: Timeouts) -> ServerListing:
    """GET /v1/models, and the connection closed again; BackendError where it fails."""
    server = RemoteEngine(url, api_key, timeouts=timeouts)
    try:
        return ServerListing(server.server, tuple(server.models), server.notice)
    finally:
        server.close()
