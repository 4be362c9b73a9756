"""The first runs of a session on a device: compiling its programs before the first answer.

A device with programs of its own compiles them on first use: WebGPU compiles its shaders the
first time a graph runs, for a prompt's shapes and again for a single token's. On the software
adapter with no shader cache the first token step took 46 s, so the first answer read 0.13
tok/s. `warm_up` runs a short prompt and one step ahead of the answer instead (each yields
progress) and forgets them, so the answer's tokens/s measures the model, not the compiler.
Some prompt kernels are compiled per prompt length: a first prompt of a new length still
compiles those within its time to first token. The CPU has nothing to compile: no warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from chatapp.engine.devices import CPU
from chatapp.engine.generation import prompt_sample
from chatapp.engine.loops import KVLoop

perf = time.perf_counter

PROMPT_TOKENS = 2  # a prompt's kernels: more than one token (WebGPU picks others for one)
STEPS = 2  # the prompt, then one token


@dataclass(frozen=True)
class WarmUpProgress:
    """How far the warm-up is: `done` of `steps` runs, `elapsed_s` seconds so far."""

    done: int
    steps: int
    elapsed_s: float

    @property
    def finished(self) -> bool:
        return self.done >= self.steps


def needs_warm_up(loop: KVLoop) -> bool:
    """Whether `loop` has not run on its device yet and the device compiles programs."""
    return loop.device is not CPU and not loop.warmed_up


def warm_up(loop: KVLoop) -> Iterator[WarmUpProgress]:
    """Run a short prompt and one token through `loop`, then forget them (the cache is empty
    again). Yields progress before the first run and after each."""
    started = perf()
    yield WarmUpProgress(0, STEPS, 0.0)
    vocab = max(2, loop.info.vocab_size)
    ids = [1 + i % (vocab - 1) for i in range(PROMPT_TOKENS + 1)]  # any tokens will do
    loop.reset()
    try:
        prompt = ids[:-1]  # with the rows an answer's prompt asks for (its perplexity)
        loop.forward(prompt, rows=[*prompt_sample(len(prompt), vocab), len(prompt) - 1])
        yield WarmUpProgress(1, STEPS, perf() - started)
        loop.forward(ids[-1:])
    finally:
        loop.reset()
    loop.warmed_up = True
    yield WarmUpProgress(STEPS, STEPS, perf() - started)
