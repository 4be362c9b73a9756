"""The generation worker: a QObject living in its own QThread that owns the Engine.

Requests arrive over queued signals (the controller's `sig_*_requested` are connected to the
slots below, and because this object lives in another thread Qt queues the calls). Results go
out as signals. The GUI thread never waits on this object: `request_stop` only sets a number
that the generation loop reads between steps.

Like Spyder's find-in-files worker, exceptions never leave a slot: they become `sig_error` /
`sig_load_failed` messages. Token deltas are batched (at most one `sig_token` every
`flush_interval_s`) so a model that makes thousands of tokens per second cannot flood the
GUI's event queue.
"""

from __future__ import annotations

import copy
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from chatapp.convert.errors import ConversionError
from chatapp.engine.chat import Message
from chatapp.engine.devices import DeviceError
from chatapp.engine.engine import Engine
from chatapp.engine.errors import DeviceFailure, EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.common.qtcompat import emit
from chatapp.session.context import ContextRequest, counter_for, fit_messages
from chatapp.session.conversation import AnswerFigures

FLUSH_INTERVAL_S = 0.03
perf = time.perf_counter


@dataclass(frozen=True)
class LoadRequest:
    model_dir: Path
    device: str = "cpu"
    threads: int | None = None
    mode: str = "iobinding"
    onnx_file: str | None = None  # which graph of the folder (None: the folder's default)


@dataclass(frozen=True)
class ModelSummary:
    """What the GUI may know about the loaded engine (the engine itself stays in the thread)."""

    folder: Path
    name: str
    description: str
    layout: str
    device: str
    device_label: str
    device_own_memory: bool  # whether bytes cross a host <-> device boundary
    requested_device: str
    fallback_reason: str | None
    context_length: int  # the model's
    max_context: int  # what this engine allocated
    threads: int | None
    onnx_file: str = ""  # the graph opened, relative to the folder


@dataclass(frozen=True)
class GenerateRequest:
    request_id: int
    messages: tuple[Message, ...]
    settings: SamplingSettings
    mode: str


@dataclass(frozen=True)
class TokenBatch:
    """Tokens produced since the last flush."""

    request_id: int
    first_index: int  # index of the first token in this batch
    text: str
    token_ids: tuple[int, ...]
    latencies_s: tuple[float, ...]  # per token; the first token's is its TTFT


@dataclass(frozen=True)
class StatsSnapshot:
    """A copy of the running RunStats (the worker keeps mutating the original)."""

    request_id: int
    figures: AnswerFigures

    @classmethod
    def of(cls, request_id: int, stats: RunStats) -> StatsSnapshot:
        return cls(request_id, AnswerFigures.from_stats(stats))


@dataclass(frozen=True)
class AnswerResult:
    request_id: int
    text: str
    stats: RunStats  # a private copy, safe to read in the GUI thread


@dataclass(frozen=True)
class GenerationFailure:
    request_id: int
    message: str  # a sentence for the user
    stats: RunStats | None  # figures up to the failure, if generation had started


@dataclass(frozen=True)
class ConvertRequest:
    gguf: Path
    out_dir: Path


class ConversionCancelled(Exception):
    """Raised from the progress callback to abandon a conversion (the converter cleans up)."""


