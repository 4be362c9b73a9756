"""A loaded model (the model of llama.cpp's model/context split) and the one function that
starts one. No Qt.

`start_model(description, plan)` turns a folder read once (`ModelDescription`, through the
memory check: `open_model`) into an immutable `LoadedModel`: its session on the device it ended
on, the weight files it maps, its tokenizer, and why it runs on the CPU where it was asked to
run elsewhere (its output constraints' compiler is made by its first constrained answer).
Every decision to run on the CPU instead is taken here, with the sentence the user reads:
- the device is not available here (only where the plan allows it: the window; the command
  line refuses);
- the device's attention would silently leave a float32 GroupQueryAttention graph;
- the provider refuses the graph, or fails to start, or the graph needs the GGUF kernels;
- the device runs out of memory for the KV cache;
- the device failed during an answer (`LoadedModel.on_cpu`).
Where the CPU would run another graph of the folder than the device's, the folder is read for
it again, and that read goes through the same memory check as the first.

Contexts (`model_context.ModelContext`: a loop, its KV strategy and cached prompt, the
sampler's planner) are made from a loaded model; several share one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import onnxruntime as ort

from chatapp.engine.devices import (
    CPU,
    Device,
    DeviceError,
    check_precision,
    find_device,
    start_session,
)
from chatapp.engine.errors import DeviceFailure, EngineError, ModelError
from chatapp.engine.guards import PRECISION_LABELS, default_precision
from chatapp.engine.loop_factory import make_loop
from chatapp.engine.loops import KVLoop
from chatapp.engine.mapped_weights import (
    MappedFiles,
    MappedPages,
    populate_mapped,
    released_while_loading,
)
from chatapp.engine.model_context import ModelContext
from chatapp.engine.model_description import (
    MemoryEstimate,
    ModelDescription,
    check_kv_memory,
    check_kv_room,
    check_memory,
    read_model,
)
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.modes import Mode
from chatapp.engine.native_kernels import NativeKernelsUnavailable
from chatapp.engine.packed_cache import DATA, packed_copy, remove_copy, resident_need, wanted
from chatapp.engine.row_logprob import log_softmax_session
from chatapp.engine.slots import SlotBatch
from chatapp.engine.structured.constraints import ConstraintCompiler
from chatapp.engine.text.chat import ChatTokenizer
from chatapp.error_text import STATUS_LINE, first_line

log = logging.getLogger(__name__)
T = TypeVar("T")


def open_model(
    folder: Path | str,
    device: str = CPU.name,
    onnx_file: str | None = None,
    max_context: int | None = None,
    freed: int = 0,
) -> ModelDescription:
    """The model in `folder` read once for `device` (model_description.read_model), refused
    before anything is loaded where it would not fit in memory: the memory available now plus
    `freed` (what closing the current model gives back). Every read of a folder for running
    goes through here."""
    model = read_model(folder, onnx_file, device, max_context)
    need = resident_need(model)  # a packed copy saved already is mapped, not packed again
    check_memory(need, model.info.name, freed)
    return model


@dataclass(frozen=True)
class DevicePlan:
    """Where and how the user asked a model to run."""

    device: str = CPU.name
    threads: int | None = None
    precision: str | None = None  # the GGUF kernels' (None: guards.default_precision)
    # The loop whose KV cache is allocated at the start: a device out of memory shows then.
    mode: Mode = Mode.IOBINDING
    # A device this machine does not offer runs on the CPU with the reason (the window: a
    # setting from another machine); False: refused (DeviceError, the command line's).
    cpu_if_missing: bool = False
    freed: int = 0  # what the model held now gives back (the memory check of a second read)
    # Set: the device failed during an answer (DeviceFailure's sentence); run on the CPU.
    failed: str | None = None


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model running on a device, immutable once started: what every context shares."""

    description: ModelDescription
    session: ort.InferenceSession
    weight_files: MappedFiles
    tokenizer: ChatTokenizer
    # Its constraint compiler: made by the first constrained answer (building its token table
    # takes about a second for a 49k vocabulary; most answers have no constraint), and shared
    # with the model a CPU fallback starts (the tokens are the same in every graph of a folder).
    grammar: Once[ConstraintCompiler]
    device: Device
    plan: DevicePlan
    precision: str  # the GGUF kernels' (guards.PRECISIONS)
    fallback_reason: str | None  # why it runs on the CPU where it was asked elsewhere

    @property
    def info(self) -> ModelInfo:
        return self.description.info

    @property
    def memory(self) -> MemoryEstimate:
        return self.description.memory

    @property
    def max_context(self) -> int:
        return self.description.context

    @property
    def threads(self) -> int | None:
        return self.plan.threads

    @property
    def constraints(self) -> ConstraintCompiler:
        """The compiler of output constraints (JSON, a schema, tool calls) for its tokenizer,
        made by the first constrained answer; ConstraintError where it cannot be."""
        info = self.info
        return self.grammar.get(
            lambda: ConstraintCompiler(self.tokenizer.tok, info.eos_token_ids, info.vocab_size)
        )

    @property
    def mapped_files(self) -> tuple[Path, ...]:
        """The weight files it maps: a packed copy's, or the folder's."""
        return self.weight_files.files

    @property
    def precision_in_effect(self) -> str | None:
        """The precision the GGUF kernels multiply at ("fast" or "exact"); None where no GGUF
        kernels run (the stock graph, a device's session), which have no such choice."""
        return self.precision if self.description.native and self.device is CPU else None

    @property
    def kernels(self) -> str:
        """Which kernels run the graph, for the backend line ("GGUF kernels, AVX2, fast 8-bit":
        with the precision where the GGUF kernels run)."""
        precision = self.precision_in_effect
        label = f", {PRECISION_LABELS[precision]}" if precision else ""
        return self.description.kernels + label

    @property
    def resident_estimate(self) -> MemoryEstimate:
        """What this model holds while answering, by the folder's estimate."""
        if self.mapped_files != self.memory.mapped_files:  # runs from a packed copy
            return self.memory.one_kernel_resident()
        return self.memory

    def speculation_refusal(self, mode: Mode) -> str | None:
        """Why drafted tokens cannot be verified in `mode` without changing the answer; None
        where they can. A verifying run computes several rows at once, so each row must come
        out with the bits a one-token step gives: the GGUF kernels' fast precision does that
        (every row count takes one path); exact multiplies prompts and steps differently, and
        the stock graph and devices promise nothing about it. A static window verifies one
        token a window (KVLoop.verify), as its single steps lay them out."""
        if self.precision_in_effect != "fast":
            return "it needs the GGUF kernels' fast precision on the CPU"
        if not mode.caches:
            return "the No cache loop recomputes every token anyway"
        return None

    def new_loop(self, mode: Mode) -> KVLoop:
        """A loop of `mode` with a KV cache of its own (DeviceFailure where the device has no
        memory left for it; EngineError where this computer's free memory cannot hold it)."""
        if self.device is CPU and Mode(mode).caches:
            check_kv_room(self.info, self.max_context)
        try:
            loop = make_loop(mode, self.session, self.info, self.device, self.max_context)
        except Exception as exc:
            if self.device is CPU:
                raise
            raise DeviceFailure(self.device.label, exc, "while allocating the KV cache") from exc
        loop.weights_in_use = self.weight_files.in_use
        if self.mapped_files != self.memory.mapped_files:  # runs from a packed copy
            loop.release_weights = MappedPages(self.mapped_files).release
        return loop

    def first_loop(self) -> KVLoop:
        """The loop of the plan's mode (a device's, allocated at the start: `start_with_loop`)."""
        return self.new_loop(self.plan.mode)

    def new_context(self, mode: Mode = Mode.IOBINDING, speculative: bool = False) -> ModelContext:
        """A context of this model: its own loops and KV caches over the shared session."""
        return ModelContext(self, mode, speculative=speculative)

    def slot_context(self, slot: KVLoop, speculative: bool = False) -> ModelContext:
        """The context that answers on `slot` (a loop of `new_slots`), whatever the mode."""
        return ModelContext(self, loop=slot, speculative=speculative)

    def new_slots(self, count: int, budget: int | None = None) -> SlotBatch:
        """`count` slots decoding together (engine/slots.py) within one KV budget of `budget`
        positions (default: one context); EngineError where this model or device cannot."""
        budget = self.max_context if budget is None else budget
        # A budget past one context is the slots' own choice (serve --kv-budget).
        remedy = "a smaller KV budget" if budget > self.max_context else "a smaller context"
        check_kv_memory(self.info, budget, remedy)
        batch = SlotBatch(self.session, self.info, self.device, self.max_context, count, budget)
        for loop in batch.loops:  # their weight files held as every loop's
            loop.weights_in_use = self.weight_files.in_use
        return batch

    def on_cpu(self, failure: DeviceFailure | str) -> LoadedModel:
        """After the device failed during an answer: the same model on the CPU, in the graph a
        CPU session chooses (the folder's native one where the library runs) unless the user
        picked one; raises what starting it raised."""
        plan = replace(self.plan, failed=str(failure), freed=self.resident_estimate.total)
        return _start(self.description, plan, self)[0]


