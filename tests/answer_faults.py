"""Faults injected at each stage of an answer, for the tests of every face (the window, `chatapp
serve`, `chatapp generate`): each face must report the failure and stay usable.

The stages: the prompt (the answer never opens), a step (after a few tokens), the figures (the
real overflow: a model with huge weights gives logprobs of -1e6, whose perplexity overflows a
float; or a bug in computing them), and after the last token (the stream fails as it ends).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chatapp.engine.metrics import RunStats
from chatapp.session import answer as answer_module

FAILING_STAGES = ("prompt", "step", "after the last token", "figures bug")
STAGES = (*FAILING_STAGES, "figures overflow")
HUGE_LOGPROB = -1e6  # exp(1e6) is far past a float's range: math.exp raises OverflowError


class InjectedFault(RuntimeError):
    """What the injector raises; its message names the stage."""


def inject(monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    """From now on (until the monkeypatch is undone) every answer meets a fault at `stage`."""
    assert stage in STAGES, stage
    real_open = answer_module._open

    def faulty_open(*args: Any, **kwargs: Any) -> Any:
        if stage == "prompt":
            raise InjectedFault("injected at the prompt")
        return _FaultyStream(real_open(*args, **kwargs), stage)

    monkeypatch.setattr(answer_module, "_open", faulty_open)
    if stage == "figures bug":

        def broken_figure(_self: RunStats) -> float:
            raise InjectedFault("injected in the figures")

        monkeypatch.setattr(RunStats, "tokens_per_s", property(broken_figure))


class _FaultyStream:
    def __init__(self, stream: Any, stage: str) -> None:
        self._stream = stream
        self._stage = stage

    @property
    def stats(self) -> RunStats:
        return self._stream.stats

    def __iter__(self) -> Iterator[Any]:
        for n, event in enumerate(self._stream):
            if self._stage == "step" and n == 2:
                raise InjectedFault("injected at a step")
            if self._stage == "figures overflow":
                stats = self._stream.stats
                stats.logprobs[:] = [HUGE_LOGPROB] * len(stats.logprobs)
                stats.prompt_logprobs[:] = [HUGE_LOGPROB] * len(stats.prompt_logprobs)
            yield event
        if self._stage == "after the last token":
            raise InjectedFault("injected after the last token")


def message_of(stage: str) -> str:
    """What the fault at `stage` says (a face's line must carry it)."""
    return {
        "prompt": "injected at the prompt",
        "step": "injected at a step",
        "after the last token": "injected after the last token",
        "figures bug": "injected in the figures",
    }[stage]
