"""The engine's one owner, and the jobs that open, convert and prepare models. No Qt.

`EngineHost` holds the window's loaded model and the chat's Engine over it (its context, made
by the first job that needs it: a load starts the model alone), and the backend the chat talks
to instead when one is connected (a server: session/remote_jobs.py). Only jobs touch them,
and the window's engine service (session/engine_service.py, which its JobRunner submits to)
runs jobs one at a time on its one thread, so each is only ever used from that thread: the
chat, the comparison view, a model load and a served request never run at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from chatapp.convert.errors import ConversionError
from chatapp.engine.backend import Backend
from chatapp.engine.devices import DeviceError
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError, ModelError
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.guards import DEFAULT_PRECISION
from chatapp.engine.loaded_model import DevicePlan, LoadedModel, open_model, start_with_loop
from chatapp.engine.loops import KVLoop
from chatapp.engine.mapped_weights import dropping_sessions, return_freed_heap
from chatapp.engine.model_description import ModelSampling, read_model
from chatapp.engine.model_folder.variants import Variant, list_variants
from chatapp.engine.modes import Mode
from chatapp.error_text import first_line
from chatapp.session.answer import fall_back_to_cpu
from chatapp.session.jobs import NO_DETAILS, Job, JobAborted, JobControl, failed

log = logging.getLogger(__name__)

PREPARATION_CANCELLED = (
    "Preparing the default model was cancelled. Open a model folder from the File menu, or "
    "restart chatapp to prepare it."
)


class EngineHost:
    """Owns the loaded model and the chat's Engine over it (None before the first load), and
    a connected backend (None unless File > Connect to server); the chat uses the connected
    one while there is one."""

    def __init__(self) -> None:
        self._model: LoadedModel | None = None  # started by the last load
        self._first: KVLoop | None = None  # the loop its start allocated (a device's)
        self._engine: Engine | None = None  # the chat's context over `model`, once asked for
        self.remote: Backend | None = None  # connected instead of the local engine
        self.loaded: LoadRequest | None = None  # what opened `model`, to open it again
        # Speculative decoding for the answers of every engine opened (the window's choice):
        # the engine reads it when an answer starts, so setting it needs no job.
        self.speculative = False

    @property
    def engine(self) -> Engine | None:
        """The loaded model with the chat's context (made on first use, by the job that
        needs it; a load makes none), or None before a model is loaded."""
        if self._engine is None and self._model is not None:
            engine = Engine.of(self._model, self._first)
            engine.speculative = self.speculative
            self._engine, self._first = engine, None
        return self._engine

    @engine.setter
    def engine(self, engine: Engine | None) -> None:
        """Hold `engine` (a model and its context) instead; None drops the model too."""
        self._engine, self._first = engine, None
        if engine is None:
            self._model = None

    def set_speculative(self, on: bool) -> None:
        self.speculative = on
        if self._engine is not None:
            self._engine.speculative = on

    def hold(self, model: LoadedModel, first: KVLoop | None, request: LoadRequest) -> None:
        """`model`, started by `request`, answers from now on; its first context (the chat's,
        `engine`) answers in `first`, the loop its start allocated on a device."""
        self.engine = None
        self._model, self._first, self.loaded = model, first, request

    def close_engine(self) -> LoadRequest | None:
        """Drop the local engine, its session and its buffers, and give their memory back
        before another model loads; returns what had opened it."""
        with dropping_sessions():  # ONNX Runtime unmaps the weights: no release meanwhile
            request, self.engine, self.loaded = self.loaded, None, None
            return_freed_heap()
        return request

    def held_bytes(self) -> int:
        """The memory the local model was estimated to hold (what closing it frees)."""
        held = self._engine or self._model
        return held.resident_estimate.total if held is not None else 0

    def require(self) -> Engine:
        """The local engine (the comparison and `Serve this model` need it)."""
        if self.engine is None:
            raise EngineError("No model is loaded yet.")
        return self.engine

    def backend(self) -> Backend:
        """What answers the chat: the connected backend if any, else the local engine."""
        return self.remote if self.remote is not None else self.require()

    def use_remote(self, remote: Backend | None) -> None:
        """Chat with `remote` from now on (None: the local engine again); the one it
        replaces is closed."""
        old, self.remote = self.remote, remote
        if old is not None and old is not remote:
            old.close()


@dataclass(frozen=True)
class LoadRequest:
    model_dir: Path
    device: str = "cpu"
    threads: int | None = None
    mode: Mode = Mode.IOBINDING
    onnx_file: str | None = None  # which graph of the folder (None: the folder's default)
    precision: str = DEFAULT_PRECISION  # the GGUF kernels' (guards.PRECISIONS)

    @property
    def plan(self) -> DevicePlan:
        """Where and how to run it. A device not offered here runs on the CPU with the reason
        (a setting from another machine); start_model decides every such fallback."""
        return DevicePlan(self.device, self.threads, self.precision, self.mode, cpu_if_missing=True)


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
    # The sampling the model suggests (generation_config.json or a preset by size).
    sampling: ModelSampling | None = None
    load_seconds: float = 0.0  # how long opening it took (0: not a load, e.g. a CPU fallback)
    kv_bytes_per_token: int = 0  # the KV cache of one token, all layers (the panel's notes)
    # Which kernels run the graph: "GGUF kernels, AVX2" (chatapp's native graph) or "ONNX
    # Runtime kernels" (the stock graph).
    kernels: str = ""
    # The GGUF kernels' precision ("fast", "exact"); None where none run (no such choice).
    precision: str | None = None
    # False for a model without a chat template (a base model): the window continues text.
    has_chat_template: bool = True
    default_system_prompt: str = ""  # what the template writes when a chat has none
    default_system_tokens: int = 0
    # Why speculative decoding cannot run on this engine (Engine.speculation_refusal); None
    # where it can.
    speculation_refusal: str | None = None


def named_figures(
    figures: AnswerFigures,
    model: str | None,
    precision: str | None,
    variant: str | None = None,
) -> AnswerFigures:
    """An answer's figures with the model that wrote it (a server's answer names its own),
    the variant (the graph in its folder) and the precision its GGUF kernels multiplied at
    (None where none ran), unless named already."""
    return replace(
        figures,
        model=figures.model or model,
        precision=figures.precision or precision,
        variant=figures.variant or variant,
    )


def load_job(host: EngineHost, request: LoadRequest) -> Job:
    """Open a model; returns a ModelSummary. The previous engine is closed first (two models
    at once could take twice the memory); a model that would not fit even then is refused
    before that, and a load that fails after it opens the previous model again."""

    def run(_control: JobControl) -> ModelSummary:
        started = time.perf_counter()
        # Read once, and refused here where it would not fit even with the current model
        # closed; the engine is then built from what was read.
        description = open_model(
            request.model_dir, request.device, request.onnx_file, freed=host.held_bytes()
        )
        previous = host.close_engine()
        try:
            model, first = start_with_loop(description, request.plan)
        except BaseException:
            _reopen(host, previous)  # the chat goes on with the model it had
            raise
        host.hold(model, first, request)
        host.use_remote(None)  # opening a local model ends a remote connection
        summary = summarize(model, request.mode, request.device)
        return replace(summary, load_seconds=time.perf_counter() - started)

    def explain(exc: BaseException) -> str:
        # onnxruntime raises its own types for broken graphs: name the type for those.
        expected = isinstance(exc, EngineError | DeviceError | OSError)
        detail = (
            _sentence(exc)
            if expected
            else f"{type(exc).__name__}: {first_line(exc, empty=NO_DETAILS)}"
        )
        return f"Could not open the model in {request.model_dir}: {detail}"

    return Job("model load", run, explain, (EngineError, DeviceError, OSError))


def _reopen(host: EngineHost, request: LoadRequest | None) -> None:
    if request is None:
        return
    try:
        description = open_model(request.model_dir, request.device, request.onnx_file)
        host.hold(*start_with_loop(description, request.plan), request)
    except Exception:  # the new model's error is the one to show; this one goes to the log
        log.exception("Could not open %s again after a failed load", request.model_dir)


def cpu_fallback_job(host: EngineHost, failure: object) -> Job:
    """After the device failed mid-answer (`failure`: DeviceFailure's sentence): the same
    model on the CPU for the next answer (answer.fall_back_to_cpu, as the server's);
    returns a ModelSummary (the failed device as the one asked for)."""

    def run(_control: JobControl) -> ModelSummary:
        engine = host.require()
        requested = engine.device.name
        fall_back_to_cpu(engine, str(failure))
        return summarize(engine.loaded, engine.mode, requested)

    # Even the CPU session did not start: say so; the chat stays.
    return Job(
        "CPU fallback",
        run,
        lambda exc: (
            f"The model could not be restarted on the CPU: {first_line(exc, empty=NO_DETAILS)}"
        ),
    )


def summarize(model: LoadedModel, mode: Mode, requested_device: str) -> ModelSummary:
    """What the GUI may know of `model`, whose chat answers in `mode`."""
    info, tokenizer = model.info, model.tokenizer
    default = tokenizer.default_system_prompt()
    return ModelSummary(
        folder=info.folder,
        name=info.name,
        description=info.describe(model.max_context),
        layout=info.layout.value,
        device=model.device.name,
        device_label=model.device.label,
        device_own_memory=model.device.own_memory,
        requested_device=requested_device,
        fallback_reason=model.fallback_reason,
        context_length=info.context_length,
        max_context=model.max_context,
        threads=model.threads,
        onnx_file=info.onnx_file,
        sampling=model.description.sampling,
        kv_bytes_per_token=info.kv_bytes_per_token(),
        kernels=model.kernels,
        precision=model.precision_in_effect,
        has_chat_template=tokenizer.has_template,
        default_system_prompt=default,
        default_system_tokens=len(tokenizer.encode(default)) if default else 0,
        speculation_refusal=model.speculation_refusal(mode),
    )


def _sentence(exc: BaseException) -> str:
    text = (
        str(exc)
        if isinstance(exc, EngineError | DeviceError)
        else first_line(exc, empty=NO_DETAILS)
    )
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass(frozen=True)
class GraphRead:
    """Reading graph `done + 1` of `total` in a folder, `name` (for a picker's progress)."""

    done: int
    total: int
    name: str


VARIANTS_CANCELLED = "Reading the model's graphs was cancelled."


def device_probe_job() -> Job:
    """The devices a session starts on here, CPU last (engine/device_probe.py runs a tiny graph
    on each, once per process: about a second with a GPU)."""
    from chatapp.engine.devices import available_devices

    return Job("device probe", lambda _control: available_devices(offers=True))


def variants_job(folder: Path) -> Job:
    """The ONNX graphs `folder` offers (size, precision), most precise first: a list of
    Variant. Yields a GraphRead before each graph; stopping ends it between graphs. A folder
    that cannot be listed gives [] (opening it then says what is wrong)."""

    def run(control: JobControl) -> list[Variant]:
        def before_each(done: int, total: int, name: str) -> None:
            if control.stopped:
                raise JobAborted(VARIANTS_CANCELLED)
            control.put(GraphRead(done, total, name))

        try:
            return list_variants(folder, before_each)
        except (ModelError, OSError):
            return []

    return Job("reading the model's graphs", run)


@dataclass(frozen=True)
class ConvertRequest:
    gguf: Path
    out_dir: Path
    # converter.GRAPHS: "auto" (the native graph where chatapp's GGUF kernels run here, else
    # the stock one); the window asks for "both" when its device is not the CPU.
    graph: str = "auto"
    attention: str = "gqa"  # converter's: "standard" for a device without float32 GQA (CUDA)


@dataclass(frozen=True)
class Progress:
    fraction: float  # 0..1
    message: str  # the step, e.g. "writing weights"


@dataclass(frozen=True)
class ConvertPlan:
    """What a conversion will take, said once its checks have passed (before the work)."""

    line: str  # "X.gguf: the model folder takes about 1.4 GB of disk (78 GB free); ..."


def convert_job(request: ConvertRequest) -> Job:
    """Convert a GGUF file into a model folder (reusing a verified earlier copy); yields
    Progress, returns the folder. Stopping abandons it (the converter cleans up)."""
    from chatapp.convert.converter import ConvertOptions, convert_gguf, earlier_conversion
    from chatapp.engine.packed_cache import prepare_folder

    def run(control: JobControl) -> Path:
        control.put(Progress(0.0, "checking the source file"))
        # Converted before, into this folder or under another name beside it (the default
        # model's folder, a renamed download): one copy in the library, not two.
        options = ConvertOptions(
            overwrite=True, graph=request.graph, attention=request.attention
        ).resolved()
        earlier = earlier_conversion(request.gguf, request.out_dir, options)
        if earlier is not None:
            return earlier
        report = _progress_reporter(control, "The conversion was cancelled.")
        convert_gguf(
            request.gguf,
            request.out_dir,
            options,
            report,
            preflight=lambda plan: control.put(ConvertPlan(plan.line(request.gguf.name))),
        )
        # The folder is complete; a big model's first load then maps this copy instead of
        # packing it. Cancel here skips the copy (the first load makes it), not the folder.
        try:
            model = read_model(request.out_dir)
        except (EngineError, OSError):  # opening it says why; the copy is optional
            log.exception("could not read the converted folder %s", request.out_dir)
            return request.out_dir
        prepare_folder(
            model,
            should_stop=lambda: control.stopped,
            say=lambda line: control.put(Progress(1.0, line)),
        )
        return request.out_dir

    def explain(exc: BaseException) -> str:
        if isinstance(exc, ConversionError):
            return str(exc)
        return failed(f"Converting {request.gguf.name}", exc)

    return Job("conversion", run, explain, (ConversionError,))


def prepare_default_model_job() -> Job:
    """Make sure the default model is there (about 8 s to convert on first run); yields
    Progress only while converting, returns the folder."""
    from chatapp.convert.default_model import prepare_default_model

    def run(control: JobControl) -> Path:
        report = _progress_reporter(control, PREPARATION_CANCELLED)
        folder, _converted = prepare_default_model(report)
        return folder

    def explain(exc: BaseException) -> str:
        if isinstance(exc, ConversionError):
            return str(exc)
        return failed("Preparing the default model", exc)

    return Job("default model preparation", run, explain, (ConversionError,))


def _progress_reporter(control: JobControl, cancelled: str) -> Callable[[float, str], None]:
    def report(fraction: float, message: str) -> None:
        if control.stopped:
            raise JobAborted(cancelled)  # from the converter's callback: it cleans up
        control.put(Progress(fraction, message))

    return report