class Once(Generic[T]):
    """A value made by its first asker and kept; askers at once wait for the one making it
    (server slots asking for a model's grammar together build one token table, not two)."""

    def __init__(self) -> None:
        self._made: T | None = None
        self._lock = threading.Lock()

    def get(self, make: Callable[[], T]) -> T:
        with self._lock:
            if self._made is None:  # a failure is raised to each asker, and tried again
                self._made = make()
            return self._made


def start_model(description: ModelDescription, plan: DevicePlan) -> LoadedModel:
    """The model `description` running where `plan` asks, or on the CPU with the reason why
    not (module docstring). EngineError (DeviceError for a device not offered here, unless the
    plan allows the CPU then) where it cannot run at all."""
    return _start(description, plan, None)[0]


def start_with_loop(
    description: ModelDescription, plan: DevicePlan
) -> tuple[LoadedModel, KVLoop | None]:
    """`start_model`, and on a device the loop of `plan.mode` allocated at the start to see
    the device's memory suffice (None on the CPU): its first context answers in it
    (`ModelContext(model, first=loop)`), made by whoever owns that context."""
    return _start(description, plan, None)


def _start(
    description: ModelDescription, plan: DevicePlan, before: LoadedModel | None
) -> tuple[LoadedModel, KVLoop | None]:
    """`before`: the model this one replaces (its tokenizer and grammar are kept)."""
    precision = plan.precision or default_precision()
    check_precision(precision)
    device, reason = _device(plan)
    refusal = attention_refusal(device, description.info) if reason is None else None
    if refusal is not None:
        device, reason = CPU, refusal
    # The tokenizer and grammar: kept from `before`, else made once in the loop.
    text = (before.tokenizer, before.grammar) if before else None
    while True:
        if device is CPU:
            description = _read_for_cpu(description, plan)
        try:
            session, weight_files, damaged = _session(description, device, plan, precision)
        except NativeKernelsUnavailable as exc:  # a native-only graph on a device: its fix
            if device is CPU:
                raise
            device, reason = CPU, f"{exc} Running on the CPU."
            continue
        except EngineError:  # already a sentence that says what to do (threads, damage)
            raise
        except Exception as exc:  # providers fail in many ways (drivers, memory, unsupported ops)
            if device is not CPU:
                why = first_line(exc, STATUS_LINE)
                device, reason = CPU, f"{device.label} failed to start ({why}); running on the CPU."
                continue
            name = description.info.onnx_path.name
            raise ModelError(
                f"onnxruntime cannot run {name} ({first_line(exc, STATUS_LINE)})."
            ) from exc
        if device.provider not in session.get_providers():
            device, reason = (
                CPU,
                f"{device.label} is not usable with this model; running on the CPU.",
            )
            continue
        if text is None:  # built once a session runs: a failed start reads no tokenizer
            text = ChatTokenizer(description.tokenizer), Once[ConstraintCompiler]()
        tokenizer, grammar = text
        model = LoadedModel(
            description,
            session,
            weight_files,
            tokenizer,
            grammar,
            device,
            plan,
            precision,
            damaged or reason,
        )
        first = None
        if device is not CPU:
            try:  # fail early: out of device memory for the KV buffers (the loop is kept)
                first = model.first_loop()
            except DeviceFailure as exc:
                device, reason = CPU, f"{exc} Running on the CPU."
                continue
        log_softmax_session()  # made now, not in the first answer's time to first token
        return model, first


