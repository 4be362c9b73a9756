"""What went wrong with the hub, in one line for the user."""

from __future__ import annotations

import os

from chatapp.error_text import first_line

DEFAULT_ENDPOINT = "https://huggingface.co"


class HubError(Exception):
    """A request to the hub that failed, or a download that could not be used; one line."""


class DownloadCancelled(HubError):
    """The user cancelled; the partial file stays for a resume."""


def endpoint() -> str:
    """The hub asked: HF_ENDPOINT (a mirror, a self-hosted hub) read now, not at import, so
    that a setting made after huggingface_hub was imported still counts."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_error(exc: BaseException, what: str) -> HubError:
    """`exc` (raised by huggingface_hub or its HTTP client while doing `what`) as one line."""
    import httpx2
    from huggingface_hub import errors

    where = endpoint()
    if isinstance(exc, HubError):
        return exc
    status = _status(exc)
    if isinstance(exc, errors.GatedRepoError):
        return HubError(
            f"{what}: the repository is gated: accept its licence on its page on the hub, "
            "then set HF_TOKEN (or log in with `hf auth login`)."
        )
    if status == 404 or isinstance(
        exc, errors.RepositoryNotFoundError | errors.RevisionNotFoundError
    ):
        return HubError(
            f"{what}: not found on {where}; check the repository and file names "
            "(a private repository needs HF_TOKEN)."
        )
    if status in (401, 403):
        return HubError(
            f"{what}: the hub refused access ({status}): the repository is gated or private; "
            "accept its licence on its page and set HF_TOKEN (or log in with `hf auth login`)."
        )
    if status == 429:
        return HubError(f"{what}: the hub is limiting requests (429); wait a minute and retry.")
    if status is not None and status >= 500:
        return HubError(f"{what}: the hub had a server error ({status}); try again later.")
    if status is not None:
        return HubError(f"{what}: the hub answered {status}.")
    if isinstance(exc, httpx2.TransportError | OSError):
        return HubError(
            f"{what}: could not reach {where} ({first_line(exc)}); check the network connection, "
            "HF_ENDPOINT or the proxy settings."
        )
    return HubError(f"{what}: {type(exc).__name__}: {first_line(exc)}")


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None
