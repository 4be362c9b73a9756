"""What can go wrong with a remote server, each as one sentence for the user."""

from __future__ import annotations

from chatapp.engine.backend import BackendError

# A conversation longer than the server's context, in OpenAI's, vLLM's, llama.cpp's and
# chatapp's words.
CONTEXT_CODES = ("context_length_exceeded", "exceed_context_size_error")


class RemoteError(BackendError):
    """Base class: the remote server could not be used (or not any further)."""


class RemoteAddressError(RemoteError):
    """The address the user gave is not one this client will contact."""


class RemoteConnectionError(RemoteError):
    """No connection: refused, unknown host, network unreachable."""


class RemoteTimeout(RemoteError):
    """The server did not answer in time."""


class RemoteDisconnected(RemoteError):
    """The server closed the connection before the answer was complete."""


class RemoteStreamError(RemoteError):
    """The server sent something that is not an OpenAI-style answer."""


class RemoteHTTPError(RemoteError):
    """The server refused the request (HTTP 4xx/5xx) or reported an error in the stream."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.too_long = code in CONTEXT_CODES or (status == 400 and "context" in message.lower())
