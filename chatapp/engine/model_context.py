"""A context of a loaded model (the context of llama.cpp's model/context split). No Qt.

A `ModelContext` is one conversation's state over a shared `LoadedModel`: its loop (no cache,
naive or IO-Binding) with that loop's KV strategy and cached prompt, and the speculative
planner of each loop (what it learned of run costs and acceptance). The window's chat, each
server slot and each benchmark run is a context; contexts of one model share its session,
weights and tokenizer, and give the tokens separate engines would. It is a Backend
(engine/backend.py): session/answer.py answers on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from chatapp.engine.backend import BackendCard, Capabilities
from chatapp.engine.devices import Device
from chatapp.engine.errors import ContextOverflowError
from chatapp.engine.generation import Generation
from chatapp.engine.local_card import local_card
from chatapp.engine.loops import KVLoop
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.modes import Mode, as_mode
from chatapp.engine.nocache import capped_new_tokens
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.speculative import DraftPlanner
from chatapp.engine.structured.constraints import ConstraintCompiler, OutputFormat
from chatapp.engine.text.chat import STYLE_TEMPLATE, ChatTokenizer, Message
from chatapp.engine.text.stops import IncrementalDetokenizer
from chatapp.engine.warm_up import WarmUpProgress, needs_warm_up, warm_up

# A model run here: its tokenizer counts, its grammar constrains, its loops are chosen.
LOCAL_CAPABILITIES = Capabilities(
    counts_tokens=True,
    constrains_output=True,
    continues_answers=True,
    chooses_loop=True,
    calls_tools=True,
)


class ContextModel(Protocol):
    """What a context needs of its loaded model (loaded_model.LoadedModel, which makes
    contexts: this module does not import it)."""

    @property
    def info(self) -> ModelInfo: ...
    @property
    def max_context(self) -> int: ...
    @property
    def tokenizer(self) -> ChatTokenizer: ...
    @property
    def constraints(self) -> ConstraintCompiler: ...
    @property
    def precision_in_effect(self) -> str | None: ...
    @property
    def device(self) -> Device: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def kernels(self) -> str: ...
    def new_loop(self, mode: Mode) -> KVLoop: ...
    def speculation_refusal(self, mode: Mode) -> str | None: ...


class ModelContext:
    """One sequence's state over `model`: a loop per mode asked for (made on first use), or
    the one loop it was given (a server slot's: every answer runs there, whatever the mode)."""

    capabilities = LOCAL_CAPABILITIES

    def __init__(
        self,
        model: ContextModel,
        mode: Mode = Mode.IOBINDING,
        loop: KVLoop | None = None,
        speculative: bool = False,
        first: KVLoop | None = None,
    ) -> None:
        """`first`: a loop of `mode` made already (a device's, allocated when the model
        started: loaded_model.start_with_loop), its loop of that mode."""
        self.model = model
        self.mode = loop.mode if loop is not None else mode
        self._given = loop
        self._loops: dict[Mode, KVLoop] = {first.mode: first} if first is not None else {}
        # Speculative decoding (engine/speculative.py), asked for by the face; it runs where
        # `speculation_refusal` finds nothing against it. One planner per loop: what it
        # learns (run costs, acceptance) holds for that loop's next answers too.
        self.speculative = speculative
        self._planners: dict[int, DraftPlanner] = {}

    @property
    def max_context(self) -> int:
        return self.model.max_context

    @property
    def tokenizer(self) -> ChatTokenizer:
        return self.model.tokenizer

    def loop(self, mode: Mode | str | None = None) -> KVLoop:
        if self._given is not None:
            return self._given
        mode = as_mode(mode) if mode else self.mode
        if mode not in self._loops:
            self._loops[mode] = self.model.new_loop(mode)
        return self._loops[mode]

    def loops(self) -> list[KVLoop]:
        """The loops made so far (a list: read by a server without waiting for a run)."""
        return [self._given] if self._given is not None else list(self._loops.values())

    def set_mode(self, mode: Mode | str) -> None:
        self.loop(mode)
        self.mode = as_mode(mode)

    def needs_warm_up(self, mode: Mode | str | None = None) -> bool:
        """Whether the loop's first answer on this device would compile programs first."""
        return needs_warm_up(self.loop(mode))

    def warm_up(self, mode: Mode | str | None = None) -> Iterator[WarmUpProgress]:
        """Compile the device's programs ahead of an answer (engine/warm_up.py)."""
        return warm_up(self.loop(mode))

    def reset(self) -> None:
        """Forget every cached conversation prefix."""
        for loop in self.loops():
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
        `loop` runs it on that loop instead of the mode's."""
        model = self.model
        constraint = model.constraints.start(output_format) if output_format else None
        loop = loop or self.loop(mode)
        if not loop.mode.caches and not ignore_eos:  # its cost grows with the square of the length
            limit = capped_new_tokens(len(prompt_ids), settings.max_new_tokens)
            settings = replace(settings, max_new_tokens=limit)
        planner = None
        if self.speculative and self.speculation_refusal(loop) is None:
            planner = self._planners.get(id(loop))
            if planner is None:
                # One token a run where the layout cannot share a run (KVLoop.verify): each
                # drafted row then costs a whole step, so only the probes ever draft.
                share = 0.5 if loop.kv.verifies_in_one_run else 1.0
                planner = self._planners[id(loop)] = DraftPlanner(row_share=share)
        return Generation(
            loop,
            prompt_ids,
            settings,
            () if ignore_eos else model.info.eos_token_ids,
            IncrementalDetokenizer(model.tokenizer),
            should_stop,
            top_logprobs,
            constraint,
            never_ids=model.tokenizer.media_ids,
            planner=planner,
        )

    def speculation_refusal(self, loop: KVLoop | None = None) -> str | None:
        """Why drafted tokens cannot be verified on `loop` (default: this context's mode);
        a question of the model and the mode (LoadedModel.speculation_refusal)."""
        return self.model.speculation_refusal(loop.mode if loop is not None else self.mode)

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
        template describes tools; see chatapp/engine/structured/tool_calls.py for the others.
        `continue_last`: the last message is an answer to go on with (ChatTokenizer.chat_ids);
        `style`: how the messages become the prompt (engine/text/chat.py PROMPT_STYLES)."""
        ids = self.model.tokenizer.chat_ids(
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

    # ---- the rest of the Backend protocol (engine/backend.py) -----------------------------
    @property
    def answerer(self) -> str:
        return self.model.info.name

    @property
    def chat_tokenizer(self) -> ChatTokenizer:
        return self.model.tokenizer

    def card(self) -> BackendCard:
        model = self.model
        return local_card(
            model.info.name,
            model.device.label,
            self.mode.label,
            model.threads,
            model.info.kv_bytes_per_token(),
            model.kernels,
            model.precision_in_effect,
            self.max_context,
            self.capabilities,
        )

    def close(self) -> None:
        """Nothing held open: its loops go with it (the model's owner drops the model)."""

    def count_tokens(self, messages: Sequence[Message], style: str = STYLE_TEMPLATE) -> int:
        """Exact, or for a chat far too long for the context a lower bound above it."""
        try:
            return len(self.model.tokenizer.chat_ids(messages, self.max_context, style=style))
        except ContextOverflowError as exc:
            return exc.prompt_tokens
