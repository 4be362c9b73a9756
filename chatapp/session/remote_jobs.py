"""Chatting with a server (OpenAI-compatible): listing its models, connecting, and going back
to the local model. No Qt.

The connection lives in the window's `EngineHost` (`host.remote`), beside the local engine,
and only jobs on the engine service's thread touch it, as they touch the engine: the
generation job (chat_jobs.py) asks the host for its `Backend` and drives it as it drives an
`Engine`. This is the one module that makes a server's backend (`chatapp.remote.connect`);
what the window learns of it is its `BackendCard`. The local model stays loaded while a
server answers, so Disconnect is instant and the comparison and `Serve this model` still
have it.

Context policy: a server has no tokenizer here, so nothing is cut on this side. Every
message is sent; a server that finds the conversation too long refuses it (`too_long` on
its BackendError), and the window says so in one line, keeping the conversation
(`backend_message`). The local model's tokenizer is not used to estimate: it is another
model's, and its counts could cut turns the server has room for, or keep turns it has not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chatapp.engine.backend import BackendCard, BackendError
from chatapp.remote import ServerListing, Timeouts, connect, list_models
from chatapp.session.jobs import Job, JobControl, failed
from chatapp.session.model_jobs import EngineHost

# Listing is what the connect dialog and a connection wait for: a host that does not answer
# should not keep them busy for the chat's long timeouts (a connection cannot be stopped).
LISTING_TIMEOUTS = Timeouts(connect_s=5.0, read_s=15.0, write_s=15.0)


@dataclass(frozen=True)
class ConnectRequest:
    url: str
    api_key: str | None = field(default=None, repr=False)  # never in a log line
    model: str | None = None  # None: the server's first
    timeouts: Timeouts = field(default_factory=Timeouts)  # the answers'
    listing_timeouts: Timeouts = LISTING_TIMEOUTS  # the models' list, when connecting


def list_models_job(request: ConnectRequest, timeouts: Timeouts = LISTING_TIMEOUTS) -> Job:
    """GET /v1/models; returns a ServerListing."""

    def run(_control: JobControl) -> ServerListing:
        return list_models(request.url, request.api_key, timeouts)

    return Job("model listing", run, _explain, (BackendError,))


def connect_job(host: EngineHost, request: ConnectRequest) -> Job:
    """Connect to the server and chat with it from the next answer on; returns a
    BackendCard. A failed connection keeps whatever answered before."""

    def run(_control: JobControl) -> BackendCard:
        backend = connect(
            request.url, request.api_key, request.model, request.timeouts, request.listing_timeouts
        )
        host.use_remote(backend)
        return backend.card()

    return Job("connection", run, _explain, (BackendError,))


def disconnect_job(host: EngineHost) -> Job:
    """Back to the local model (if one is loaded); returns None."""

    def run(_control: JobControl) -> None:
        host.use_remote(None)

    return Job("disconnection", run)


def backend_message(exc: BackendError) -> str:
    """One line for the banner; a conversation the backend finds too long says what to do."""
    text = str(exc)
    if exc.too_long:
        return (
            f"{text} The conversation is longer than the server's context: start a new chat "
            "(Ctrl+N), or edit an earlier question to go on from there. Nothing was lost."
        )
    return text


def _explain(exc: BaseException) -> str:
    if isinstance(exc, BackendError):
        return backend_message(exc)
    return failed("Connecting", exc)
