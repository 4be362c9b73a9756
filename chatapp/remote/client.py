"""HTTP to an OpenAI-compatible server: the model list and streamed chat completions.

httpx2 (the maintained successor of httpx, by the same author, kept by Pydantic) is already
here: transformers' huggingface_hub depends on it, and so does the `openai` package. It has
timeouts per phase, a server-sent event parser (`EventSource`) and one exception tree for
every network failure, which this module turns into one-line `RemoteError`s.

Only the address the user gave is contacted: no redirects are followed, and proxy settings
from the environment (HTTP_PROXY, .netrc) are ignored.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2

from chatapp.remote.errors import (
    RemoteAddressError,
    RemoteConnectionError,
    RemoteDisconnected,
    RemoteError,
    RemoteHTTPError,
    RemoteStreamError,
    RemoteTimeout,
)

MAX_EVENT_BYTES = 4 * 1024 * 1024  # one server-sent event; a token's chunk is well under 1 KB
# One answer's bytes on the wire: 8192 tokens with 20 top log-probs each take about 40 MB in
# chatapp's and vLLM's chunks. A server that sends more is not answering a chat.
MAX_STREAM_BYTES = 64 * 1024 * 1024
MAX_LISTING_BYTES = 4 * 1024 * 1024  # GET /v1/models
MAX_ERROR_BYTES = 64 * 1024  # an error page: enough for its message
# Context lengths and token counts beyond this are not believed (and would overflow the
# window's 32-bit progress bars); the largest real contexts are ~10^7.
MAX_COUNT = 2**30


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 10.0
    # Longest silence while waiting for the answer's headers or its next chunk. A long prompt's
    # prefill on a busy server, or a request queued behind others, can take a while.
    read_s: float = 120.0
    write_s: float = 30.0


@dataclass(frozen=True)
class ServedModel:
    id: str
    owned_by: str
    context_length: int  # 0 when the server does not say
    # What a chatapp server's card says of its engine ("Device": "CPU", "Loop": ...), as
    # short text; () from other servers.
    facts: tuple[tuple[str, str], ...] = ()


def api_base(url: str) -> str:
    """`host:port`, `http://host:port` or `.../v1` -> the API's base URL, ending in /v1."""
    text = url.strip()
    if not text:
        raise RemoteAddressError("Enter the server's address, e.g. http://127.0.0.1:8000/v1.")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise RemoteAddressError(
            f"The server address must start with http:// or https:// (got '{parts.scheme}://')."
        )
    try:
        port = parts.port
    except ValueError:
        raise RemoteAddressError(f"The port in '{url.strip()}' is not a number.") from None
    if not parts.hostname:
        raise RemoteAddressError(f"'{url.strip()}' names no host.")
    if parts.username or parts.password:
        raise RemoteAddressError(
            "Put the API key in the API key field, not in the address (it would be logged)."
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, path, "", ""))


