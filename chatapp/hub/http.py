"""The hub's HTTP requests: huggingface_hub's URLs, headers (HF_TOKEN or the saved token) and
errors, on a client of chatapp's own.

Why not huggingface_hub's shared session: its request hook refuses every request when
`huggingface_hub.constants.HF_HUB_OFFLINE` is true, and that constant is read from the
environment once, at import. chatapp itself sets HF_HUB_OFFLINE when it loads a tokenizer (no
tokenizer load may reach a hub), so in the window, where a model loads before the user asks the
hub anything, the shared session would refuse the user's search. This client honours the
user's HF_HUB_OFFLINE (read at each request) and not chatapp's own. Like huggingface_hub's, it
follows redirects and reads proxies from the environment (HTTPS_PROXY, NO_PROXY).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from chatapp.hub.errors import HubError

if TYPE_CHECKING:
    import httpx2

REQUEST_TIMEOUT_S = 30.0
_client: httpx2.Client | None = None
_lock = threading.Lock()


def user_is_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set by the user, not by chatapp's tokenizer."""
    from chatapp.engine.text.chat import HUB_OFFLINE_SET_BY_CHATAPP

    def on(name: str) -> bool:
        return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")

    set_by_chatapp = bool(os.environ.get(HUB_OFFLINE_SET_BY_CHATAPP))
    return (on("HF_HUB_OFFLINE") and not set_by_chatapp) or on("TRANSFORMERS_OFFLINE")


def client() -> httpx2.Client:
    """The one client of the hub's requests, made at the first (no connection until then)."""
    global _client
    import httpx2

    with _lock:
        if _client is None:
            _client = httpx2.Client(follow_redirects=True, timeout=REQUEST_TIMEOUT_S)
        return _client


def headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers

    return build_hf_headers(library_name="chatapp", headers=extra)


def get_json(url: str, what: str, params: dict[str, str] | None = None) -> Any:
    """GET `url` and its JSON; errors as one HubError line about `what`."""
    from huggingface_hub.utils import hf_raise_for_status

    from chatapp.hub.errors import hub_error

    refuse_when_offline(what)
    try:
        response = client().get(url, params=params, headers=headers())
        hf_raise_for_status(response)
        return response.json()
    except Exception as exc:
        raise hub_error(exc, what) from exc


def refuse_when_offline(what: str) -> None:
    if user_is_offline():
        raise HubError(f"{what}: HF_HUB_OFFLINE is set, so chatapp does not contact the hub.")