class GenerationWorker(QObject):
    sig_model_loaded = Signal(object)  # ModelSummary
    sig_load_failed = Signal(str)
    sig_started = Signal(int)  # request id
    sig_token = Signal(object)  # TokenBatch
    sig_stats = Signal(object)  # StatsSnapshot
    sig_finished = Signal(object)  # AnswerResult
    sig_error = Signal(object)  # GenerationFailure
    sig_context = Signal(object)  # ContextReport: what of the conversation the model sees
    sig_convert_progress = Signal(float, str)
    sig_converted = Signal(object)  # Path of the model folder
    sig_convert_failed = Signal(str)

    def __init__(self, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        super().__init__()
        self.engine: Engine | None = None
        self.flush_interval_s = flush_interval_s
        # Written by the GUI thread, read here between steps: a plain int is enough (the GIL
        # makes the store atomic) and, unlike an Event, cannot be cleared by a late request.
        self._stop_through = 0
        self._cancel_conversion = threading.Event()

    # ---- called from any thread -------------------------------------------------------
    def request_stop(self, request_id: int) -> None:
        """Stop request `request_id` (and any earlier one) after its current step."""
        self._stop_through = max(self._stop_through, request_id)

    def cancel_conversion(self) -> None:
        self._cancel_conversion.set()

    # ---- slots: run in the worker thread ------------------------------------------------
    @Slot(object)
    def load(self, request: LoadRequest) -> None:
        try:
            engine, reason = self._open_engine(request)
        except (EngineError, DeviceError, OSError) as exc:
            emit(
                self.sig_load_failed,
                f"Could not open the model in {request.model_dir}: {_sentence(exc)}",
            )
            return
        except Exception as exc:  # onnxruntime raises its own types for broken graphs
            emit(
                self.sig_load_failed,
                f"Could not open the model in {request.model_dir}: "
                f"{type(exc).__name__}: {_first_line(exc)}",
            )
            return
        # Only replace the old engine once the new one works: a failed load keeps the chat going.
        self.engine = engine
        emit(self.sig_model_loaded, _summary(engine, request.device, reason))

    def _fall_back_to_cpu(self, failure: DeviceFailure) -> None:
        """After the device failed mid-answer: the same model on the CPU for the next one."""
        assert self.engine is not None
        requested = self.engine.device.name
        reason = f"{failure} Running on the CPU."
        try:
            self.engine.fall_back_to_cpu(reason)
        except Exception as exc:  # even the CPU session did not start: say so, keep the chat
            emit(self.sig_load_failed, f"The model could not be restarted on the CPU: {exc}")
            return
        emit(self.sig_model_loaded, _summary(self.engine, requested, reason))

    def _open_engine(self, request: LoadRequest) -> tuple[Engine, str | None]:
        try:
            engine = Engine(
                request.model_dir,
                request.device,
                request.mode,
                threads=request.threads,
                onnx_file=request.onnx_file,
            )
            return engine, engine.fallback_reason
        except DeviceError as exc:
            # A device this machine does not offer (a setting from another machine, or a
            # typo on the command line): say so and run on the CPU rather than not at all.
            engine = Engine(
                request.model_dir,
                "cpu",
                request.mode,
                threads=request.threads,
                onnx_file=request.onnx_file,
            )
            return engine, f"{exc} Running on the CPU."

    @Slot(object)
    def generate(self, request: GenerateRequest) -> None:
        rid = request.request_id
        emit(self.sig_started, rid)
        if self.engine is None:
            emit(self.sig_error, GenerationFailure(rid, "No model is loaded yet.", None))
            return
        stats: RunStats | None = None
        batch = _Batch(rid)
        try:
            # Context policy: the oldest turns that no longer fit are not sent (see context.py).
            messages, report = fit_messages(
                rid,
                request.messages,
                counter_for(self.engine),
                self.engine.max_context,
                request.settings.max_new_tokens,
            )
            emit(self.sig_context, report)
            gen = self.engine.chat(
                messages,
                request.settings,
                request.mode,
                should_stop=lambda: self._stop_through >= rid,
            )
            stats = gen.stats
            last_flush = 0.0
            for event in gen:
                batch.add(event.index, event.text, event.token_id, event.latency_s)
                now = perf()
                # The first token goes out at once (it is the TTFT the user waits for).
                if event.index == 0 or now - last_flush >= self.flush_interval_s:
                    self._flush(batch, stats)
                    last_flush = now
            # The detokenizer may hold back a last partial character until the end.
            streamed = batch.sent_text + "".join(batch.text)
            if gen.text.startswith(streamed):
                batch.text.append(gen.text[len(streamed) :])
            self._flush(batch, stats, force=True)
            emit(self.sig_finished, AnswerResult(rid, gen.text, copy.deepcopy(stats)))
        except DeviceFailure as exc:
            self._fail(batch, stats, rid, f"{exc} The next answer runs on the CPU.")
            self._fall_back_to_cpu(exc)
        except EngineError as exc:
            self._fail(batch, stats, rid, str(exc))
        except ValueError as exc:  # SamplingSettings.validate
            self._fail(batch, stats, rid, f"Invalid sampling settings: {exc}.")
        except Exception as exc:
            traceback.print_exc()  # for whoever runs from a terminal
            self._fail(
                batch,
                stats,
                rid,
                f"Generation failed: {type(exc).__name__}: {_first_line(exc)}",
            )

    @Slot(object)
    def measure_context(self, request: ContextRequest) -> None:
        """Report what the context policy would send now (no answer is generated)."""
        if self.engine is None:
            return
        try:
            _, report = fit_messages(
                request.request_id,
                request.messages,
                counter_for(self.engine),
                self.engine.max_context,
                request.max_new_tokens,
            )
        except Exception:  # a template that rejects the messages: the answer will say so
            traceback.print_exc()
            return
        emit(self.sig_context, report)

    def _flush(self, batch: _Batch, stats: RunStats, force: bool = False) -> None:
        if batch.pending or force:
            token_batch = batch.take()
            if token_batch is not None:
                emit(self.sig_token, token_batch)
            emit(self.sig_stats, StatsSnapshot.of(batch.request_id, stats))

    def _fail(self, batch: _Batch, stats: RunStats | None, rid: int, message: str) -> None:
        if stats is not None:
            self._flush(batch, stats)  # what was made before the fault stays visible
            stats = copy.deepcopy(stats)
            stats.finish_reason = "error"
        emit(self.sig_error, GenerationFailure(rid, message, stats))

    @Slot(object)
    def convert(self, request: ConvertRequest) -> None:
        from chatapp.convert.converter import (
            ConvertOptions,
            convert_gguf,
            is_verified_copy,
            sha256_file,
        )

        self._cancel_conversion.clear()
        try:
            emit(self.sig_convert_progress, 0.0, "checking the source file")
            if request.out_dir.is_dir() and is_verified_copy(
                request.out_dir, sha256_file(request.gguf)
            ):
                emit(self.sig_converted, request.out_dir)  # converted before: reuse it
                return
            convert_gguf(
                request.gguf,
                request.out_dir,
                ConvertOptions(overwrite=True),
                _throttled_progress(self._report_conversion, self._cancel_conversion),
            )
        except ConversionCancelled:
            emit(self.sig_convert_failed, "The conversion was cancelled.")
            return
        except ConversionError as exc:
            emit(self.sig_convert_failed, str(exc))
            return
        except Exception as exc:
            traceback.print_exc()
            emit(
                self.sig_convert_failed,
                f"Converting {request.gguf.name} failed: {type(exc).__name__}: {_first_line(exc)}",
            )
            return
        emit(self.sig_converted, request.out_dir)

    def _report_conversion(self, fraction: float, message: str) -> None:
        emit(self.sig_convert_progress, fraction, message)


def _summary(engine: Engine, requested_device: str, reason: str | None) -> ModelSummary:
    return ModelSummary(
        folder=engine.info.folder,
        name=engine.info.name,
        description=engine.info.describe(),
        layout=engine.info.layout.value,
        device=engine.device.name,
        device_label=engine.device.label,
        device_own_memory=engine.device.own_memory,
        requested_device=requested_device,
        fallback_reason=reason,
        context_length=engine.info.context_length,
        max_context=engine.max_context,
        threads=engine.threads,
        onnx_file=engine.info.onnx_file,
    )


class _Batch:
    """Token deltas collected between two flushes."""

    def __init__(self, request_id: int) -> None:
        self.request_id = request_id
        self.first_index = 0
        self.text: list[str] = []
        self.ids: list[int] = []
        self.latencies: list[float] = []
        self.sent_text = ""

    @property
    def pending(self) -> bool:
        return bool(self.ids or any(self.text))

    def add(self, index: int, text: str, token_id: int, latency_s: float) -> None:
        if not self.ids:
            self.first_index = index
        self.text.append(text)
        self.ids.append(token_id)
        self.latencies.append(latency_s)

    def take(self) -> TokenBatch | None:
        if not self.pending:
            return None
        text = "".join(self.text)
        out = TokenBatch(
            self.request_id, self.first_index, text, tuple(self.ids), tuple(self.latencies)
        )
        self.sent_text += text
        self.first_index += len(self.ids)
        self.text, self.ids, self.latencies = [], [], []
        return out


def _throttled_progress(
    report: Callable[[float, str], None], cancelled: threading.Event, interval_s: float = 0.05
) -> Callable[[float, str], None]:
    """Forward converter progress at most every `interval_s` (and on every new step name)."""
    last = {"t": 0.0, "msg": ""}

    def progress(fraction: float, message: str) -> None:
        if cancelled.is_set():
            raise ConversionCancelled
        now = perf()
        if message != last["msg"] or now - last["t"] >= interval_s or fraction >= 1.0:
            last["t"], last["msg"] = now, message
            report(fraction, message)

    return progress


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else "no details"


def _sentence(exc: BaseException) -> str:
    text = _first_line(exc) if not isinstance(exc, EngineError | DeviceError) else str(exc)
    return text if text.endswith((".", "!", "?")) else text + "."


class WorkerThread:
    """The QThread and its worker, started together and stopped together."""

    def __init__(self, worker: GenerationWorker | None = None) -> None:
        self.worker = worker or GenerationWorker()
        self.thread = QThread()
        self.thread.setObjectName("GenerationWorkerThread")
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop(self, timeout_ms: int = 60000) -> bool:
        """Stop any answer or conversion, then end the thread; True once it has ended."""
        self.worker.request_stop(1 << 62)
        self.worker.cancel_conversion()
        self.thread.quit()
        return bool(self.thread.wait(timeout_ms))
