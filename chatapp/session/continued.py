"""The figures of an answer that Continue went on with: one record for the whole answer.

Before, the grown answer kept the continuation's figures with both parts' token count, so its
footer put the continuation's speed and time to first token beside the whole answer's tokens.
Now each figure says what it measured: speed and perplexity over every token of both parts,
the time to first token of the answer's own request, and the continuation's own (with its
share of the tokens and who wrote it, where not the first part's writer) as the record's
`continued_*` fields, shown as "continued: +40 tokens, TTFT 85 ms".
"""

from __future__ import annotations

import math
from dataclasses import replace

from chatapp.engine.figures import AnswerFigures
from chatapp.session.formatting import describe_writer


def _decode_time(fig: AnswerFigures) -> float | None:
    """Seconds of decode steps (tokens after the first / their speed); 0 with no step, None
    where the speed of some steps is unknown."""
    steps = (fig.generated_tokens or 0) - 1
    if steps <= 0:
        return 0.0
    if not fig.tokens_per_s:
        return None
    return steps / fig.tokens_per_s


def _speed(first: AnswerFigures, more: AnswerFigures) -> float | None:
    times = (_decode_time(first), _decode_time(more))
    steps = sum(max(0, (f.generated_tokens or 0) - 1) for f in (first, more))
    if None in times or steps == 0:
        return None
    total = sum(t for t in times if t is not None)
    return steps / total if total > 0 else None


def _perplexity(first: AnswerFigures, more: AnswerFigures) -> float | None:
    """exp of the mean negative log-probability over both parts' tokens."""
    n1, n2 = first.generated_tokens or 0, more.generated_tokens or 0
    if n1 + n2 == 0 or (n1 and first.perplexity is None) or (n2 and more.perplexity is None):
        return None
    logs = sum(
        n * math.log(p) for n, p in ((n1, first.perplexity), (n2, more.perplexity)) if n and p
    )
    return math.exp(logs / (n1 + n2))


def _weighted(a: float | None, n1: int, b: float | None, n2: int) -> float | None:
    if a is None or b is None:
        return b if a is None else a
    return (a * n1 + b * n2) / max(1, n1 + n2)


def _writer(fig: AnswerFigures) -> tuple[str | None, ...]:
    return (fig.model, fig.variant, fig.mode, fig.device, fig.precision)


def continued_figures(
    first: AnswerFigures | None, more: AnswerFigures | None
) -> AnswerFigures | None:
    """The whole answer's figures: `first` the answer Continue went on with (itself perhaps
    continued before), `more` what the continuation measured."""
    if more is None or first is None:
        return more
    n1, n2 = first.generated_tokens or 0, more.generated_tokens or 0
    prompt = more.prompt_tokens
    if prompt is not None:
        # The continuation's prompt holds the first part: without it, the prompt of the
        # question, and prompt + generated is what the KV cache holds at the end.
        prompt = max(0, prompt - n1)
    by = first.continued_by
    if _writer(more) != _writer(first):
        by = describe_writer(more)
    return replace(
        first,
        tokens_per_s=_speed(first, more),
        perplexity=_perplexity(first, more),
        prompt_tokens=prompt if prompt is not None else first.prompt_tokens,
        generated_tokens=n1 + n2,
        context_length=more.context_length or first.context_length,
        finish_reason=more.finish_reason,
        h2d_bytes_per_token=_weighted(first.h2d_bytes_per_token, n1, more.h2d_bytes_per_token, n2),
        d2h_bytes_per_token=_weighted(first.d2h_bytes_per_token, n1, more.d2h_bytes_per_token, n2),
        drafted_tokens=_sum(first.drafted_tokens, more.drafted_tokens),
        accepted_tokens=_sum(first.accepted_tokens, more.accepted_tokens),
        continued_tokens=(first.continued_tokens or 0) + n2,
        continued_ttft_s=more.ttft_s,
        continued_by=by,
    )


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)
