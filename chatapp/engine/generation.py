"""One answer: prefill (reusing the cached prefix), then one event per generated token, and
at the end one more for text the detokenizer held back, if any (`StepEvent.tail`).

`turns()` is the answer as a resumable sequence: besides its events it yields a `Turn` where
its loop cannot go on by itself (a slot of a batch waiting for the batched step or for room,
engine/slot_loop.py), and its batch's loop (engine/batch_loop.py) resumes it when it may.
Iterating a generation runs it at once, on a loop of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from chatapp.engine.errors import ContextOverflowError, EngineError, ModelError
from chatapp.engine.loops import KVLoop, Step, Turn
from chatapp.engine.metrics import RunStats, StepTiming
from chatapp.engine.row_logprob import RowLogProb
from chatapp.engine.sampling import (
    Sampler,
    SamplingSettings,
    token_logprobs,
    top_logprobs,
)
from chatapp.engine.speculative import DraftPlanner, PromptLookup
from chatapp.engine.structured.constraints import TokenConstraint
from chatapp.engine.tensor_types import as_float32
from chatapp.engine.text.stops import IncrementalDetokenizer

perf = time.perf_counter
NONE: frozenset[int] = frozenset()

# Prompt perplexity is estimated from an even sample of the new prompt tokens: a quarter of
# them, at most 64, and at most as many rows as fit in PROMPT_LOGITS_BYTES. Each scored position
# costs one row of lm_head (~1/5 of a token's forward for SmolLM2), so a quarter keeps it near
# 5% of the time to first token on short prompts and 64 rows are ~1% at 1k tokens, with 12 MB of
# logits at most; scoring every position cost ~20% and 197 MB per 1000 tokens. A row of Gemma 3's
# 262k vocabulary is 1 MiB: 64 of them, their copies and their log-softmax added 230 MiB to a
# 1k-token prompt's peak, so large vocabularies score fewer rows (Gemma 3: 12). A larger
# vocabulary also makes each row dearer: past SmolLM2's, one row per 4 x vocab / 49152 new
# tokens (Gemma 3: one per 21), which took a 15-token Gemma prompt from 4 head rows to 2 and its
# TTFT from 61.7 to 55.3 ms (median of 15). It is the same figure (mean log-prob), estimated.
PROMPT_SAMPLE = 64
SAMPLE_VOCAB = 49_152  # SmolLM2's: the vocabulary the quarter was measured with
PROMPT_LOGITS_BYTES = 64 * SAMPLE_VOCAB * 4  # SmolLM2's 64 rows of float32 logits


def check_finite_row(row: np.ndarray, model_name: str) -> None:
    """ModelError where a row of logits holds NaN or an infinity (damaged weights: a block's
    scale, an edited file): sampling from it would pick a meaningless token, often the end,
    and the answer would be empty with no word. One sum over the row: 0.07 ms at 262k logits."""
    if not np.isfinite(np.sum(row)):
        raise ModelError(
            f"{model_name} computed values that are not numbers (NaN or infinity), so the "
            "answer was stopped; its weights are damaged: convert its GGUF again."
        )


def prompt_sample(new_tokens: int, vocab: int = 0, most: int = PROMPT_SAMPLE) -> list[int]:
    """Positions of the new prompt tokens whose logits score the next prompt token (with
    `vocab`, no more rows than PROMPT_LOGITS_BYTES of float32 logits hold, and fewer per new
    token past SmolLM2's vocabulary: each row costs one row of the output head)."""
    per_row = 4
    if vocab > 0:
        most = max(1, min(most, PROMPT_LOGITS_BYTES // (4 * vocab)))
        per_row = max(per_row, 4 * vocab // SAMPLE_VOCAB)
    scoreable = new_tokens - 1
    count = min(most, scoreable, max(1, new_tokens // per_row))
    if count <= 0:
        return []
    if count == 1:
        return [scoreable - 1]
    return sorted({round(i * (scoreable - 1) / (count - 1)) for i in range(count)})


@dataclass(frozen=True)
class StepEvent:
    index: int  # 0 for the first generated token
    token_id: int
    text: str  # the text this token adds (may be "" while a character is incomplete)
    logprob: float  # under the raw logits (before temperature / top-k)
    timing: StepTiming
    # This loop's own time for the token: from resuming after the previous token (or from the
    # request, for the first) to this one. Time the consumer spends between tokens (drawing,
    # or the other loop when two run in lockstep) is not the loop's and is not counted.
    latency_s: float
    # The most likely tokens as (id, log-prob) under the raw logits, most likely first; only
    # when the generation was asked for them (an API's `top_logprobs`), else empty.
    top_logprobs: tuple[tuple[int, float], ...] = ()

    @property
    def tail(self) -> bool:
        """The last event of an answer whose detokenizer held text back (a partial character):
        that text, and no token (token_id -1)."""
        return self.token_id < 0


_NO_RUN = Step(np.empty(0, dtype=np.float32), 0.0, 0.0, 0, 0)


class Generation:
    """Iterate to run the loop; `stats` holds the figures (and finish_reason) at the end."""

    def __init__(
        self,
        loop: KVLoop,
        prompt_ids: Sequence[int],
        settings: SamplingSettings,
        eos_ids: Sequence[int],
        detokenizer: IncrementalDetokenizer,
        should_stop: Callable[[], bool] | None = None,
        top_logprobs: int = 0,
        constraint: TokenConstraint | None = None,
        never_ids: Iterable[int] = (),
        planner: DraftPlanner | None = None,
    ) -> None:
        """`never_ids`: tokens no answer may contain (Sampler's `never`). `planner`: draft
        from the conversation and verify several tokens per run (engine/speculative.py)."""
        if len(prompt_ids) == 0:
            raise ValueError("the prompt is empty")
        if not loop.fits(len(prompt_ids)):
            raise ContextOverflowError(len(prompt_ids), loop.max_context)
        self.loop = loop
        self.prompt_ids = list(prompt_ids)
        self.settings = settings
        self.sampler = Sampler(settings, never_ids)
        self.eos_ids = frozenset(eos_ids)
        self.detok = detokenizer
        self.should_stop = should_stop or (lambda: False)
        self.top_logprobs = top_logprobs
        # Structured output: only tokens the grammar allows are sampled (both loops share this).
        self.constraint = constraint
        self.planner = planner
        self._matched = 0  # the match length of the draft being judged
        self.stats = RunStats(
            mode=loop.mode,
            device=loop.device.name,
            prompt_tokens=len(self.prompt_ids),
            context_length=loop.max_context,
        )
        self.text = ""

    def __iter__(self) -> Iterator[StepEvent]:
        for item in self.turns():
            if isinstance(item, Turn):
                raise EngineError(
                    "This loop is a slot of a batch: its answer runs in the batch's loop."
                )
            yield item

    def turns(self) -> Generator[StepEvent | Turn, None, None]:
        """The answer's events, and a `Turn` wherever its loop must wait (module docstring)."""
        stats, loop = self.stats, self.loop
        started = perf()
        admitted = yield from loop.admit(
            self.prompt_ids, self.settings.max_new_tokens, self.should_stop
        )
        if not admitted:
            stats.finish_reason = "stop"  # stopped while waiting for room in the KV cache
            return
        stats.reused_tokens = loop.prepare(self.prompt_ids)
        new = self.prompt_ids[stats.reused_tokens :]
        scored = prompt_sample(len(new), loop.info.vocab_size)
        step = yield from loop.forward_turns(new, rows=[*scored, len(new) - 1])
        if scored:
            following = [new[r + 1] for r in scored]
            stats.prompt_logprobs = token_logprobs(step.logits[:-1], following).tolist()
        # Logits come in the model's own type; the sampler gets the one row it needs as float32.
        last = np.ascontiguousarray(as_float32(step.logits[-1]))
        check_finite_row(last, loop.info.name)
        token_logprob = RowLogProb(last.size)
        history = list(self.prompt_ids)
        drafts = PromptLookup(history) if self.planner is not None else None
        # Drafted tokens run but not yet chosen, each with the logits row that follows it.
        queue: list[tuple[int, np.ndarray]] = []
        previous = started
        limit = min(self.settings.max_new_tokens, loop.tokens_that_fit(0))
        while True:
            t_sample = perf()
            avoid = self.eos_ids if stats.generated_tokens < self.settings.min_new_tokens else NONE
            if self.constraint is None:
                token = self.sampler(last, history, avoid)
            else:
                token = self.sampler(self.constraint.masked(last), history, avoid)
                if token not in self.eos_ids:
                    self.constraint.advance(token)
            logprob = token_logprob(last, token)
            if token in self.eos_ids:
                stats.finish_reason = "eos"
                break
            # Counted in the sampling time: it is work done per token for the caller.
            top = top_logprobs(last, self.top_logprobs) if self.top_logprobs else ()
            delta = self.detok.push(token)
            now = perf()
            timing = StepTiming(
                step.host_s, step.run_s, now - t_sample, step.h2d_bytes, step.d2h_bytes
            )
            step = _NO_RUN  # a run's cost is charged once, to the first token it gave
            latency = now - previous
            history.append(token)
            stats.token_ids.append(token)
            stats.logprobs.append(logprob)
            if stats.generated_tokens == 1:
                stats.ttft_s = latency
                stats.prefill = timing
            else:
                stats.steps.append(timing)
                stats.latencies_s.append(latency)
            self.text += delta
            yield StepEvent(stats.generated_tokens - 1, token, delta, logprob, timing, latency, top)
            previous = perf()
            if self.constraint is not None and self.constraint.stopped:
                stats.finish_reason = "eos"  # the grammar is complete: nothing may follow
                break
            if stats.generated_tokens >= limit:
                stats.finish_reason = "length"
                break
            if self.should_stop():
                stats.finish_reason = "stop"
                break
            if drafts is not None:
                drafts.append(token)
            if queue:
                drafted, row = queue.pop(0)
                if token == drafted:  # the model chose the drafted token: its row is here
                    stats.accepted[-1] += 1
                    last = row
                    check_finite_row(last, loop.info.name)
                    if not queue:
                        self._drafted(stats.drafted[-1], stats.accepted[-1])
                    continue
                loop.rollback(len(queue) + 1)  # the drafted tokens from here on were not kept
                queue = []
                self._drafted(stats.drafted[-1], stats.accepted[-1])
            step, last, queue = yield from self._next_run(
                token, drafts, limit - stats.generated_tokens
            )
        tail = self.detok.flush()
        if tail:  # yielded once here, so no caller rebuilds it from `text`
            self.text += tail
            yield StepEvent(
                stats.generated_tokens, -1, tail, float("nan"), StepTiming(0.0, 0.0, 0.0), 0.0
            )

    def _next_run(
        self, token: int, drafts: PromptLookup | None, room: int
    ) -> Generator[Turn, None, tuple[Step, np.ndarray, list[tuple[int, np.ndarray]]]]:
        """Run `token`, with drafted tokens after it where the planner expects them to pay:
        (the run, the logits row after `token`, the drafted tokens with their rows)."""
        loop, planner = self.loop, self.planner
        draft = None
        if drafts is not None and planner is not None:
            # Room for the draft and the token after it, and in the KV cache with a run to
            # spare (a static window's rollback slides back into the slots its runs freed).
            most = min(room - 1, loop.tokens_that_fit(1) - 1)
            draft = drafts.draft(most)
        k = planner.length(draft) if planner is not None and draft is not None else 0
        started = perf()
        if k and draft is not None:
            drafted = list(draft.tokens[:k])
            step = yield from loop.verify_turns([token, *drafted])
            rows = as_float32(step.logits)
            self.stats.drafted.append(k)
            self.stats.accepted.append(0)
            self._matched = draft.matched
            queue = list(zip(drafted, rows[1:], strict=True))
            last = rows[0]
        else:
            step = yield from loop.forward_turns([token])
            last, queue = as_float32(step.logits), []
        if planner is not None:
            planner.record_run(k + 1, perf() - started)
        check_finite_row(last, loop.info.name)
        return step, last, queue

    def _drafted(self, drafted: int, accepted: int) -> None:
        """Tell the planner how a draft went: tokens are judged in order, so the first
        rejected one was offered too, and those after it were not."""
        if self.planner is not None:
            offered = accepted + (1 if accepted < drafted else 0)
            self.planner.record_draft(self._matched, offered, accepted)

    def run(self) -> RunStats:
        """Drain the generation (for callers that only want the result)."""
        for _ in self:
            pass
        return self.stats
