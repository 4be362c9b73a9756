"""The figures of one answer: one record from the engine to the window, the history and exports.

`AnswerFigures.from_stats(run_stats)` makes it; the window shows it (session/formatting.py),
the history stores it one column per field (chatapp/store) and its JSON export carries it field
by field. Any field may be unknown (None): an answer restored from an older history, or a
figure the answer never got to (no perplexity without a token).

Adding a figure is one field below, named like the RunStats attribute that measures it, with
`since=` the history schema version that adds its column. The store's columns and migration,
the JSON export and import, and restoring answers from the history all follow this list.
Showing it is a separate choice: session/formatting.figures_line (the window) and
store/transcript.figures_line (Markdown).
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin, get_type_hints

if TYPE_CHECKING:
    from chatapp.engine.metrics import RunStats

SQL_TYPES = {str: "TEXT", float: "REAL", int: "INTEGER"}


def _figure(since: int = 1, measured: bool = True) -> Any:
    """A field of the record. `since`: the history schema version that has its column;
    `measured`: RunStats has an attribute of the same name (from_stats copies it)."""
    return field(default=None, metadata={"since": since, "measured": measured})


@dataclass(frozen=True)
class AnswerFigures:
    """What an answer cost and how sure the model was."""

    mode: str | None = _figure()  # the loop (a Mode), or a benchmark peer's name
    device: str | None = _figure()
    tokens_per_s: float | None = _figure()  # decode speed, the first token excluded
    ttft_s: float | None = _figure()  # request -> first token
    perplexity: float | None = _figure()  # of the answer, under the raw logits
    prompt_perplexity: float | None = _figure()
    prompt_tokens: int | None = _figure()
    reused_tokens: int | None = _figure()  # prompt tokens whose KV the last turn left
    generated_tokens: int | None = _figure()
    context_length: int | None = _figure()  # what the engine allocated
    finish_reason: str | None = _figure()  # eos | length | stop | error
    model: str | None = _figure(measured=False)  # the model's name; the history fills it in
    h2d_bytes_per_token: float | None = _figure(since=2)  # host -> device per decode step
    d2h_bytes_per_token: float | None = _figure(since=2)  # device -> host (medians)
    # How the GGUF kernels multiplied ("fast", "exact"; guards.PRECISIONS); None where none ran
    # (the stock graph, a device, a server). The session fills it in, as it does the model.
    precision: str | None = _figure(since=5, measured=False)
    # Which variant of the model wrote it: the graph opened in its folder ("model_gguf.onnx",
    # "onnx/model_q4.onnx"; what the variant picker lists), as the session fills in the model.
    # None for a server's answer and for answers from before schema version 6.
    variant: str | None = _figure(since=6, measured=False)
    # Speculative decoding (engine/speculative.py): tokens drafted from the conversation and
    # verified, and how many of them the model kept; 0 where it drafted none, None before.
    drafted_tokens: int | None = _figure(since=7)
    accepted_tokens: int | None = _figure(since=7)
    # An answer that Continue went on with (session/continued.py): how many of its
    # generated_tokens the continuations wrote, the last one's request -> first token, and who
    # wrote it where that is not the first part's writer. None: written in one run.
    continued_tokens: int | None = _figure(since=9, measured=False)
    continued_ttft_s: float | None = _figure(since=9, measured=False)
    continued_by: str | None = _figure(since=9, measured=False)

    def __post_init__(self) -> None:
        # Plain Python values: the engine's may be numpy scalars or StrEnums, which sqlite3 and
        # json take badly; NaN and infinities mean "unknown" (SQLite and JSON have no NaN).
        for column in FIGURES:
            value = getattr(self, column.name)
            if value is None:
                continue
            value = column.kind(value)
            if column.kind is float and not math.isfinite(value):
                value = None
            object.__setattr__(self, column.name, value)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(c.name for c in FIGURES)

    @classmethod
    def from_stats(cls, stats: RunStats, finish_reason: str | None = None) -> AnswerFigures:
        figures = cls(**{c.name: _measured(stats, c.name) for c in FIGURES if c.measured})
        return replace(figures, finish_reason=finish_reason) if finish_reason else figures

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AnswerFigures:
        """Known keys only: a dict may carry more than the record keeps."""
        return cls(**{name: data[name] for name in cls.names() if name in data})

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def is_empty(self) -> bool:
        return all(v is None for v in self.to_dict().values())

    @property
    def written_by(self) -> str:
        """ "SmolLM2 (model_gguf.onnx)": the model and its variant, the graph of its folder that
        ran (as the variant picker lists it); the model alone where the variant is unknown."""
        if not self.variant:
            return self.model or ""
        return f"{self.model} ({self.variant})" if self.model else self.variant

    @property
    def tokens_per_pass(self) -> float | None:
        """Tokens after the first per forward pass (each reads the weights once): 1 in a plain
        decode, more where drafted tokens were kept; None where nothing was drafted."""
        steps = (self.generated_tokens or 0) - 1
        if not self.drafted_tokens or steps <= 0:
            return None
        return steps / max(1, steps - (self.accepted_tokens or 0))

    @property
    def speculative_summary(self) -> str:
        """ "speculative: 27 of 30 drafted kept, 3.2 tokens a pass"; "" where nothing was
        drafted (a pass is one read of the weights: a plain decode makes one per token)."""
        per_pass = self.tokens_per_pass
        if per_pass is None:
            return ""
        return (
            f"speculative: {self.accepted_tokens or 0} of {self.drafted_tokens} drafted kept, "
            f"{per_pass:.1f} tokens a pass"
        )

    @property
    def continued_summary(self) -> str:
        """ "continued: +40 tokens, TTFT 85 ms" (by whom where another model, loop or device
        wrote it); "" for an answer written in one run."""
        if not self.continued_tokens:
            return ""
        by = f" by {self.continued_by}" if self.continued_by else ""
        ttft = f", TTFT {self.continued_ttft_s * 1000:.0f} ms" if self.continued_ttft_s else ""
        return f"continued{by}: +{self.continued_tokens} tokens{ttft}"

    @property
    def transfer_bytes_per_token(self) -> float:
        return (self.h2d_bytes_per_token or 0.0) + (self.d2h_bytes_per_token or 0.0)

    @property
    def tokens_in_context(self) -> int:
        return (self.prompt_tokens or 0) + (self.generated_tokens or 0)

    @property
    def tokens_read(self) -> int:
        """The tokens the model had read when the answer ended: the prompt and every token it
        wrote, but the last one when the answer did not end on its own (cut at the token limit
        or stopped: that token was written, never read back). With a KV cache, the tokens in
        it; without, what the last step read again."""
        generated = self.generated_tokens or 0
        unread = 1 if generated and self.finish_reason != "eos" else 0
        return (self.prompt_tokens or 0) + generated - unread

    @property
    def new_prompt_tokens(self) -> int:
        """The prompt's tokens the model read for this answer: the rest came from the cache."""
        return max(0, (self.prompt_tokens or 0) - (self.reused_tokens or 0))


def _measured(stats: RunStats, name: str) -> Any:
    """One figure of `stats`; unknown (None) where its arithmetic fails (an overflow, a
    division by zero): a figure is never what ends an answer."""
    try:
        return getattr(stats, name)
    except ArithmeticError:
        return None


@dataclass(frozen=True)
class Figure:
    """One field of AnswerFigures, as the store and the exports see it."""

    name: str
    kind: type  # str, float or int
    since: int  # the history schema version that has its column
    measured: bool

    @property
    def sql_type(self) -> str:
        return SQL_TYPES[self.kind]


def _kind(hint: Any) -> type:
    """`float | None` -> float."""
    if get_origin(hint) in (Union, types.UnionType):
        (kind,) = [a for a in get_args(hint) if a is not type(None)]
        hint = kind
    if hint not in SQL_TYPES:
        raise TypeError(f"a figure is a str, float or int, not {hint!r}")
    return hint  # type: ignore[no-any-return]


def _figures() -> tuple[Figure, ...]:
    hints = get_type_hints(AnswerFigures)
    return tuple(
        Figure(f.name, _kind(hints[f.name]), f.metadata["since"], f.metadata["measured"])
        for f in fields(AnswerFigures)
    )


FIGURES: tuple[Figure, ...] = _figures()