def _device(plan: DevicePlan) -> tuple[Device, str | None]:
    """The device the plan names, or the CPU and why."""
    if plan.failed is not None:
        return CPU, f"{plan.failed} Running on the CPU."
    try:
        return find_device(plan.device), None
    except DeviceError as exc:
        if not plan.cpu_if_missing:
            raise
        return CPU, f"{exc} Running on the CPU."


def _read_for_cpu(description: ModelDescription, plan: DevicePlan) -> ModelDescription:
    """The description a CPU session runs: the same where the CPU would choose its graph too
    (the first memory check covered it: a device's need is never below the CPU's), else (a
    native graph the CPU prefers) read again for the CPU, through the memory check."""
    if description.on_cpu or description.onnx_file is not None:
        return description
    if description.cpu_same:
        return replace(description, on_cpu=True)
    return open_model(description.folder, CPU.name, None, description.context, plan.freed)


def attention_refusal(device: Device, info: ModelInfo) -> str | None:
    """Why `device` must not run this graph, where its attention would silently leave it."""
    if device.float32_gqa or info.kv_dtype != np.float32:
        return None
    if "GroupQueryAttention" not in info.op_types:
        return None
    return (
        f"{device.label} runs GroupQueryAttention only in float16 or bfloat16, and this model's "
        "is float32: its attention would run on the CPU with the KV cache copied every step, "
        "and IO-Binding would give wrong tokens. Running on the CPU; for this device, convert "
        "the GGUF again with it selected (or `chatapp convert --attention standard`)."
    )


