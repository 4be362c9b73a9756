"""Chat templates rendered in a bounded Jinja sandbox.

A chat template is code from the model folder (or the GGUF file it came from). It already runs
in Jinja's immutable sandbox, as transformers runs it (no attribute tricks, no file access: the
environment has no loader, so `include`/`import` find nothing). The sandbox does not bound
time or size, though: `{{ 'x' * 300000000 }}` aborted the app. Here a render also stops with a
`TemplateLimitError` when

- it runs longer than `Limits.seconds` (every call the template makes, and every turn of
  each of its `for` loops, checks the clock: a call to a no-op is put at the start of each
  loop body before compiling, so nested loops that call nothing are stopped too);
- its output passes `Limits.output_slack` characters beyond twice the size of its inputs;
- one operation would build a string or list above `Limits.value` bytes (`*`, `**`, `%`, `+`,
  str methods such as `center`/`replace`/`join`/`format`, filters such as `join`/`indent`/
  `tojson`), or all the values it built add up to more than `Limits.total` bytes (a character
  counts one, a list item eight: rough, but it bounds memory whatever the template does).

The environment mirrors transformers' (`trim_blocks`, `lstrip_blocks`, `loopcontrols`, `tojson`,
`raise_exception`, `strftime_now`, `namespace`, the `{% generation %}` tag), so templates
render the same text as `apply_chat_template` does (tested).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from chatapp.engine.errors import ModelError
from chatapp.error_text import first_line

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    seconds: float = 2.0
    output_slack: int = 1 << 20  # characters beyond 2 x the inputs
    value: int = 4 << 20  # bytes (about) one operation may build
    total: int = 64 << 20  # bytes (about) all operations of one render may build
    int_argument: int = 1 << 20  # a width or count passed to a method or filter
    source: int = 1 << 20  # the template text itself


LIMITS = Limits()
_TICK = "chatapp_loop_tick"  # a global no-op: calling it goes through the clock check
_BIG_FORMAT_NUMBER = re.compile(r"\d{7,}")  # a width/precision of a million or more
# What an ordinary chat looks like: a template that hits a limit on this is slow for everyone.
ORDINARY_CHAT = ({"role": "user", "content": "Say hi"},)


class TemplateLimitError(ModelError):
    """The template was stopped: too slow or too big."""


class _Budget:
    """What one render may still spend; checked by every hook. The caps grow with the size of
    the conversation, so a long chat is never refused for being long."""

    def __init__(self, limits: Limits, inputs: int) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.value_cap = max(limits.value, 2 * inputs + limits.output_slack)
        self.total_cap = max(limits.total, 16 * inputs)
        self.output_cap = 4 * inputs + limits.output_slack
        self.spent = 0
        self.output = 0
        self.lines = 0

    def charge(self, items: int, what: str) -> None:
        if items > self.value_cap:
            raise TemplateLimitError(
                f"The model's chat template tried to build {what} of about {items} bytes "
                f"(at most {self.value_cap}); it was stopped."
            )
        self.spent += items
        if self.spent > self.total_cap:
            raise TemplateLimitError(
                "The model's chat template built more than "
                f"{self.total_cap} bytes in all; it was stopped."
            )

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(
                f"The model's chat template ran for more than {self.limits.seconds:g} s; "
                "it was stopped."
            )


_state = threading.local()  # .budget: the render in progress on this thread


def _budget() -> _Budget:
    budget: _Budget | None = getattr(_state, "budget", None)
    if budget is None:  # a template function kept and called outside a render
        raise SecurityError("chat template code ran outside a render")
    return budget


_SIZED = (str, list, tuple, dict, bytes)


def _size(value: Any) -> int:
    """About the bytes a value holds: a character each, a pointer per list item (or two)."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list | tuple):
        return 8 * len(value)
    return 16 * len(value) if isinstance(value, dict) else 0


def _total_size(items: list[Any] | tuple[Any, ...]) -> int:
    try:
        return sum(map(len, items))  # all text: summed in C, fast even for millions
    except TypeError:
        return sum(_size(i) for i in items)


def _check_ints(args: tuple[Any, ...], kwargs: dict[str, Any], cap: int) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > cap:
            raise TemplateLimitError(
                f"The model's chat template passed the number {value} to a function "
                f"(at most {cap}); it was stopped."
            )


