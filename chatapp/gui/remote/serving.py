"""File > Serve this model: `chatapp serve`'s HTTP side for the window's own local model.

Why the window's engine and not a second one: a second Engine would hold the model twice
(weights, KV buffers, the tokenizer) and need its own thread. Here the server's `EngineWorker`
is made on the window's engine service (session/engine_service.py, the one owner of the
engine's thread): uvicorn's thread submits every request to it as a job, so served requests
and the chat's answers take turns in arrival order and never touch the engine at once. While a
request is answered, an answer asked for in the window waits, and the other way round.

Threads: the request side is made on the engine's thread (it reads the engine), the socket is
bound and uvicorn started on the window's tool thread (starting waits until it listens, up to
30 s: never on the GUI thread, never behind an answer), and stopped there too (its end waits
up to 10 s for open streams). A request still waiting when serving stops is answered 503 at
once rather than left waiting behind the chat's answer.

With several slots (the dialog's "Requests at once", `chatapp serve --parallel N`), the
worker answers through the batch's loop that the same service's thread runs
(engine/batch_loop.py, engine/slots.py): up to N requests decode together on the IO-Binding
loop, beside the chat's answers (a pass after each of its tokens), each on its own KV cache (the
engine's `slots` checks their memory as the command line does). Stopping cancels them all; they
end within a pass.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.engine.errors import EngineError
from chatapp.engine.modes import Mode
from chatapp.engine.slots import slots_refusal
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.workers import JobError, JobRunner
from chatapp.session.jobs import Job, JobControl, failed
from chatapp.session.model_jobs import EngineHost

if TYPE_CHECKING:
    from chatapp.engine.slots import SlotBatch
    from chatapp.server.runner import ServerThread
    from chatapp.server.worker import EngineWorker

log = logging.getLogger(__name__)
HOST = "127.0.0.1"  # only programs on this machine (docs/server.md: other addresses need a key)
DEFAULT_PORT = 8000  # chatapp serve's; the user chooses another in the dialog (serve_dialog.py)


@dataclass(frozen=True)
class Serving:
    url: str  # http://127.0.0.1:PORT/v1
    model: str  # the id clients use
    port: int
    slots: int = 1  # requests decoded together


class WindowServer(QObject):
    """Starts and stops the HTTP server; answers its requests on the window's JobRunner."""

    sig_started = Signal(object)  # Serving
    sig_failed = Signal(str)  # why it could not start
    sig_stopped = Signal()
    sig_answered = Signal(int)  # requests answered since it started
    _sig_request_answered = Signal()  # the engine's thread ended a request

    def __init__(
        self,
        runner: JobRunner,
        host: EngineHost,
        parent: QObject | None = None,
        tools: JobRunner | None = None,
    ):
        super().__init__(parent)
        self.runner = runner
        self.tools = tools or runner  # where the HTTP server starts
        self.host = host
        self.port = DEFAULT_PORT  # tests use 0 (a free port)
        self.serving: Serving | None = None
        self.answered = 0
        self._worker: EngineWorker | None = None
        self._server: ServerThread | None = None
        self._lock = threading.Lock()
        self._starting = False
        self._cancelled = False  # stop() came while the server was starting
        self._batch: SlotBatch | None = None  # with several slots
        self._sig_request_answered.connect(self._on_answered)

    @property
    def active(self) -> bool:
        return self.serving is not None or self._starting

    def busy_slots(self) -> tuple[int, int]:
        """(requests being answered, slots) while serving."""
        batch, worker = self._batch, self._worker
        if batch is not None:
            return batch.busy, batch.size
        return (0 if worker is None or worker.running is None else 1), 1

    @property
    def worker(self) -> EngineWorker | None:
        """The server's request side while serving (its `records` say what became of each)."""
        return self._worker

    # ---- starting and stopping (GUI thread) -------------------------------------------------
    def start(self, mode: str, port: int | None = None, slots: int = 1) -> bool:
        """Serve the loaded local model, with `mode` as the loop when a request names none
        (with several `slots`, the IO-Binding loop: they decode together on it); answers with
        sig_started or sig_failed."""
        if self.active:
            return False
        try:
            from chatapp.server.worker import EngineWorker
        except ImportError as exc:
            emit(
                self.sig_failed,
                f"Serving needs the server extra ({exc.name} is missing): "
                "pip install 'chatapp[server]'.",
            )
            return False
        self._starting = True
        self._cancelled = False
        wanted = self.port if port is None else port

        def make_worker(_control: JobControl) -> EngineWorker:
            engine = self.host.require()  # on the engine's own thread
            refusal = slots_refusal(engine.info, engine.device) if slots > 1 else None
            if refusal is not None:  # this model or device cannot batch: one at a time
                log.info("serving one request at a time: %s", refusal)
            service, stopped = self.runner.service, "The window stopped serving this model."
            if slots == 1 or refusal is not None:
                return EngineWorker(
                    engine, mode, log=self._log_request, service=service, closed_message=stopped
                )
            # Refused here where the slots' KV budget would take more than half the memory
            # (engine/model_description.py), as `chatapp serve` is.
            self._batch = engine.slots(slots)
            return EngineWorker(
                engine,
                Mode.IOBINDING,
                log=self._log_request,
                parallel=slots,
                service=service,
                closed_message=stopped,
            )

        def explain(exc: BaseException) -> str:
            if isinstance(exc, EngineError):
                return f"Could not serve {slots} requests at once: {exc}"
            return failed("Starting the server", exc)

        handle = self.runner.submit(Job("serving setup", make_worker, explain))
        handle.sig_finished.connect(lambda worker: self._listen(worker, wanted))
        handle.sig_errored.connect(self._on_setup_failed)
        return True

    def _listen(self, worker: EngineWorker, port: int) -> None:
        """Bind and start uvicorn on the tool thread; sig_started or sig_failed then."""
        if self._cancelled:
            self._starting = False
            self._drop_batch()
            worker.close()
            return
        handle = self.tools.submit(
            Job(
                "server start",
                lambda _control: self._start_http(worker, port),
                lambda exc: _start_failed(exc, port),
            )
        )
        handle.sig_finished.connect(self._on_listening)
        handle.sig_errored.connect(self._on_setup_failed)

    def _start_http(self, worker: EngineWorker, port: int) -> ServerThread | None:
        """The tool thread: listen on `port` (0: any free one; a port in use is an error the
        user is told, not silently another address); None if stop() came meanwhile."""
        from chatapp.server.app import ShutdownNotice, build_app
        from chatapp.server.runner import ServerThread, bind

        try:
            sock = bind(HOST, port)
            self._worker = worker
            shutdown = ShutdownNotice()  # stopping ends open streams at once, with a word
            app = build_app(worker, shutdown=shutdown)
            server = ServerThread.start(app, sock, on_exit=shutdown.trigger)
        except BaseException:
            self._worker = None
            worker.close()
            raise
        with self._lock:
            if not self._cancelled:
                self._server = server
                return server
        self._worker = None
        worker.close()
        server.stop()
        return None

    @Slot(object)
    def _on_listening(self, server: ServerThread | None) -> None:
        self._starting = False
        worker = self._worker
        if server is None or worker is None:
            return  # stopped while starting
        self.answered = 0
        actual = int(server.url.rsplit(":", 1)[1])
        self.serving = Serving(f"{server.url}/v1", worker.card.id, actual, worker.parallel)
        log.info("serving %s at %s", worker.card.id, self.serving.url)
        emit(self.sig_started, self.serving)

    @Slot(object)
    def _on_setup_failed(self, error: JobError) -> None:
        self._starting = False
        self._drop_batch()
        emit(self.sig_failed, error.message)

    def stop(self, wait: bool = False) -> None:
        """Stop listening: waiting requests get a 503, the running one stops within a step.
        While the server is starting, it stops as soon as it has started. uvicorn's end
        (up to 10 s with open streams) is awaited on the tool thread, queued before any new
        start there (so a restart finds the port free); `wait`: here (the window closing,
        when the tool thread is about to end)."""
        with self._lock:
            if self._starting and self._server is None:
                self._cancelled = True
        worker, server = self._worker, self._server
        if worker is None or server is None:
            return
        # Answers the waiting requests (503), cancels those being answered; they end within a
        # pass of the batch's loop (waited for only when the window closes).
        worker.close(10.0 if wait else 0.0)
        if wait:
            server.stop()
        else:
            self.tools.submit(Job("server stop", lambda _control: server.stop()))
        self._worker = self._server = None
        if wait:  # the window is closing: the engine goes with it
            self._batch = None
        else:
            self._drop_batch()
        self.serving = None
        log.info("stopped serving")
        emit(self.sig_stopped)

    def _drop_batch(self) -> None:
        """Forget the slots and have the engine's thread free their KV caches (queued there: a
        later start's setup, which makes slots again, runs after it)."""
        if self._batch is not None:
            self.runner.submit(Job("slots released", lambda _control: self._release_slots()))
        self._batch = None

    def _release_slots(self) -> None:
        """The engine's thread: drop the slots (their caches go once no request holds them)."""
        engine = self.host.engine
        if engine is not None:
            engine.release_slots()

    # ---- requests ---------------------------------------------------------------------------
    def _log_request(self, line: str) -> None:
        """The worker's log line, on the engine's thread or a slot's; each request it ends
        says so in one ("request N: ...")."""
        log.info(line)
        if line.startswith("request "):
            emit(self._sig_request_answered)

    @Slot()
    def _on_answered(self) -> None:
        if self.serving is not None:
            self.answered += 1
            emit(self.sig_answered, self.answered)


def _start_failed(exc: BaseException, port: int) -> str:
    from chatapp.server.runner import PortUnavailable

    if isinstance(exc, PortUnavailable):
        return (
            f"Port {port} is in use by another program: turn on File > Serve this model over "
            "HTTP again and choose another port (0 takes any free one)."
        )
    if isinstance(exc, RuntimeError | OSError):
        return f"Could not start serving: {exc}"
    return failed("Starting the server", exc)
