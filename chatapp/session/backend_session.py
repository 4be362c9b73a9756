"""The backend session without Qt: what answers the chat and what it is doing.

`BackendSession` owns the local model (loaded by the engine's worker), the backend connected
instead of it (a server, remote_jobs.py), conversions (on a second worker, `submit_tool`, so
they never wait behind an answer) and the state every request checks. The chat (chat.py) asks
it for answers' state changes and the CPU fallback; what happens is told as `BackendEvents`.

State: NO_MODEL -> LOADING -> READY <-> GENERATING; CONVERTING from READY or NO_MODEL and back
to where it came from. Nothing is asked of a worker while a request of the same kind is under
way (`busy`), so listeners see every state change in order.
"""

from __future__ import annotations

import gc
from enum import Enum
from pathlib import Path

from chatapp.engine.backend import BackendCard, Capabilities
from chatapp.engine.engine import LOCAL_CAPABILITIES
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.guards import DEFAULT_PRECISION
from chatapp.engine.modes import Mode
from chatapp.session.events import Event, EventGroup
from chatapp.session.jobs import JobError
from chatapp.session.model_jobs import (
    ConvertPlan,
    ConvertRequest,
    EngineHost,
    LoadRequest,
    ModelSummary,
    Progress,
    convert_job,
    cpu_fallback_job,
    load_job,
    named_figures,
)
from chatapp.session.remote_jobs import ConnectRequest, connect_job, disconnect_job
from chatapp.session.running import JobWatcher, RunningJob, Submit, YieldedBatch


class State(Enum):
    NO_MODEL = "no-model"
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    CONVERTING = "converting"


class BackendEvents(EventGroup):
    def __init__(self) -> None:
        self.state_changed: Event[[State]] = Event("state_changed")
        self.model_loaded: Event[[ModelSummary]] = Event("model_loaded")
        self.load_failed: Event[[str]] = Event("load_failed")  # a load or a connection
        # The card of a backend connected instead of the local model (a server), or None
        # (back to the local model).
        self.backend_changed: Event[[BackendCard | None]] = Event("backend_changed")
        self.convert_progress: Event[[float, str]] = Event("convert_progress")
        self.convert_planned: Event[[str]] = Event("convert_planned")  # disk, memory
        self.converted: Event[[Path]] = Event("converted")
        self.convert_failed: Event[[str]] = Event("convert_failed")


