"""Chatting with a remote OpenAI-compatible server: listing its models, connecting, and going
back to the local model. No Qt.

The connection lives in the window's `EngineHost` (`host.remote`), beside the local engine,
and only jobs on the JobRunner's worker thread touch it, as they touch the engine: the
generation job (chat_jobs.py) asks the host for its backend and drives a `RemoteEngine` as it
drives an `Engine`. The local model stays loaded while a server answers, so Disconnect is
instant and the comparison and `Serve this model` still have it.

Context policy: a server has no tokenizer here, so nothing is cut on this side. Every
message is sent; a server that finds the conversation too long refuses it
(`context_length_exceeded` in OpenAI's, vLLM's and chatapp's words), and the window says so
in one line, keeping the conversation (`remote_message`). The local model's tokenizer is
not used to estimate: it is another model's, and its counts could cut turns the server has
room for, or keep turns it has not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chatapp.remote.client import RemoteModel, Timeouts
from chatapp.remote.engine import RemoteEngine
from chatapp.remote.errors import RemoteError, RemoteHTTPError
from chatapp.session.jobs import Job, JobControl, failed
from chatapp.session.model_jobs import EngineHost

# Listing is what the connect dialog and a connection wait for: a host that does not answer
# should not keep them busy for the chat's long timeouts (a connection cannot be stopped).
LISTING_TIMEOUTS = Timeouts(connect_s=5.0, read_s=15.0, write_s=15.0)
CONTEXT_CODES = ("context_length_exceeded", "exceed_context_size_error")


@dataclass(frozen=True)
class ConnectRequest:
    url: str
    api_key: str | None = field(default=None, repr=False)  # never in a log line
    model: str | None = None  # None: the server's first
    timeouts: Timeouts = field(default_factory=Timeouts)  # the answers'
    listing_timeouts: Timeouts = LISTING_TIMEOUTS  # the models' list, when connecting


@dataclass(frozen=True)
class ServerListing:
    """What the connect dialog shows: the server's models and a word about the key."""

    server: str  # scheme://host:port
    models: tuple[RemoteModel, ...]
    notice: str | None  # the key would travel unencrypted beyond this machine


@dataclass(frozen=True)
class RemoteSummary:
    """What the GUI may know about the connected server (the client stays in the thread)."""

    server: str  # scheme://host:port
    base_url: str  # .../v1
    name: str  # the model id, as the server names it (the history stores it)
    max_context: int  # 0 when the server does not say
    is_chatapp: bool  # `chatapp serve`: it reports its own figures
    notice: str | None
    device: str = "remote"
    fallback_reason: str | None = None

    @property
    def device_label(self) -> str:
        return f"server {self.server}"

    @property
    def description(self) -> str:
        context = f", {self.max_context}-token context" if self.max_context else ""
        return f"{self.name} on {self.server}{context}"


def list_models_job(request: ConnectRequest, timeouts: Timeouts = LISTING_TIMEOUTS) -> Job:
    """GET /v1/models; returns a ServerListing."""

    def run(_control: JobControl) -> ServerListing:
        remote = RemoteEngine(request.url, request.api_key, timeouts=timeouts)
        try:
            return ServerListing(remote.server, tuple(remote.models), remote.notice)
        finally:
            remote.close()

    return Job("model listing", run, _explain, (RemoteError,))


def connect_job(host: EngineHost, request: ConnectRequest) -> Job:
    """Connect to the server and chat with it from the next answer on; returns a
    RemoteSummary. A failed connection keeps whatever answered before."""

    def run(_control: JobControl) -> RemoteSummary:
        remote = RemoteEngine(
            request.url, request.api_key, request.model, request.timeouts, request.listing_timeouts
        )
        host.use_remote(remote)
        return summarize_remote(remote)

    return Job("connection", run, _explain, (RemoteError,))


def disconnect_job(host: EngineHost) -> Job:
    """Back to the local model (if one is loaded); returns None."""

    def run(_control: JobControl) -> None:
        host.use_remote(None)

    return Job("disconnection", run)


def summarize_remote(remote: RemoteEngine) -> RemoteSummary:
    return RemoteSummary(
        server=remote.server,
        base_url=remote.client.base,
        name=remote.model.id,
        max_context=remote.max_context,
        is_chatapp=remote.is_chatapp,
        notice=remote.notice,
    )


def remote_message(exc: RemoteError) -> str:
    """One line for the banner; a conversation the server finds too long says what to do."""
    text = str(exc)
    if isinstance(exc, RemoteHTTPError) and (
        exc.code in CONTEXT_CODES or (exc.status == 400 and "context" in text.lower())
    ):
        return (
            f"{text} The conversation is longer than the server's context: start a new chat "
            "(Ctrl+N), or edit an earlier question to go on from there. Nothing was lost."
        )
    return text


def _explain(exc: BaseException) -> str:
    if isinstance(exc, RemoteError):
        return remote_message(exc)
    return failed("Connecting", exc)
