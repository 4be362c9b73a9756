"""Engine: one model on one device with one context, the face the command line, the benchmark
and older code use. No Qt here.

New code uses the split it is built on: `loaded_model.start_model` makes a `LoadedModel` (the
model on the device it ended on, with every CPU fallback decided there) and
`LoadedModel.new_context` or `ModelContext(model, ...)` its contexts (model_context.py). An
Engine is one of each: its `loaded` model and its `context`, plus the slots a server decodes
together (one context per slot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnxruntime as ort

from chatapp.engine.backend import BackendCard
from chatapp.engine.devices import Device
from chatapp.engine.errors import DeviceFailure
from chatapp.engine.generation import Generation
from chatapp.engine.loaded_model import (
    DevicePlan,
    LoadedModel,
    attention_refusal,
    open_model,
    start_model,
    start_with_loop,
)
from chatapp.engine.loops import KVLoop
from chatapp.engine.mapped_weights import MappedFiles
from chatapp.engine.model_context import LOCAL_CAPABILITIES, ModelContext
from chatapp.engine.model_description import MemoryEstimate, ModelDescription
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.modes import Mode, as_mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotBatch, SlotLoop
from chatapp.engine.structured.constraints import ConstraintCompiler, OutputFormat
from chatapp.engine.text.chat import STYLE_TEMPLATE, ChatTokenizer, Message
from chatapp.engine.warm_up import WarmUpProgress

__all__ = ["LOCAL_CAPABILITIES", "Engine", "attention_refusal", "open_model", "start_model"]


class Engine:
    """A model running on a device (`loaded`) and one context of it (`context`), built from a
    ModelDescription (a folder read once and checked for memory: `open_model`)."""

    capabilities = LOCAL_CAPABILITIES

    def __init__(
        self,
        model: ModelDescription | Path | str,
        device: str = "cpu",
        mode: Mode | str = Mode.IOBINDING,
        threads: int | None = None,
        max_context: int | None = None,
        onnx_file: str | None = None,
        precision: str | None = None,
        cpu_if_missing: bool = False,
    ) -> None:
        """`model`: a description read already (its graph and context were chosen then:
        `max_context` and `onnx_file` are for a folder), or a folder, read here.
        `precision`: how the GGUF kernels multiply, "fast" (8-bit activations) or "exact"
        (guards.PRECISIONS; None: guards.default_precision); a graph without them ignores it
        (`precision_in_effect`). `cpu_if_missing`: a device not offered here runs on the CPU
        with the reason (else DeviceError)."""
        if not isinstance(model, ModelDescription):
            model = open_model(model, device, onnx_file, max_context)
        elif max_context is not None or onnx_file is not None:
            raise ValueError("a ModelDescription has its graph and context already")
        self._start_model(
            model, DevicePlan(device, threads, precision, as_mode(mode), cpu_if_missing)
        )

    @classmethod
    def of(cls, loaded: LoadedModel, first: KVLoop | None = None) -> Engine:
        """An Engine over `loaded` (started already: the window's load), its context made
        here, in `first` where the start allocated a device's loop (`start_with_loop`)."""
        engine = cls.__new__(cls)
        engine._hold(loaded, first)
        return engine

    def _start_model(self, model: ModelDescription, plan: DevicePlan) -> None:
        self._hold(*start_with_loop(model, plan))

    def _hold(self, loaded: LoadedModel, first: KVLoop | None) -> None:
        self.loaded = loaded
        self.context = ModelContext(loaded, loaded.plan.mode, first=first)
        self._slots: SlotBatch | None = None
        self._slot_contexts: dict[int, ModelContext] = {}

    def fall_back_to_cpu(self, failure: DeviceFailure | str) -> None:
        """After the device failed during an answer: the loaded model's owner asks it for the
        same model on the CPU (LoadedModel.on_cpu) and a new context; cached prefixes are
        dropped."""
        self.loaded = self.loaded.on_cpu(failure)
        self.context = self.loaded.new_context(self.context.mode, self.speculative)
        self.release_slots()

    # ---- the loaded model's ------------------------------------------------------------
    @property
    def model(self) -> ModelDescription:
        return self.loaded.description

    @property
    def info(self) -> ModelInfo:
        return self.loaded.info

    @property
    def memory(self) -> MemoryEstimate:
        return self.loaded.memory

    @property
    def session(self) -> ort.InferenceSession:
        return self.loaded.session

    @property
    def device(self) -> Device:
        return self.loaded.device

    @property
    def fallback_reason(self) -> str | None:
        return self.loaded.fallback_reason

    @property
    def tokenizer(self) -> ChatTokenizer:
        return self.loaded.tokenizer

    @property
    def constraints(self) -> ConstraintCompiler:
        return self.loaded.constraints

    @property
    def threads(self) -> int | None:
        return self.loaded.threads

    @property
    def precision(self) -> str:
        return self.loaded.precision

    @property
    def max_context(self) -> int:
        return self.loaded.max_context

    @property
    def weight_files(self) -> MappedFiles:
        return self.loaded.weight_files

    @property
    def mapped_files(self) -> tuple[Path, ...]:
        return self.loaded.mapped_files

    @property
    def precision_in_effect(self) -> str | None:
        return self.loaded.precision_in_effect

    @property
    def kernels(self) -> str:
        return self.loaded.kernels

    @property
    def resident_estimate(self) -> MemoryEstimate:
        return self.loaded.resident_estimate

    # ---- the context's ------------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self.context.mode

    @property
    def speculative(self) -> bool:
        return self.context.speculative

    @speculative.setter
    def speculative(self, on: bool) -> None:
        self.context.speculative = on
        for context in self._slot_contexts.values():
            context.speculative = on

    def loop(self, mode: Mode | str | None = None) -> KVLoop:
        return self.context.loop(mode)

    def set_mode(self, mode: Mode | str) -> None:
        self.context.set_mode(mode)

    def needs_warm_up(self, mode: Mode | str | None = None) -> bool:
        return self.context.needs_warm_up(mode)

    def warm_up(self, mode: Mode | str | None = None) -> Iterator[WarmUpProgress]:
        return self.context.warm_up(mode)

    def reset(self) -> None:
        self.context.reset()

    def kv_positions(self) -> tuple[int, int]:
        """(positions held, positions allocated) over the KV caches of the loops made so far:
        a server's figure, read without waiting for a run (a list's length is atomic)."""
        loops = self.context.loops()
        return sum(len(loop.cached) for loop in loops), len(loops) * self.max_context

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
        return self.context.generate_ids(
            prompt_ids,
            settings,
            mode,
            should_stop,
            ignore_eos,
            top_logprobs,
            output_format,
            loop,
        )

    def speculation_refusal(self, loop: KVLoop | None = None) -> str | None:
        return self.context.speculation_refusal(loop)

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
        return self.context.chat(
            messages,
            settings,
            mode,
            should_stop,
            top_logprobs,
            output_format,
            tools,
            continue_last,
            style,
            loop,
        )

    @property
    def answerer(self) -> str:
        return self.context.answerer

    @property
    def chat_tokenizer(self) -> ChatTokenizer:
        return self.context.chat_tokenizer

    def count_tokens(self, messages: Sequence[Message], style: str = STYLE_TEMPLATE) -> int:
        return self.context.count_tokens(messages, style)

    def card(self) -> BackendCard:
        return self.context.card()

    def close(self) -> None:
        """Nothing held open: the owner drops the engine (EngineHost.close_engine)."""

    # ---- a server's slots -----------------------------------------------------------------
    def slots(self, count: int, budget: int | None = None) -> SlotBatch:
        """`count` slots decoding together (LoadedModel.new_slots), kept while their count and
        budget stay; made on first use (EngineError where this model or device cannot batch)."""
        budget = self.max_context if budget is None else budget
        if self._slots is None or (self._slots.size, self._slots.budget) != (count, budget):
            self._slots = self.loaded.new_slots(count, budget)
            self._slot_contexts = {}
        return self._slots

    def slot_context(self, slot: SlotLoop) -> ModelContext:
        """The context that answers on `slot` (one per slot, kept with the slots: its planner
        learns for the slot's next answers)."""
        context = self._slot_contexts.get(id(slot))
        if context is None or context.loop() is not slot:
            context = self.loaded.slot_context(slot, self.speculative)
            self._slot_contexts[id(slot)] = context
        return context

    def release_slots(self) -> None:
        """Forget the slots (serving ended): their KV caches are freed once the last request
        that still runs on one lets go of it."""
        self._slots = None
        self._slot_contexts = {}
