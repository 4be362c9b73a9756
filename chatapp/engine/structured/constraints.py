"""Constrained decoding: the answer must match a grammar (JSON, a JSON schema, a tool call).

Before each token is sampled, the grammar's matcher says which tokens may come next; the others'
logits become -inf, so the sampler (greedy or not, either loop) can only pick a token that keeps
the text valid. Each sampled token then advances the matcher.

The grammar engine is llguidance (Rust, no dependencies of its own). Chosen against xgrammar and
outlines-core on SmolLM2's 49k vocabulary (docs/server.md, "Structured output"): it compiles a
schema in 1-12 ms (outlines-core: 0.04-2.2 s, and 28-49 s for "any JSON object", which it can
only approximate to a fixed depth), computes a mask in 29-49 us at the median, and needs
neither torch nor triton (xgrammar imports torch). It also takes Lark grammars with JSON
schemas inline, which the tool calls use (free text, or a call that must be valid).

Without llguidance installed, asking for a constraint raises ConstraintError: one line.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from chatapp.engine.structured.json_schema import (
    MAX_SCHEMA_CHARS,
    ConstraintError,
    check_schema,
    prepared_schema,
)
from chatapp.engine.text.chat import FolderTokenizer
from chatapp.error_text import first_line
from chatapp.json_text import JsonTextError, parse_json_text

__all__ = ["MAX_SCHEMA_CHARS", "ConstraintError", "check_schema"]

T = TypeVar("T")
# The grammar library compiles by recursion on the calling thread's stack: it runs on a
# thread of its own with this much (reserved, touched only as deep as it goes).
COMPILE_STACK_BYTES = 256 * 1024 * 1024
_STACK_SIZE_LOCK = threading.Lock()
MISSING_LIBRARY = (
    "Structured output needs the llguidance package, which is not installed "
    "(pip install llguidance)."
)


@dataclass(frozen=True)
class OutputFormat:
    """What the answer must be. `lark` is llguidance's Lark syntax (tool calls build one)."""

    kind: Literal["json_object", "json_schema", "lark"]
    schema: Mapping[str, Any] | None = None
    lark: str | None = None
    # Strict: a schema keyword llguidance does not implement is refused; otherwise ignored
    # (OpenAI's `strict` defaults to false).
    strict: bool = False

    @staticmethod
    def json_object() -> OutputFormat:
        return OutputFormat("json_object")

    @staticmethod
    def json_schema(schema: Mapping[str, Any], strict: bool = False) -> OutputFormat:
        check_schema(schema)
        return OutputFormat("json_schema", schema=schema, strict=strict)

    @staticmethod
    def from_lark(text: str) -> OutputFormat:
        return OutputFormat("lark", lark=text)


def output_format_from_text(text: str) -> OutputFormat:
    """The window's schema box: empty is any JSON object, else the JSON schema it holds."""
    if not text.strip():
        return OutputFormat.json_object()
    try:
        schema = parse_json_text(text)
    except JsonTextError as exc:
        raise ConstraintError(f"The JSON schema {exc}.") from None
    return OutputFormat.json_schema(schema)


def library_available() -> bool:
    return importlib.util.find_spec("llguidance") is not None


# Compact JSON: no whitespace between tokens. A model may otherwise fill its answer with
# newlines (small ones do), and OpenAI's structured outputs are compact too.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False}


def grammar_text(fmt: OutputFormat) -> str:
    """The llguidance grammar for `fmt` (not yet checked)."""
    import llguidance

    compile_json: Any = llguidance.LLMatcher.grammar_from_json_schema
    if fmt.kind == "json_object":
        return str(compile_json({"type": "object"}, JSON_OPTIONS))
    if fmt.kind == "json_schema":
        assert fmt.schema is not None
        schema = prepared_schema(fmt.schema)
        return str(compile_json(schema, {**JSON_OPTIONS, "lenient": not fmt.strict}))
    assert fmt.lark is not None
    return str(llguidance.LLMatcher.grammar_from_lark(fmt.lark))


def lark_json(schema: Mapping[str, Any], strict: bool = False) -> str:
    """A checked schema inlined in a Lark rule (prepared as a response_format's is), compact
    as the JSON answers are."""
    options = {**JSON_OPTIONS, "lenient": not strict}
    return "%json " + json.dumps({**prepared_schema(schema), "x-guidance": options})