class BackendSession:
    def __init__(
        self, submit: Submit, host: EngineHost | None = None, submit_tool: Submit | None = None
    ) -> None:
        self.submit = submit  # the engine's worker: one job at a time
        self.submit_tool = submit_tool or submit  # work that never touches the engine
        self.host = host or EngineHost()
        self.events = BackendEvents()
        self.model: ModelSummary | None = None  # the local model
        # The card of the backend answering instead (a server's), if any.
        self.remote: BackendCard | None = None
        self.state = State.NO_MODEL
        self._conversion: RunningJob | None = None
        self._state_before_conversion = State.NO_MODEL

    @property
    def backend(self) -> ModelSummary | BackendCard | None:
        """What answers the chat: the connected backend's card, else the local model."""
        return self.remote if self.remote is not None else self.model

    @property
    def capabilities(self) -> Capabilities:
        """What the backend answering now can do (a model run here: everything)."""
        return self.remote.capabilities if self.remote is not None else LOCAL_CAPABILITIES

    @property
    def busy(self) -> bool:
        return self.state in (State.LOADING, State.GENERATING, State.CONVERTING)

    def set_state(self, state: State) -> None:
        if state is not self.state:
            self.state = state
            self.events.state_changed.emit(state)

    def settle(self) -> None:
        """READY when something can answer, else NO_MODEL (after a failure)."""
        self.set_state(State.READY if self.backend is not None else State.NO_MODEL)

    # ---- model ----------------------------------------------------------------------------
    def open_model(
        self,
        folder: Path | str,
        device: str = "cpu",
        threads: int | None = None,
        mode: str = "",
        onnx_file: str | None = None,
        precision: str = DEFAULT_PRECISION,
    ) -> bool:
        """Ask the worker to load a model; answers with model_loaded or load_failed."""
        if self.busy:
            return False
        mode_ = Mode(mode or Mode.IOBINDING)
        request = LoadRequest(Path(folder), device, threads, mode_, onnx_file, precision)
        self.set_state(State.LOADING)
        self.submit(load_job(self.host, request), self._load_watcher())
        return True

    def fall_back_to_cpu(self, detail: str) -> None:
        """The same model on the CPU after a device fault, queued before any next answer."""
        self.submit(cpu_fallback_job(self.host, detail), self._load_watcher())

    def _load_watcher(self) -> JobWatcher:
        return JobWatcher(on_finished=self._on_model_loaded, on_errored=self._on_load_failed)

    def _on_model_loaded(self, summary: ModelSummary) -> None:
        self.model = summary
        _exempt_long_lived_objects()
        self.set_state(State.READY)
        self.events.model_loaded.emit(summary)
        if self.remote is not None:
            self._set_remote(None)  # opening a local model ended the connection (load_job)

    def _on_load_failed(self, error: JobError) -> None:
        self.settle()  # a failed load (or connection) keeps the previous backend
        self.events.load_failed.emit(error.message)

    # ---- remote server (remote_jobs.py) ----------------------------------------------------
    def connect_remote(self, request: ConnectRequest) -> bool:
        """Chat with a server from the next answer on; answers with backend_changed or
        load_failed."""
        if self.busy:
            return False
        self.set_state(State.LOADING)
        watcher = JobWatcher(on_finished=self._on_connected, on_errored=self._on_load_failed)
        self.submit(connect_job(self.host, request), watcher)
        return True

    def disconnect_remote(self) -> bool:
        """Back to the local model."""
        if self.remote is None or self.busy:
            return False
        # The worker takes the local model back first: what the news starts (the chat's
        # context count) runs after, on the local model, not on the server that cannot count.
        self.submit(disconnect_job(self.host), JobWatcher())
        self._set_remote(None)
        self.settle()
        return True

    def _on_connected(self, card: BackendCard) -> None:
        self._set_remote(card)
        self.set_state(State.READY)

    def _set_remote(self, card: BackendCard | None) -> None:
        self.remote = card
        self.events.backend_changed.emit(card)

    def named(self, figures: AnswerFigures) -> AnswerFigures:
        """An answer's figures name the model, variant and precision that wrote it."""
        card, model = self.remote, self.model
        if card is not None:  # the card's: a server names no variant or precision of ours
            precision, variant = card.fact("Precision").value, card.fact("Variant").value
            return named_figures(figures, card.name, precision, variant)
        if model is None:
            return named_figures(figures, None, None)
        return named_figures(figures, model.name, model.precision, model.onnx_file or None)

    # ---- conversion (on the tool worker: it never touches the engine) -----------------------
    def convert_gguf(
        self, gguf: Path, out_dir: Path, graph: str = "auto", attention: str = "gqa"
    ) -> bool:
        """Convert off the engine's worker; `graph` and `attention` as `chatapp convert`'s."""
        if self.busy:
            return False
        self._state_before_conversion = self.state
        self.set_state(State.CONVERTING)
        watcher = JobWatcher(
            self._on_convert_progress,
            self._on_converted,
            lambda error: self._on_convert_failed(error.message),
            self._on_convert_failed,
        )
        job = convert_job(ConvertRequest(Path(gguf), Path(out_dir), graph, attention))
        self._conversion = self.submit_tool(job, watcher)
        return True

    def cancel_conversion(self) -> None:
        if self._conversion is not None:
            self._conversion.stop()

    def _on_convert_progress(self, batch: YieldedBatch) -> None:
        for plan in (item for item in batch.items if isinstance(item, ConvertPlan)):
            self.events.convert_planned.emit(plan.line)
        progress = [item for item in batch.items if isinstance(item, Progress)]
        if progress:
            self.events.convert_progress.emit(progress[-1].fraction, progress[-1].message)

    def _on_converted(self, folder: Path) -> None:
        self._conversion = None
        self.set_state(self._state_before_conversion)
        self.events.converted.emit(folder)

    def _on_convert_failed(self, message: str) -> None:
        self._conversion = None
        self.set_state(self._state_before_conversion)
        self.events.convert_failed.emit(message)


def _exempt_long_lived_objects() -> None:
    """A full garbage collection walks every object the app keeps (~100k: Qt wrappers, the
    tokenizer, the engine) and holds the GIL for 60-170 ms, freezing the window if it falls in
    the middle of an answer. Collect once now, at load time, then leave those objects out of
    later collections. What the previous load exempted is put back first, so that a model
    replaced since then can still be collected."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