def _session(
    model: ModelDescription, device: Device, plan: DevicePlan, precision: str
) -> tuple[ort.InferenceSession, MappedFiles, str | None]:
    """A session for `model` on `device`, the weight files it maps (checked before each run:
    mapped_weights.py), and a sentence where a saved packed copy was damaged. On the CPU a big model
    runs from its packed copy (packed_cache.py: saved by a child process the first time); a
    copy that would not load is deleted and saved again, else the folder's own graph runs."""
    info, memory = model.info, model.memory
    # Native kernels read the GGUF's bytes: nothing is packed for them.
    use_copy = device is CPU and not model.native and wanted(memory)
    damaged: Path | None = None
    while True:
        copy = None
        if use_copy and (damaged is None or remove_copy(damaged)):
            copy = packed_copy(info.onnx_path, memory, plan.threads, folder=info.folder)
        mapped = (copy.parent / DATA,) if copy is not None else memory.mapped_files
        try:
            with released_while_loading(mapped):
                weight_files = MappedFiles(mapped, info.name)
                graph = None if device is CPU else model.device_graph
                started = start_session(
                    copy or info.onnx_path, device, plan.threads, precision, graph
                )
        except Exception as exc:
            if copy is None:
                raise
            log.warning("the packed copy %s would not load: %s", copy, first_line(exc, STATUS_LINE))
            use_copy = damaged is None  # saved again once; then the folder's own graph
            damaged = copy
            continue
        if model.native and device is CPU:  # the kernels read the mapped GGUF blocks whole
            populate_mapped(memory.block_spans)
        note = None
        if damaged is not None:
            again = "they were saved again" if copy else "running from the folder's own graph"
            note = f"The saved packed weights of {info.name} were damaged; {again}."
        return started.session, weight_files, note
