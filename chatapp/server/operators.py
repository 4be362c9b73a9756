"""What an operator reads off a running server: `GET /health`, `GET /metrics` (Prometheus text
format, as llama.cpp's server and vLLM expose) and `GET /slots` (llama.cpp's view of its slots).

The counters are written by the engine's threads (one request ending) and by the HTTP side (an
error sent to a client); a scrape reads them under the same lock. Nothing here holds the engine:
the gauges are snapshots the worker takes without waiting for a model run.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatapp.server.events import RequestRecord, ServedRequest

if TYPE_CHECKING:
    from chatapp.engine.slots import SlotBatch

# Prometheus text exposition format, version 0.0.4 (what every scraper reads).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "chatapp_"


@dataclass(frozen=True)
class Load:
    """A snapshot of what the server is doing, for /health, /metrics and /slots."""

    waiting: int  # requests queued, not yet generating
    running: int  # requests generating
    slots: int  # requests that can generate together (--parallel)
    kv_tokens_used: int  # KV positions held (slots: reservations and idle caches)
    kv_tokens_capacity: int  # KV positions that may be held (slots: their budget)
    shared_positions: int = 0  # prompt positions copied from another slot, not prefilled
    kv_tokens_reserved: int = 0  # slots: the running requests' reservations (they grow)
    kv_tokens_cached: int = 0  # KV positions written and kept (slots: every slot's cache)
    preemptions: int = 0  # slots: requests whose KV was dropped for older ones to grow
    recomputed_positions: int = 0  # slots: positions computed again after a pre-emption
    batched_steps: int = 0  # slots: decode steps run
    batched_rows: int = 0  # slots: sequences those steps carried, all together

    @property
    def state(self) -> str:
        """ "busy" when no slot is free (a new request waits), else "ready"."""
        return "busy" if self.running >= self.slots else "ready"


class ServerCounters:
    """Totals since the server started (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended: Counter[str] = Counter()  # by how a request ended
        self._errors: Counter[tuple[int, str]] = Counter()  # by (HTTP status, error type)
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.prompt_seconds = 0.0  # request start -> first token, summed
        self.decode_seconds = 0.0  # first token -> last token, summed
        self.queue_seconds = 0.0  # submitted -> started, summed
        self.drafted_tokens = 0  # speculative decoding (serve --speculative)
        self.accepted_tokens = 0

    def answered(
        self,
        finish: str,
        prompt_tokens: int,
        generated_tokens: int,
        prompt_s: float,
        decode_s: float,
        queue_s: float,
    ) -> None:
        """A request answered to its end (`finish`: stop, length, tool_calls)."""
        with self._lock:
            self._ended[finish] += 1
            self.prompt_tokens += prompt_tokens
            self.generated_tokens += generated_tokens
            self.prompt_seconds += prompt_s
            self.decode_seconds += decode_s
            self.queue_seconds += queue_s

    def speculated(self, drafted: int, accepted: int) -> None:
        """An answer's drafted tokens, and those the model kept (engine/speculative.py)."""
        with self._lock:
            self.drafted_tokens += drafted
            self.accepted_tokens += accepted

    def ended_early(self, reason: str, generated_tokens: int) -> None:
        """A request that did not finish (`reason`: cancelled, error)."""
        with self._lock:
            self._ended[reason] += 1
            self.generated_tokens += generated_tokens

    def error(self, status: int, kind: str) -> None:
        """An error a client was sent (before or during its answer)."""
        with self._lock:
            self._errors[(status, kind)] += 1

    def render(self, load: Load) -> str:
        """Every counter and gauge in Prometheus' text format."""
        with self._lock:
            ended = dict(self._ended)
            errors = dict(self._errors)
            totals = (
                (
                    "prompt_tokens_total",
                    "counter",
                    "Prompt tokens of answered requests.",
                    self.prompt_tokens,
                ),
                (
                    "generated_tokens_total",
                    "counter",
                    "Tokens generated, all requests.",
                    self.generated_tokens,
                ),
                (
                    "prompt_seconds_total",
                    "counter",
                    "Seconds from a request's start to its first token, summed.",
                    self.prompt_seconds,
                ),
                (
                    "decode_seconds_total",
                    "counter",
                    "Seconds from a request's first token to its last, summed.",
                    self.decode_seconds,
                ),
                (
                    "queue_seconds_total",
                    "counter",
                    "Seconds requests waited in the queue before they started, summed.",
                    self.queue_seconds,
                ),
                (
                    "drafted_tokens_total",
                    "counter",
                    "Tokens drafted from the conversation and verified (serve --speculative).",
                    self.drafted_tokens,
                ),
                (
                    "accepted_tokens_total",
                    "counter",
                    "Drafted tokens the model kept: each saved a pass over the weights.",
                    self.accepted_tokens,
                ),
            )
        lines: list[str] = []
        _family(
            lines,
            "requests_total",
            "counter",
            "Requests that ended, by how (stop, length, tool_calls, cancelled, error).",
            [({"finish": k}, v) for k, v in sorted(ended.items())],
        )
        for name, kind, text, value in totals:
            _family(lines, name, kind, text, [({}, value)])
        _family(
            lines,
            "errors_total",
            "counter",
            "Errors sent to clients, by HTTP status and error type.",
            [({"status": str(s), "type": t}, v) for (s, t), v in sorted(errors.items())],
        )
        gauges = (
            ("requests_waiting", "Requests queued, not yet generating.", load.waiting),
            ("requests_running", "Requests generating now.", load.running),
            ("slots_total", "Requests that can generate together (--parallel).", load.slots),
            ("slots_busy", "Slots generating now.", min(load.running, load.slots)),
            (
                "kv_tokens_used",
                "KV positions held (with slots: running requests' reservations and idle caches).",
                load.kv_tokens_used,
            ),
            (
                "kv_tokens_reserved",
                "KV positions the running requests have reserved (with slots: each reserves its "
                "prompt and a piece of its answer, and another piece as it fills them).",
                load.kv_tokens_reserved,
            ),
            (
                "kv_tokens_cached",
                "KV positions written and kept (with slots: every slot's cache).",
                load.kv_tokens_cached,
            ),
            (
                "kv_tokens_capacity",
                "KV positions the server may hold (with slots: their shared budget).",
                load.kv_tokens_capacity,
            ),
        )
        for name, text, value in gauges:
            _family(lines, name, "gauge", text, [({}, value)])
        batch_totals = (
            (
                "prompt_tokens_shared_total",
                "Prompt positions copied from another slot's cache instead of prefilled.",
                load.shared_positions,
            ),
            (
                "preemptions_total",
                "Requests whose KV was dropped so that older ones could grow (computed again "
                "when room came back; the client sees a pause).",
                load.preemptions,
            ),
            (
                "recomputed_tokens_total",
                "KV positions computed again after a pre-emption.",
                load.recomputed_positions,
            ),
            ("batched_steps_total", "Decode steps run on the slots.", load.batched_steps),
            (
                "batched_rows_total",
                "Sequences the slots' decode steps carried, all together (over the steps: "
                "sequences decoded together).",
                load.batched_rows,
            ),
        )
        for name, text, value in batch_totals:
            _family(lines, name, "counter", text, [({}, value)])
        return "\n".join(lines) + "\n"


def _family(
    lines: list[str],
    name: str,
    kind: str,
    text: str,
    samples: list[tuple[dict[str, str], float]],
) -> None:
    full = PREFIX + name
    lines.append(f"# HELP {full} {text}")
    lines.append(f"# TYPE {full} {kind}")
    for labels, value in samples:
        shown = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{full}{{{shown}}} {_number(value)}" if shown else f"{full} {_number(value)}")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def slot_views(
    running: Iterable[ServedRequest],
    batch: SlotBatch | None,
    n_ctx: int,
    with_prompts: bool = False,
) -> list[dict[str, Any]]:
    """llama.cpp's /slots: each slot, its cache and the request on it (its prompt only when
    asked); `batch` None: the one-request-at-a-time server's one slot. Read without waiting for
    a model run."""
    on_slot = {r.slot if r.slot is not None else 0: r for r in running}
    cached = [len(loop.cached) for loop in batch.loops] if batch else [None]
    reserved = [batch.reservation(i) for i in range(batch.size)] if batch else [None]
    preempted = list(batch.preempted) if batch else [False]
    now = time.perf_counter()
    views = []
    for index, cached_tokens in enumerate(cached):
        request = on_slot.get(index)
        view: dict[str, Any] = {
            "id": index,
            "n_ctx": n_ctx,
            "is_processing": request is not None,
        }
        if cached_tokens is not None:
            view["cached_tokens"] = cached_tokens
            view["reserved_tokens"] = reserved[index]
            view["preempted"] = preempted[index]
        if request is not None:
            view["request"] = _request_view(request, now, with_prompts)
        views.append(view)
    return views


def _request_view(request: ServedRequest, now: float, with_prompt: bool) -> dict[str, Any]:
    req = request.request
    started = request.started_at if request.started_at is not None else now
    view: dict[str, Any] = {
        "id": request.id,
        "running_s": round(now - started, 3),
        "queued_s": round(started - request.queued_at, 3),
        "prompt_tokens": request.prompt_tokens,
        "generated_tokens": request.generated_tokens,
        "max_tokens": req.answer.settings.max_new_tokens,
        "loop": str(req.answer.mode),
        "stream": req.stream,
    }
    if with_prompt:
        asked = req.answer
        view["prompt"] = (
            asked.text if asked.text is not None else [m.as_dict() for m in asked.messages]
        )
    return view


def retry_after_s(records: Iterable[RequestRecord]) -> int:
    """Seconds a refused client should wait: the median of the last requests' run times
    (1 to 60 s; 1 before any has ended)."""
    runs = sorted(r.finished_at - r.started_at for r in list(records)[-16:])
    median = runs[len(runs) // 2] if runs else 1.0
    return max(1, min(60, round(median)))