def _estimate_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """An upper bound of what a growing str method will build, before it runs."""
    owner = getattr(func, "__self__", None)
    name = getattr(func, "__name__", "")
    if not isinstance(owner, str):
        return 0
    if name == "replace" and len(args) >= 2 and isinstance(args[1], str):
        old = args[0] if isinstance(args[0], str) else "x"
        return (
            len(owner) + (len(owner) + 1) * len(args[1])
            if not old
            else len(owner) * max(1, len(args[1]))
        )
    if name == "join" and args and isinstance(args[0], (list, tuple)):
        parts = args[0]
        return _total_size(parts) + len(owner) * len(parts)
    if name == "expandtabs":
        return len(owner) * 64
    return 0


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        budget = _budget()
        if operator == "+":  # the common case: joining a template's strings
            if isinstance(left, _SIZED) and isinstance(right, _SIZED):
                budget.charge(_size(left) + _size(right), "a joined value")
            return left + right
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, _SIZED) and isinstance(times, int):
                    budget.charge(_size(seq) * max(times, 0), "a repeated value")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1 and left.bit_length() * right > 4096:
                raise TemplateLimitError(
                    "The model's chat template computed a power too large to hold; it was stopped."
                )
        elif operator == "%" and isinstance(left, str):
            if _BIG_FORMAT_NUMBER.search(left):
                raise TemplateLimitError(
                    "The model's chat template formats with an enormous width; it was stopped."
                )
            values = right if isinstance(right, tuple) else (right,)
            _check_ints(values, {}, budget.limits.int_argument)
        result = super().call_binop(context, operator, left, right)
        budget.charge(_size(result), "a value")
        return result

    def call(
        __self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any
    ) -> Any:
        budget = _budget()
        budget.check_time()
        _check_ints(args, kwargs, budget.limits.int_argument)
        estimate = _estimate_call(__obj, args, kwargs)
        if estimate:
            budget.charge(estimate, "a text")
        result = super().call(__context, __obj, *args, **kwargs)
        budget.charge(_size(result), "a value")
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and _BIG_FORMAT_NUMBER.search(owner):
            raise TemplateLimitError(
                "The model's chat template formats with an enormous width; it was stopped."
            )
        return super().wrap_str_format(value)


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    caps = {"indent": 256, "tojson": 64}

    @wraps(func)  # keeps jinja_pass_arg (pass_environment, pass_eval_context)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.check_time()
        _check_ints(args, kwargs, caps.get(name, budget.limits.int_argument))
        if name == "join":
            values = [a for a in args if isinstance(a, list | tuple)]
            if values:
                budget.charge(_total_size(values[0]) + 8 * len(values[0]), "a joined text")
        if name == "replace" and len(args) >= 4 and isinstance(args[1], str):
            budget.charge(len(str(args[1])) * max(1, _size(args[3])), "a replaced text")
        if name == "indent" and args and isinstance(args[0], str):
            width = args[1] if len(args) > 1 else kwargs.get("width", 4)
            per_line = len(width) if isinstance(width, str) else 256
            budget.charge(len(args[0]) + args[0].count("\n") * per_line, "an indented text")
        result = func(*args, **kwargs)
        budget.charge(_size(result), "a value")
        return result

    return guarded


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` whose attributes cannot hide underscores or unbounded values."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's signature: `self` may be a key
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for key, value in attrs.items():
            _Namespace._check(key, value)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name, value)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any, value: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"chat templates cannot set the attribute {name!r}")
        if _size(value) > _budget().value_cap:
            raise TemplateLimitError(
                "The model's chat template stored a value that is too large; it was stopped."
            )


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask marker): the body."""

    tags = {"generation"}  # noqa: RUF012  (Jinja's declared class attribute)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' version: no HTML escaping, its options exposed.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> _BoundedEnvironment:
    env = _BoundedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _guard_filter(name, f) for name, f in env.filters.items()}
    env.globals.pop("lipsum", None)  # paragraphs of filler on demand: nothing a chat needs
    env.globals.update(
        raise_exception=_raise_exception,
        strftime_now=_strftime_now,
        **{_TICK: lambda: None},
        namespace=_Namespace,
        dict=lambda *args, **kwargs: dict(*args, **kwargs),
    )
    return env


class ChatTemplate:
    """One compiled chat template; `render` is bounded (see the module docstring)."""

    def __init__(self, source: str, limits: Limits | None = None) -> None:
        limits = limits or LIMITS
        if len(source) > limits.source:
            raise ModelError(
                f"The model's chat template is {len(source)} characters long; more than "
                f"{limits.source} is refused."
            )
        self.limits = limits
        env = _environment()
        try:
            tree = env.parse(source)
            for loop in tree.find_all(jinja2.nodes.For):
                tick = jinja2.nodes.Call(jinja2.nodes.Name(_TICK, "load"), [], [], None, None)
                loop.body.insert(0, jinja2.nodes.ExprStmt(tick).set_lineno(loop.lineno))
            code = env.compile(tree)
        except jinja2.TemplateSyntaxError as exc:
            raise ModelError(f"The model's chat template is not valid Jinja ({exc}).") from None
        except RecursionError:
            raise ModelError("The model's chat template is nested too deeply.") from None
        self._template = env.template_class.from_code(env, code, env.make_globals(None), None)

    def render(self, **context: Any) -> str:
        _state.budget = _Budget(self.limits, sum(_text_size(v) for v in context.values()))
        try:
            return "".join(self._pieces(_state.budget, context))
        finally:
            _state.budget = None

    def _pieces(self, budget: _Budget, context: dict[str, Any]) -> Iterator[str]:
        for piece in self._template.generate(**context):
            budget.output += len(piece)
            if budget.output > budget.output_cap:
                raise TemplateLimitError(
                    f"The model's chat template produced more than {budget.output_cap} "
                    "characters; it was stopped."
                )
            yield piece


def _text_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_size(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_text_size(v) for v in value)
    return 0


class Templates:
    """The templates one tokenizer renders with (its own, text continuation, plain chat),
    each compiled once. Several threads (server slots, the chat) render at once, so what is
    kept here only grows. A template that hits a limit on a small ordinary chat too fails fast
    from then on; a huge conversation alone never switches it off for every later one."""

    def __init__(self) -> None:
        self._compiled: dict[str, ChatTemplate] = {}
        self._errors: dict[str, ModelError] = {}
        self._ordinary: set[str] = set()  # sources that render an ordinary chat within limits

    def render(self, source: str, context: dict[str, Any]) -> str:
        """`source` rendered with `context` (the messages, add_generation_prompt, the tools
        and the special tokens); ModelError where the template fails (TemplateLimitError
        where it was stopped)."""
        failed = self._errors.get(source)
        if failed is not None:  # a template that hit a limit fails fast after
            raise failed
        template: ChatTemplate | None = None
        try:
            template = self._template(source)
            return template.render(**context)
        except TemplateLimitError as exc:
            if template is not None:
                self._after_limit(exc, context, source, template)
            raise
        except ModelError:
            raise
        except Exception as exc:  # a template may reject e.g. a system role
            raise ModelError(f"The model's chat template failed: {first_line(exc)}") from exc

    def _template(self, source: str) -> ChatTemplate:
        template = self._compiled.get(source)
        if template is None:  # two threads may both compile it: either copy serves
            template = self._compiled.setdefault(source, ChatTemplate(source))
        return template

    def _after_limit(
        self,
        exc: TemplateLimitError,
        context: dict[str, Any],
        source: str,
        template: ChatTemplate,
    ) -> None:
        """Whose fault the limit was: the request's content (it alone is refused) or the
        template's (an ordinary chat hits the limit too: it fails fast from now on)."""
        messages = context.get("messages") or []
        chars = sum(len(str(d.get("content") or "")) for d in messages)
        if source not in self._ordinary and not self._renders_ordinary_chat(
            source, template, context
        ):
            self._errors[source] = exc
            log.warning(
                "the chat template hit a limit on an ordinary chat too; it is refused from now "
                "on (%s)",
                exc,
            )
        else:
            log.warning(
                "one conversation (%d messages, %d characters) made the chat template hit a "
                "limit; only it was refused (%s)",
                len(messages),
                chars,
                exc,
            )

    def _renders_ordinary_chat(
        self, source: str, template: ChatTemplate, context: dict[str, Any]
    ) -> bool:
        """A small ordinary chat renders within the limits (asked once, then remembered)."""
        ordinary = {
            **context,
            "messages": [dict(m) for m in ORDINARY_CHAT],
            "add_generation_prompt": True,
            "tools": None,
            "documents": None,
        }
        try:
            template.render(**ordinary)
        except TemplateLimitError:
            return False
        except Exception:  # e.g. it refuses something else: not a question of limits
            pass
        self._ordinary.add(source)
        return True