def on_big_stack(work: Callable[[], T]) -> T:
    """`work()` on a thread with COMPILE_STACK_BYTES of stack (its exception re-raised here).

    The stack size is a process-wide setting read when a thread starts: set and restored
    around this one thread's start."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)

    thread = threading.Thread(target=run, name="chatapp-grammar", daemon=True)
    with _STACK_SIZE_LOCK:
        try:
            previous = threading.stack_size(COMPILE_STACK_BYTES)
        except (ValueError, RuntimeError):  # a platform that refuses it: its default stack
            previous = None
        try:
            thread.start()
        except RuntimeError:  # the reservation refused (a ulimit -v): the default stack
            if previous is None:
                raise
            threading.stack_size(previous)
            previous = None
            thread = threading.Thread(target=run, name="chatapp-grammar", daemon=True)
            thread.start()
        finally:
            if previous is not None:
                threading.stack_size(previous)
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


# llguidance's error once a grammar has nested further than it tracks: a schema whose every
# value contains another of itself (a required property or a minItems item that $refs back).
ENDLESS_GRAMMAR = "Too many items"
ENDLESS_SCHEMA = (
    "The JSON schema allows no value of finite size: something it requires contains itself "
    "again (a required property or a minItems item whose $ref leads back), so no answer can end."
)


class TokenConstraint:
    """One generation's matcher: masks logits, advances with each sampled token."""

    def __init__(self, matcher: Any, vocab: int) -> None:
        self._matcher = matcher
        self._bits = np.zeros((vocab + 31) // 32, dtype=np.int32)
        self._vocab = vocab
        self._out: np.ndarray | None = None

    def masked(self, logits: np.ndarray) -> np.ndarray:
        """A copy of `logits` with every token the grammar forbids at -inf (the raw logits
        stay untouched: log-probs are reported under them, as without a constraint)."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self._matcher.is_error():
            raise ConstraintError(f"The output constraint failed: {self._error()}")
        if self._out is None or self._out.shape != logits.shape:
            self._out = np.empty(logits.shape, dtype=np.float32)
        out = self._out
        out.fill(-np.inf)
        n = min(logits.size, self._vocab)
        allowed = np.unpackbits(self._bits.view(np.uint8), count=n, bitorder="little")
        np.copyto(out[:n], logits[:n], where=allowed.view(np.bool_))
        if not allowed.any():
            raise ConstraintError("The output constraint allows no token here.")
        return out

    def first_problem(self) -> str:
        """Why no answer can start ("" when one can): the first mask, computed again (the
        matcher's state is unchanged) by the first `masked`."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self._matcher.is_error():
            return f"no value matches it ({self._error()})"
        if not self._bits.any():
            return "no value matches it"
        return ""

    def advance(self, token: int) -> None:
        if not self._matcher.consume_token(int(token)):
            error = self._error()
            if ENDLESS_GRAMMAR in error:  # llguidance's words for a value that never closes
                raise ConstraintError(ENDLESS_SCHEMA)
            raise ConstraintError(f"The output constraint refused a token: {error}")

    @property
    def stopped(self) -> bool:
        """The grammar is complete and nothing may follow: the answer is over."""
        return bool(self._matcher.is_stopped())

    def _error(self) -> str:
        lines = str(self._matcher.get_error()).strip().splitlines()
        return lines[0][:300] if lines else "unknown error"


class ConstraintCompiler:
    """Turns an OutputFormat into a TokenConstraint for one tokenizer.

    Making one builds the tokenizer's token table (~1 s for a 49k vocabulary): a loaded model
    makes its compiler with its first constrained answer (loaded_model.LoadedModel.constraints).
    ConstraintError where llguidance is missing or cannot take the tokenizer."""

    def __init__(self, hf_tokenizer: Any, eos_ids: Sequence[int], vocab_size: int) -> None:
        if not library_available():
            raise ConstraintError(MISSING_LIBRARY)
        self._hf = hf_tokenizer
        self._eos = [int(i) for i in eos_ids]
        self._vocab = max(int(vocab_size), len(hf_tokenizer))
        try:
            self.ll_tokenizer: Any = self._build_ll_tokenizer()
        except Exception as exc:  # e.g. a slow (Python-only) tokenizer
            raise ConstraintError(
                f"This model's tokenizer cannot be used for structured output ({exc})."
            ) from exc

    def _build_ll_tokenizer(self) -> Any:
        import llguidance

        if not isinstance(self._hf, FolderTokenizer):  # transformers' tokenizer
            import llguidance.hf  # imports transformers

            return llguidance.hf.from_tokenizer(
                self._hf, n_vocab=self._vocab, eos_token=self._eos or None
            )
        # What llguidance.hf does, without transformers: the backend's serialization (it
        # already has no truncation or padding).
        eos = self._eos or self._hf.eos_token_id
        text = self._hf.backend_tokenizer.to_str()
        return llguidance.LLTokenizer(text, n_vocab=self._vocab, eos_token=eos)

    def check(self, fmt: OutputFormat) -> None:
        """Raise ConstraintError (one line) for a schema or grammar llguidance refuses."""
        self.start(fmt)

    def start(self, fmt: OutputFormat) -> TokenConstraint:
        constraint = on_big_stack(lambda: self._compile(self.ll_tokenizer, fmt))
        # A grammar the library accepts may still allow nothing (a schema no value matches):
        # found now, as a refusal of the request, not in the middle of its answer.
        problem = constraint.first_problem()
        if problem:
            what = "grammar" if fmt.kind == "lark" else "JSON schema"
            raise ConstraintError(f"The {what} cannot be used: {problem}")
        return constraint

    def _compile(self, tokenizer: Any, fmt: OutputFormat) -> TokenConstraint:
        import llguidance

        what = "grammar" if fmt.kind == "lark" else "JSON schema"
        try:
            grammar = grammar_text(fmt)
            matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ConstraintError(f"The {what} is not valid: {first_line(exc)}") from None
        if matcher.is_error():
            raise ConstraintError(f"The {what} cannot be used: {first_line(matcher.get_error())}")
        return TokenConstraint(matcher, self._vocab)