class RemoteClient:
    def __init__(
        self, url: str, api_key: str | None = None, timeouts: Timeouts | None = None
    ) -> None:
        self.base = api_base(url)
        parts = urlsplit(self.base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.timeouts = timeouts or Timeouts()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx2.Client(
            base_url=self.base + "/",
            headers=headers,
            timeout=_httpx_timeout(self.timeouts),
            trust_env=False,
            follow_redirects=False,
        )

    def close(self) -> None:
        self.http.close()

    def models(self, timeouts: Timeouts | None = None) -> list[ServedModel]:
        """GET /v1/models; `timeouts` replace the client's for this request."""
        timeout = _httpx_timeout(timeouts or self.timeouts)
        with (
            self._errors("listing the models", timeouts),
            self.http.stream("GET", "models", timeout=timeout) as response,
        ):
            if response.status_code >= 300:
                raise http_error(response, self.origin)
            raw = read_capped(response, MAX_LISTING_BYTES)
            if raw is None:
                raise RemoteStreamError(
                    f"{self.origin}'s list of models is larger than "
                    f"{MAX_LISTING_BYTES // 2**20} MB; is this an OpenAI-compatible server?"
                )
            try:
                data = json.loads(raw, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                raise RemoteStreamError(
                    f"{self.origin} answered /v1/models with something that is not JSON; "
                    "is this an OpenAI-compatible server?"
                ) from None
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise RemoteStreamError(f"{self.origin}'s /v1/models has no list of models.")
        return [_model(e) for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]

    def stream_chat(
        self, body: dict[str, Any], abandoned: Callable[[], bool] = lambda: False
    ) -> Generator[dict[str, Any], None, None]:
        """POST /chat/completions with stream=true; yields each chunk as parsed JSON.

        Ends normally at `data: [DONE]` (or at the end of a stream that reported a
        finish_reason); raises a RemoteError for anything else. Closing the iterator closes
        the connection, which a server takes as the client leaving (chatapp serve and vLLM
        stop generating). `abandoned` is asked after every read from the network: once it
        is true the stream ends there, even in the middle of bytes that make no event.
        """
        with (
            self._errors("answering"),
            self.http.stream("POST", "chat/completions", json=body) as response,
        ):
            if response.status_code >= 300:
                raise http_error(response, self.origin)
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind == "application/json":  # a server that ignores stream=true
                raw = read_capped(response, MAX_STREAM_BYTES, abandoned)
                if raw is None:
                    raise self._too_much()
                yield whole_as_chunk(_json(raw.decode("utf-8", "replace"), self.origin))
                return
            if kind != "text/event-stream":
                raise RemoteStreamError(
                    f"{self.origin} answered with {_one_line(kind)[:60] or 'no content type'}, "
                    "not a stream of server-sent events; is this an OpenAI-compatible server?"
                )
            finished = False
            for data in sse_data(response, abandoned, self._too_much):
                data = data.strip()
                if data == "[DONE]":
                    return
                if not data:
                    continue
                chunk = _json(data, self.origin)
                if "error" in chunk:
                    raise stream_error(chunk["error"], self.origin)
                finished = finished or _has_finish(chunk)
                yield chunk
            if not finished:
                raise RemoteDisconnected(
                    f"{self.origin} ended the stream before the answer was complete."
                )

    def _too_much(self) -> RemoteStreamError:
        return RemoteStreamError(
            f"{self.origin} sent more than {MAX_STREAM_BYTES // 2**20} MB for one answer; "
            "the rest was not read."
        )

    @contextmanager
    def _errors(self, doing: str, timeouts: Timeouts | None = None) -> Iterator[None]:
        t = timeouts or self.timeouts
        try:
            yield
        except RemoteError:
            raise
        except httpx2.ConnectTimeout:
            raise RemoteTimeout(
                f"{self.origin} did not accept a connection within {t.connect_s:g} s."
            ) from None
        except httpx2.ReadTimeout:
            raise RemoteTimeout(
                f"{self.origin} sent nothing for {t.read_s:g} s while {doing}."
            ) from None
        except httpx2.TimeoutException:
            raise RemoteTimeout(f"{self.origin} timed out while {doing}.") from None
        except httpx2.ConnectError as exc:
            raise RemoteConnectionError(
                f"Could not connect to {self.origin} ({_reason(exc)}): is the server running "
                "and the address right?"
            ) from None
        except (httpx2.RemoteProtocolError, httpx2.ReadError) as exc:
            raise RemoteDisconnected(
                f"{self.origin} closed the connection while {doing} ({_reason(exc)})."
            ) from None
        except httpx2.HTTPError as exc:  # write errors, unsupported protocol, decoding...
            raise RemoteConnectionError(f"{self.origin}: {_reason(exc)}.") from None


def _httpx_timeout(t: Timeouts) -> httpx2.Timeout:
    return httpx2.Timeout(connect=t.connect_s, read=t.read_s, write=t.write_s, pool=t.connect_s)


def http_error(response: httpx2.Response, origin: str) -> RemoteHTTPError:
    """An error answer in one line: OpenAI's {"error": {"message"}} when the server sends it."""
    status = response.status_code
    if 300 <= status < 400:
        where = response.headers.get("location", "elsewhere")
        return RemoteHTTPError(
            f"{origin} redirects to {_one_line(where)[:200]}; give that address instead "
            "(chatapp contacts only the address you give).",
            status,
        )
    message, code = "", None
    raw = read_capped(response, MAX_ERROR_BYTES, partial=True) or b""
    text = raw.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict):
            message = str(error.get("message") or "")
            code = error.get("code") if isinstance(error.get("code"), str) else None
        elif isinstance(error, str):
            message = error
    if not message:
        message = page_text(text) or response.reason_phrase
    what = {401: "refused the API key", 403: "refused access", 404: "has no such endpoint"}
    lead = what.get(status, f"answered {status}")
    return RemoteHTTPError(f"{origin} {lead}: {_one_line(message)}", status, code)


def stream_error(error: Any, origin: str) -> RemoteHTTPError:
    message = error.get("message") if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    return RemoteHTTPError(
        f"{origin} reported an error mid-answer: {_one_line(str(message))}",
        code=code if isinstance(code, str) else None,
    )


def whole_as_chunk(data: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed chat completion as one stream chunk."""
    choices = data.get("choices")
    chunk: dict[str, Any] = {k: v for k, v in data.items() if k != "choices"}
    chunk["choices"] = []
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict):
                message = choice.get("message") or {}
                delta = {"content": message.get("content") if isinstance(message, dict) else None}
                chunk["choices"].append({**choice, "delta": delta})
    return chunk


def _model(entry: dict[str, Any]) -> ServedModel:
    context = entry.get("max_model_len")  # vLLM and chatapp
    meta = entry.get("meta")  # llama.cpp's server: the model's trained context
    if not isinstance(context, int) and isinstance(meta, dict):
        context = meta.get("n_ctx") or meta.get("n_ctx_train")
    owned = entry.get("owned_by")
    return ServedModel(
        id=entry["id"][:500],
        owned_by=owned[:100] if isinstance(owned, str) else "",
        context_length=count(context) or 0,
        facts=_card_facts(entry),
    )


def _card_facts(entry: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """chatapp.card.facts of a /v1/models entry, keeping what a fact can be: a short
    printable label and value (a hostile server's are cut or dropped)."""
    own = entry.get("chatapp")
    card = own.get("card") if isinstance(own, dict) else None
    facts = card.get("facts") if isinstance(card, dict) else None
    if not isinstance(facts, dict):
        return ()
    kept = []
    for label, value in list(facts.items())[:MAX_FACTS]:
        text = isinstance(label, str) and isinstance(value, str) and bool(value)
        if text and 0 < len(label) <= 40 and label.isprintable() and value.isprintable():
            kept.append((label, value[:200]))
    return tuple(kept)


MAX_FACTS = 16  # a card's facts: chatapp's have 7


def count(value: Any) -> int | None:
    """A token count or context length a server reported; None unless a whole number from 0
    to MAX_COUNT (a float such as 1e30, a bool or 2**31 is not believed)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        return None
    return value


def _json(text: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        raise RemoteStreamError(
            f"{origin} sent a malformed stream: {_one_line(text)[:80]!r} is not JSON."
        ) from None
    if not isinstance(data, dict):
        raise RemoteStreamError(f"{origin} sent a malformed stream: a chunk is not an object.")
    return data


def _no_constant(name: str) -> float:
    if name in ("NaN", "Infinity", "-Infinity"):  # not JSON, but Python's json writes them
        return {"NaN": math.nan, "Infinity": math.inf}.get(name, -math.inf)
    raise ValueError(name)


def _has_finish(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") for c in choices
    )


def _reason(exc: BaseException) -> str:
    text = _one_line(str(exc))
    return text or type(exc).__name__


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    line = lines[0][:300] if lines else ""
    return "".join(c if c.isprintable() else " " for c in line)  # no escapes reach a banner


def read_capped(
    response: httpx2.Response,
    limit: int,
    abandoned: Callable[[], bool] = lambda: False,
    partial: bool = False,
) -> bytes | None:
    """The body, read as it arrives; None once it passes `limit` (with `partial`, the first
    `limit` bytes instead)."""
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece
        if len(body) > limit:
            return bytes(body[:limit]) if partial else None
        if abandoned():
            break
    return bytes(body)


def sse_data(
    response: httpx2.Response,
    abandoned: Callable[[], bool],
    too_much: Callable[[], RemoteError],
) -> Iterator[str]:
    """The `data` of each server-sent event (the fields joined by newlines, as the standard
    says). Its own small parser rather than httpx2's EventSource, which keeps reading through
    comments and blank lines without a word: here every read from the network is counted
    against MAX_STREAM_BYTES and asks `abandoned`, whatever the bytes hold."""
    pending = b""
    data: list[bytes] = []
    event_bytes = received = 0
    for piece in response.iter_bytes():
        received += len(piece)
        if received > MAX_STREAM_BYTES:
            raise too_much()
        pending += piece
        if not data and b"data" not in pending:
            # Nothing of an event (keep-alive comments, blank lines): dropped in one go,
            # up to a last partial line.
            pending = pending[pending.rfind(b"\n") + 1 :]
        else:
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line and line != b"\r":
                    name, _, value = line.removesuffix(b"\r").partition(b":")
                    if name == b"data":
                        data.append(value.removeprefix(b" "))
                        event_bytes += len(value)
                elif data:
                    yield _utf8(b"\n".join(data))
                    data, event_bytes = [], 0
        if event_bytes + len(pending) > MAX_EVENT_BYTES:
            raise RemoteStreamError(
                f"{response.request.url.scheme}://{response.request.url.netloc.decode()} sent "
                f"an event larger than {MAX_EVENT_BYTES // 2**20} MB; the stream was closed."
            )
        if abandoned():
            return
    if data:  # the last event, when the server closed without its blank line
        yield _utf8(b"\n".join(data))


def _utf8(data: bytes) -> str:
    return data.decode("utf-8", "replace")  # json.loads refuses what is not an answer


def page_text(text: str) -> str:
    """An error page in one line: an HTML page's title (or its text), else the first line."""
    if re.search(r"<(!doctype|html|head|body|title|h1)\b", text[:2000], re.IGNORECASE):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        inner = title.group(1) if title else re.sub(r"<[^>]*>", " ", text)
        words = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", inner)).split())
        return f"{words[:200]} (an HTML error page)" if words else "an HTML error page"
    return _one_line(text)
