"""`chatapp bench --parallel N`: one client alone against N decoded together (engine/slots.py).

On one engine, in one process: one client's prompt answered on the engine's own IO-Binding
loop, then N clients at once, each a task of the batch's loop on its own slot
(engine/batch_loop.py, on the calling thread, as `chatapp serve` runs them: all join at the
start, their prompts prefilled one after another, then their decode steps run as one batched
step).
Every answer generates exactly `new_tokens` tokens (greedy, end of text ignored), so the two
runs do the same work per client. Both first run WARM_UP tokens per client, not counted (a
slot's first answer faults in its fresh KV pages, docs/engine.md). Tokens per second are
generated tokens over the wall time from the first prompt to the last token (prefill
included), one run each. Every client's tokens together are compared with its tokens alone: a
batched step must not change an answer.

Then the shared-prefix saving: N clients whose prompts start with one system prompt, to each
one's first token, prefilled whole and with the slots copying the prefix another slot holds
(the loop admits them one at a time: SlotBatch.share_prefix).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from chatapp.engine.batch_loop import BatchLoop, Task
from chatapp.engine.bench.summary import ONE_RUN_MARGIN
from chatapp.engine.loops import Turn
from chatapp.engine.sampling import SamplingSettings

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine
    from chatapp.engine.slots import SlotLoop

PROMPTS = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Write a short poem about the autumn rain falling on the city streets at night.",
    "Explain in simple words why the sky is blue during the day and red at sunset.",
    "List five things to pack for a weekend hiking trip in the mountains, and why.",
)
SYSTEM = (
    "You are a helpful assistant for a small public library. Answer questions about books, "
    "opening hours, membership and events in plain, friendly words. Keep answers short: two "
    "or three sentences unless the reader asks for more. If you do not know something, say so "
    "and suggest asking at the front desk. Never make up titles, authors or dates. The library "
    "opens at nine in the morning and closes at six in the evening, Monday to Saturday."
)
perf = time.perf_counter
WARM_UP = 4  # tokens per client before the measured runs


@dataclass(frozen=True)
class ClientsRun:
    clients: int
    tokens: int  # generated, all clients together
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class SharedPrefixRun:
    """N clients on one system prompt, each to its first token."""

    clients: int
    prompt_tokens: int  # every client's prompt, together
    shared_positions: int  # copied from another slot instead of prefilled
    whole_s: float  # every prompt prefilled whole
    shared_s: float  # the shared prefix copied


@dataclass(frozen=True)
class ParallelResult:
    slots: int
    new_tokens: int
    solo: ClientsRun
    together: ClientsRun
    same_tokens: bool  # every client's tokens together equal its tokens alone
    shared: SharedPrefixRun | None = None

    @property
    def ratio(self) -> float:
        """N together's aggregate tokens/s over one client's."""
        return self.together.tokens_per_s / self.solo.tokens_per_s if self.solo.wall_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["solo"]["tokens_per_s"] = self.solo.tokens_per_s
        out["together"]["tokens_per_s"] = self.together.tokens_per_s
        out["ratio"] = self.ratio
        return out


def measure_parallel(engine: Engine, slots: int, new_tokens: int) -> ParallelResult:
    """One client alone, then `slots` together (EngineError where the model or device
    cannot decode several sequences at once, or their KV caches would not fit)."""
    engine.slots(slots)  # refused before any time is spent on the solo run
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=new_tokens)
    tok = engine.tokenizer.tok
    prompts = [list(tok.encode(PROMPTS[i % len(PROMPTS)])) for i in range(slots)]
    warm = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=WARM_UP)
    _alone(engine, prompts[0], warm)  # the first runs fault in fresh pages: not counted
    _together(engine, prompts, warm)
    started = perf()
    alone = _alone(engine, prompts[0], settings)
    solo = ClientsRun(1, len(alone), perf() - started)
    started = perf()
    results = _together(engine, prompts, settings)
    together = ClientsRun(slots, sum(len(r) for r in results), perf() - started)
    same = (
        results[0] == alone
        and all(  # the others alone, not timed
            _alone(engine, p, settings) == r for p, r in zip(prompts[1:], results[1:], strict=True)
        )
    )
    return ParallelResult(slots, new_tokens, solo, together, same, _shared(engine, slots))


def _shared(engine: Engine, slots: int) -> SharedPrefixRun:
    """`slots` clients on one system prompt to their first token: whole, then shared."""
    tok = engine.tokenizer.tok
    prompts = [list(tok.encode(f"{SYSTEM}\n\n{PROMPTS[i % len(PROMPTS)]}")) for i in range(slots)]
    first = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=1)
    batch = engine.slots(slots)
    timings = []
    for share in (False, True):
        batch.share_prompts = share
        before = batch.shared_positions
        started = perf()
        _together(engine, prompts, first)
        timings.append(perf() - started)
    batch.share_prompts = True
    copied = batch.shared_positions - before
    return SharedPrefixRun(slots, sum(len(p) for p in prompts), copied, *timings)


def _alone(engine: Engine, prompt: list[int], settings: SamplingSettings) -> list[int]:
    engine.reset()  # the whole prompt prefilled, as each client's together
    return [e.token_id for e in engine.generate_ids(prompt, settings, ignore_eos=True)]


def _together(
    engine: Engine, prompts: list[list[int]], settings: SamplingSettings
) -> list[list[int]]:
    batch = engine.slots(len(prompts))
    for loop in batch.loops:  # every client prefills its whole prompt, as the solo one did
        loop.reset()
    results: list[list[int]] = [[] for _ in prompts]
    failures: list[BaseException] = []

    def client(i: int, loop: SlotLoop) -> Task:
        try:
            generation = engine.generate_ids(prompts[i], settings, ignore_eos=True, loop=loop)
            for item in generation.turns():
                if isinstance(item, Turn):
                    yield item
                else:
                    results[i].append(item.token_id)
        except Exception as exc:  # raised here, once every client has ended
            failures.append(exc)

    def start(i: int) -> Callable[[SlotLoop], Task]:
        return lambda loop: client(i, loop)

    tasks = BatchLoop(batch)
    for i, prompt in enumerate(prompts):
        tasks.add(start(i), prompt)
    tasks.run_until_done()
    if failures:
        raise failures[0]
    return results


def parallel_sentences(result: ParallelResult) -> list[str]:
    """The two runs and their ratio, in words (one run each: no spread, so a ratio within
    ONE_RUN_MARGIN of 1 is not called a difference)."""
    solo, together, n = result.solo, result.together, result.slots
    lines = [
        f"One client alone: {solo.tokens_per_s:.1f} tokens/s ({solo.tokens} tokens in "
        f"{solo.wall_s:.2f} s, prompt included; one run).",
        f"{n} clients together: {together.tokens_per_s:.1f} tokens/s in all ({together.tokens} "
        f"tokens in {together.wall_s:.2f} s, prompts included; one run), "
        f"{together.tokens_per_s / n:.1f} tokens/s each.",
    ]
    ratio = result.ratio
    if abs(ratio - 1) <= ONE_RUN_MARGIN:
        lines.append(
            f"Together / alone: {ratio:.2f}x ({together.tokens_per_s:.1f} / "
            f"{solo.tokens_per_s:.1f}), within {ONE_RUN_MARGIN:.0%} of one client's, which "
            "one run cannot tell apart: no measurable gain."
        )
    else:
        which = "more" if ratio > 1 else "fewer"
        lines.append(
            f"Together / alone: {ratio:.2f}x ({together.tokens_per_s:.1f} / "
            f"{solo.tokens_per_s:.1f}): {n} clients together get {which} tokens per second "
            "in all than one alone (one run each)."
        )
    same = "the same as" if result.same_tokens else "NOT the same as"
    lines.append(f"Every client's {result.new_tokens} tokens together are {same} alone.")
    shared = result.shared
    if shared is not None:
        lines.append(
            f"{shared.clients} clients on one system prompt, to each one's first token: "
            f"{shared.shared_s:.2f} s with the shared prefix copied ({shared.shared_positions} "
            f"of {shared.prompt_tokens} prompt positions not prefilled), {shared.whole_s:.2f} s "
            f"with every prompt prefilled whole ({shared.whole_s / shared.shared_s:.2f}x; "
            "one run each)."
        )
    return lines
