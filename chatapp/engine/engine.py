"""Engine: one model on one device, its three loops, chat and raw generation. No Qt here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from chatapp.engine.backend import BackendCard, Capabilities
from chatapp.engine.chat import STYLE_TEMPLATE, ChatTokenizer, IncrementalDetokenizer, Message
from chatapp.engine.constraints import ConstraintCompiler, OutputFormat
from chatapp.engine.devices import (
    CPU,
    Device,
    StartedSession,
    check_precision,
    cpu_session,
    find_device,
    start_session,
)
from chatapp.engine.errors import (
    ContextOverflowError,
    DeviceFailure,
    EngineError,
    ModelError,
)
from chatapp.engine.generation import Generation
from chatapp.engine.guards import PRECISION_LABELS, default_precision
from chatapp.engine.local_card import local_card
from chatapp.engine.loop_factory import make_loop
from chatapp.engine.loops import KVLoop
from chatapp.engine.memory import MemoryEstimate, check_kv_memory, check_memory
from chatapp.engine.model_description import ModelDescription, read_model
from chatapp.engine.model_folder.model import KVLayout, ModelInfo
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.nocache import capped_new_tokens
from chatapp.engine.packed_cache import DATA, packed_copy, remove_copy, resident_need, wanted
from chatapp.engine.resident import (
    MappedFiles,
    MappedPages,
    populate_mapped,
    released_while_loading,
)
from chatapp.engine.row_logprob import log_softmax_session
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotBatch
from chatapp.engine.speculative import DraftPlanner
from chatapp.engine.warm_up import WarmUpProgress, needs_warm_up, warm_up
from chatapp.error_text import STATUS_LINE, first_line

# A model run here: its tokenizer counts, its grammar constrains, its loops are chosen.
LOCAL_CAPABILITIES = Capabilities(
    counts_tokens=True,
    constrains_output=True,
    continues_answers=True,
    chooses_loop=True,
    calls_tools=True,
)

log = logging.getLogger(__name__)


def open_model(
    folder: Path | str,
    device: str = CPU.name,
    onnx_file: str | None = None,
    max_context: int | None = None,
    freed: int = 0,
) -> ModelDescription:
    """The model in `folder` read once for `device` (model_description.read_model), refused
    before anything is loaded where it would not fit in memory: the memory available now plus
    `freed` (what closing the current model gives back). The one memory check of a load."""
    model = read_model(folder, onnx_file, device, max_context)
    need = resident_need(model)  # a packed copy saved already is mapped, not packed again
    check_memory(need, model.info.name, freed)
    return model


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


def start_model(
    model: ModelDescription,
    device: Device,
    threads: int | None,
    reason: str | None = None,
    precision: str | None = None,
) -> tuple[StartedSession, MappedFiles]:
    """A session for `model` on `device`, and the weight files it maps (checked before each
    run: resident.py). On the CPU a big model runs from its packed copy (packed_cache.py: saved
    by a child process the first time); a copy that would not load is deleted and saved again,
    else the folder's own graph runs, and the session's reason says so. `reason`: why it runs
    on the CPU. `precision`: the GGUF kernels' (devices.session_options)."""
    info, memory = model.info, model.memory
    # Native kernels read the GGUF's bytes: nothing is packed for them.
    use_copy = device is CPU and not model.native and wanted(memory)
    damaged: Path | None = None
    while True:
        copy = None
        if use_copy and (damaged is None or remove_copy(damaged)):
            copy = packed_copy(info.onnx_path, memory, threads, folder=info.folder)
        mapped = (copy.parent / DATA,) if copy is not None else memory.mapped_files
        try:
            with released_while_loading(mapped):
                weight_files = MappedFiles(mapped, info.name)
                graph = copy or info.onnx_path
                started = (  # on the CPU for a reason (a refusal, a failure): no other device
                    cpu_session(graph, threads, reason, precision)
                    if device is CPU and reason is not None
                    else start_session(graph, device, threads, precision)
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
        if damaged is not None:
            again = "they were saved again" if copy else "running from the folder's own graph"
            reason = f"The saved packed weights of {info.name} were damaged; {again}."
        return (replace(started, fallback_reason=reason) if reason else started), weight_files


def _mode(mode: Mode | str) -> Mode:
    """A loop name as given (the command line, settings, the history) as a Mode."""
    if mode not in MODES:
        raise EngineError(f"Unknown loop '{mode}'; choose one of {', '.join(MODES)}.")
    return Mode(mode)


class Engine:
    """A model running on a device: its session, loops and tokenizer, built from a
    ModelDescription (a folder read once and checked for memory: `open_model`)."""

    def __init__(
        self,
        model: ModelDescription | Path | str,
        device: str = "cpu",
        mode: Mode | str = Mode.IOBINDING,
        threads: int | None = None,
        max_context: int | None = None,
        onnx_file: str | None = None,
        precision: str | None = None,
    ) -> None:
        """`model`: a description read already (its graph and context were chosen then:
        `max_context` and `onnx_file` are for a folder), or a folder, read here.
        `precision`: how the GGUF kernels multiply, "fast" (8-bit activations) or "exact"
        (guards.PRECISIONS; None: guards.default_precision); a graph without them ignores it
        (`precision_in_effect`)."""
        precision = precision or default_precision()
        check_precision(precision)
        if not isinstance(model, ModelDescription):
            model = open_model(model, device, onnx_file, max_context)
        elif max_context is not None or onnx_file is not None:
            raise ValueError("a ModelDescription has its graph and context already")
        self.model, self.info, self.memory = model, model.info, model.memory
        self._onnx_file = model.onnx_file  # the user's pick of a graph; None: the engine chooses
        self.tokenizer = ChatTokenizer(self.info.folder)
        self.threads = threads
        self.precision = precision
        self.max_context = model.context
        self.mode = _mode(mode)
        self._loops: dict[Mode, KVLoop] = {}
        # Speculative decoding (engine/speculative.py), asked for by the face; it runs where
        # `speculation_refusal` finds nothing against it. One planner per loop: what it
        # learns (run costs, acceptance) holds for that loop's next answers too.
        self.speculative = False
        self._planners: dict[int, DraftPlanner] = {}
        self._slots: SlotBatch | None = None
        self.constraints = ConstraintCompiler(
            self.tokenizer.tok, self.info.eos_token_ids, self.info.vocab_size
        )
        log_softmax_session()  # made now, not in the first answer's time to first token
        reason: str | None = None  # why it runs on the CPU after the device failed
        while True:
            self._start(CPU if reason else find_device(device), threads, reason)
            try:
                self.loop()  # fail early (e.g. out of device memory for the KV buffers)
                break
            except DeviceFailure as exc:  # never raised on the CPU: this runs once at most
                reason = f"{exc} Running on the CPU."

    def _start(self, device: Device, threads: int | None, reason: str | None = None) -> None:
        """Start the session on `device` (the CPU where its attention would leave this graph:
        then, unless the user picked the graph, the one a CPU session takes, read for it);
        `reason`: why it runs on the CPU. Cached prefixes are dropped."""
        refusal = attention_refusal(device, self.info)
        if refusal is not None:
            device = CPU
        model = self.model
        if device is CPU and self._onnx_file is None and not model.on_cpu:
            model = read_model(self.info.folder, None, CPU.name, self.max_context)
        try:
            started, self.weight_files = start_model(
                model, device, threads, reason or refusal, self.precision
            )
        except EngineError:  # already a sentence that says what to do (threads, native kernels)
            raise
        except Exception as exc:  # on the CPU too: an op or type onnxruntime lacks
            name, why = model.info.onnx_path.name, first_line(exc, STATUS_LINE)
            raise ModelError(f"onnxruntime cannot run {name} ({why}).") from exc
        self.model, self.info, self.memory = model, model.info, model.memory
        self.mapped_files = self.weight_files.files  # a packed copy's, or the folder's
        self.session, self.device = started.session, started.device
        self.fallback_reason = started.fallback_reason
        self._loops = {}
        self._slots = None

    def fall_back_to_cpu(self, reason: str) -> None:
        """After the device failed: the same model on the CPU, in the graph a CPU session would
        have chosen (the folder's native one where the library runs); cached prefixes are
        dropped."""
        self._start(CPU, self.threads, reason)

    @property
    def precision_in_effect(self) -> str | None:
        """The precision the GGUF kernels multiply at ("fast" or "exact"); None where no GGUF
        kernels run (the stock graph, a device's session), which have no such choice."""
        return self.precision if self.model.native and self.device is CPU else None

    @property
    def kernels(self) -> str:
        """Which kernels run the graph, for the backend line ("GGUF kernels, AVX2, fast 8-bit":
        with the precision where the GGUF kernels run)."""
        precision = self.precision_in_effect
        label = f", {PRECISION_LABELS[precision]}" if precision else ""
        return self.model.kernels + label

    @property
    def resident_estimate(self) -> MemoryEstimate:
        """What this engine holds while answering, by the folder's estimate."""
        if self.mapped_files != self.memory.mapped_files:  # runs from a packed copy
            return self.memory.one_kernel_resident()
        return self.memory

    def loop(self, mode: Mode | str | None = None) -> KVLoop:
        mode = _mode(mode) if mode else self.mode
        if mode not in self._loops:
            try:
                loop = make_loop(mode, self.session, self.info, self.device, self.max_context)
                loop.weights_in_use = self.weight_files.in_use
                if self.mapped_files != self.memory.mapped_files:  # runs from a packed copy
                    loop.release_weights = MappedPages(self.mapped_files).release
                self._loops[mode] = loop
            except Exception as exc:
                if self.device is CPU:
                    raise
                raise DeviceFailure(
                    self.device.label, exc, "while allocating the KV cache"
                ) from exc
        return self._loops[mode]

    def kv_positions(self) -> tuple[int, int]:
        """(positions held, positions allocated) over the KV caches of the loops made so far:
        a server's figure, read without waiting for a run (a list's length is atomic)."""
        loops = list(self._loops.values())
        return sum(len(loop.cached) for loop in loops), len(loops) * self.max_context

    def slots(self, count: int, budget: int | None = None) -> SlotBatch:
        """`count` slots decoding together (engine/slots.py), each with the engine's context,
        all within one KV budget of `budget` positions (default: one context); made on first
        use (EngineError where this model or device cannot batch)."""
        budget = self.max_context if budget is None else budget
        if self._slots is None or (self._slots.size, self._slots.budget) != (count, budget):
            # A budget past one context is the slots' own choice (serve --kv-budget).
            remedy = "a smaller KV budget" if budget > self.max_context else "a smaller context"
            check_kv_memory(self.info, budget, remedy)
            self._slots = SlotBatch(
                self.session, self.info, self.device, self.max_context, count, budget
            )
            for loop in self._slots.loops:  # their weight files held as the engine's loops'
                loop.weights_in_use = self.weight_files.in_use
        return self._slots

    def release_slots(self) -> None:
        """Forget the slots (serving ended): their KV caches are freed once the last request
        that still runs on one lets go of it."""
        self._slots = None

    def set_mode(self, mode: Mode | str) -> None:
        self.loop(mode)
        self.mode = _mode(mode)

    def needs_warm_up(self, mode: Mode | str | None = None) -> bool:
        """Whether the loop's first answer on this device would compile programs first."""
        return needs_warm_up(self.loop(mode))

    def warm_up(self, mode: Mode | str | None = None) -> Iterator[WarmUpProgress]:
        """Compile the device's programs ahead of an answer (engine/warm_up.py)."""
        return warm_up(self.loop(mode))

    def reset(self) -> None:
        """Forget every cached conversation prefix."""
        for loop in self._loops.values():
            loop.reset()

    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        settings: SamplingSettings,
        mode: Mode | str | None = None,
        should_stop: Callable[[], bool] | None = None,
        ignore_eos: bool = False,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
        loop: KVLoop | None = None,
    ) -> Generation:
        """`ignore_eos` runs exactly max_new_tokens (benchmarks compare equal lengths);
        `top_logprobs` > 0 adds that many most likely tokens to each event; `output_format`
        constrains the answer (ConstraintError, a ValueError, for one that cannot be used);
        `loop` runs it on that loop (a slot of `slots()`) instead of the mode's."""
        constraint = self.constraints.start(output_format) if output_format else None
        loop = loop or self.loop(mode)
        if not loop.mode.caches and not ignore_eos:  # its cost grows with the square of the length
            limit = capped_new_tokens(len(prompt_ids), settings.max_new_tokens)
            settings = replace(settings, max_new_tokens=limit)
        planner = None
        if self.speculative and self.speculation_refusal(loop) is None:
            planner = self._planners.setdefault(id(loop), DraftPlanner())
        return Generation(
            loop,
            prompt_ids,
            settings,
            () if ignore_eos else self.info.eos_token_ids,
            IncrementalDetokenizer(self.tokenizer),
            should_stop,
            top_logprobs,
            constraint,
            never_ids=self.tokenizer.media_ids,
            planner=planner,
        )

    def speculation_refusal(self, loop: KVLoop | None = None) -> str | None:
        """Why drafted tokens cannot be verified here without changing the answer; None
        where they can. A verifying run computes several rows at once, so each row must come
        out with the bits a one-token step gives: the GGUF kernels' fast precision does that
        (every row count takes one path); exact multiplies prompts and steps differently, and
        the stock graph and devices promise nothing about it."""
        mode = loop.mode if loop is not None else self.mode  # no loop made just to ask
        if self.precision_in_effect != "fast":
            return "it needs the GGUF kernels' fast precision on the CPU"
        if not mode.caches:
            return "the No cache loop recomputes every token anyway"
        if self.info.layout is KVLayout.STATIC_WINDOW:
            # Its slots would hold the tokens in another arrangement than one token a window
            # does, and the attention's sums over them would round otherwise.
            return "a static KV window lays out drafted tokens unlike single steps"
        return None

    def chat(
        self,
        messages: Sequence[Message],
        settings: SamplingSettings,
        mode: Mode | str | None = None,
        should_stop: Callable[[], bool] | None = None,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        continue_last: bool = False,
        style: str = STYLE_TEMPLATE,
        loop: KVLoop | None = None,
    ) -> Generation:
        """`tools` (OpenAI's function entries) go to the chat template, for models whose
        template describes tools; see chatapp/engine/tool_calls.py for the others.
        `continue_last`: the last message is an answer to go on with (ChatTokenizer.chat_ids);
        `style`: how the messages become the prompt (engine/chat.py PROMPT_STYLES)."""
        ids = self.tokenizer.chat_ids(
            messages, self.max_context, tools=tools, continue_last=continue_last, style=style
        )
        return self.generate_ids(
            ids,
            settings,
            mode,
            should_stop,
            top_logprobs=top_logprobs,
            output_format=output_format,
            loop=loop,
        )

    # ---- the Backend protocol (engine/backend.py) ----------------------------------------
    capabilities = LOCAL_CAPABILITIES

    @property
    def answerer(self) -> str:
        return self.info.name

    @property
    def chat_tokenizer(self) -> ChatTokenizer:
        return self.tokenizer

    def card(self) -> BackendCard:
        return local_card(
            self.info.name,
            self.device.label,
            self.mode.label,
            self.threads,
            self.info.kv_bytes_per_token(),
            self.kernels,
            self.precision_in_effect,
            self.max_context,
            self.capabilities,
        )

    def close(self) -> None:
        """Nothing held open: the owner drops the engine (EngineHost.close_engine)."""

    def count_tokens(self, messages: Sequence[Message], style: str = STYLE_TEMPLATE) -> int:
        """Exact, or for a chat far too long for the context a lower bound above it."""
        try:
            return len(self.tokenizer.chat_ids(messages, self.max_context, style=style))
        except ContextOverflowError as exc:
            return exc.prompt_tokens
