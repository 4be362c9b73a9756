"""Request bodies of the OpenAI API subset chatapp serves, checked field by field.

Every refusal is an `ApiError` (400) that names the field, in OpenAI's error shape. Fields
chatapp does not know are ignored (as vLLM and llama.cpp's server do); fields it knows but
cannot honour (images, presence penalty...) are refused rather than dropped. The fields
of structured output and tools are checked in structured_fields.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from chatapp.engine.modes import MODES
from chatapp.engine.sampling import MAX_LOGIT_BIAS, PENALTY_ALL, SamplingSettings
from chatapp.engine.text.chat import STYLE_TEMPLATE, Message
from chatapp.server import structured_fields
from chatapp.server.errors import invalid
from chatapp.server.request_limits import (
    check_chat_size,
    check_message_count,
    check_text_size,
)
from chatapp.session.answer import AnswerRequest, ContextPolicy

MAX_STOPS = 4  # OpenAI's limit
MAX_STOP_CHARS = 200
MAX_TOP_LOGPROBS = 20  # chat; the legacy completions API allows 5
MAX_LEGACY_LOGPROBS = 5
MAX_SEED = 2**63 - 1
MAX_TEMPERATURE = 2.0
MAX_REPETITION_PENALTY = 10.0
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_CHOICES = 8  # `n`: each choice is a sequence of its own (a slot with --parallel)
MAX_LOGIT_BIASES = 1024
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True)
class GenerationRequest:
    """An API request, whichever endpoint it came from: the answer asked for (the one
    `AnswerRequest` the window and the CLI build too) and how it goes back over HTTP."""

    answer: AnswerRequest  # a chat (`messages`) or a raw prompt (`text`) to continue
    logprobs: bool
    stream: bool
    include_usage: bool
    model: str | None
    n: int = 1  # choices asked for: `choices()` gives one request per choice

    def choices(self) -> list[GenerationRequest]:
        """One request per choice, each with n = 1. Choice i samples with seed + i (mod 2^63),
        so choice 0 is the answer the same request gets with n = 1, and choice i is the one
        it gets with n = 1 and seed + i; without a seed each choice draws its own."""
        settings, seed = self.answer.settings, self.answer.settings.seed
        return [
            replace(
                self,
                n=1,
                answer=replace(
                    self.answer,
                    settings=replace(settings, seed=None if seed is None else (seed + i) % 2**63),
                ),
            )
            for i in range(self.n)
        ]


def _answer(body: dict[str, Any], max_tokens: int, vocab_size: int, mode: str) -> AnswerRequest:
    """The fields both endpoints share. A prompt that does not fit is refused (400), and a chat
    renders with the model's template whatever style the window's chat uses."""
    return AnswerRequest(
        (),
        _settings(body, max_tokens, vocab_size),
        _mode(body, mode),
        stops=_stops(body.get("stop")),
        context=ContextPolicy.REFUSE,
        prompt_style=STYLE_TEMPLATE,
    )


def parse_chat(
    body: dict[str, Any],
    default_mode: str,
    max_context: int,
    max_chars: int | None = None,
    vocab_size: int = 0,
) -> GenerationRequest:
    """`max_chars`: the most text the model's context can hold (None: not counted);
    `vocab_size`: the model's, for `logit_bias` (0: its token ids are not checked here)."""
    _refuse_unsupported(body, chat=True)
    raw = body.get("messages")
    check_message_count(len(raw) if isinstance(raw, list) else 0, "messages")
    messages = _messages(raw)
    check_chat_size(messages, max_context, max_chars, "messages")
    return replace(
        chat_request(body, messages, default_mode, max_context, vocab_size), n=_choices(body)
    )


def chat_request(
    body: dict[str, Any],
    messages: tuple[Message, ...],
    default_mode: str,
    max_context: int,
    vocab_size: int = 0,
) -> GenerationRequest:
    """The request for `messages` with the other fields of a chat completions `body` (the
    Responses API hands in its own fields under these names, responses_request.py)."""
    output_format = structured_fields.response_format(body.get("response_format"))
    tools = structured_fields.tools(body.get("tools"))
    choice = structured_fields.tool_choice(
        body.get("tool_choice"), tools, body.get("parallel_tool_calls")
    )
    logprobs = _bool(body, "logprobs", False)
    top = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise invalid("top_logprobs needs logprobs set to true.", "top_logprobs")
    max_tokens = _first_int(body, ("max_completion_tokens", "max_tokens"), max_context)
    answer = replace(
        _answer(body, max_tokens, vocab_size, default_mode),
        messages=messages,
        top_logprobs=top,
        output_format=output_format,
        tools=tools,
        tool_choice=choice,
    )
    return GenerationRequest(
        answer,
        logprobs=logprobs,
        stream=_bool(body, "stream", False),
        include_usage=_include_usage(body),
        model=_model(body),
    )


def parse_completion(
    body: dict[str, Any],
    default_mode: str,
    max_context: int = 0,
    max_chars: int | None = None,
    vocab_size: int = 0,
) -> GenerationRequest:
    """`max_chars`: the most text the model's context (`max_context` tokens) can hold;
    `vocab_size` as in parse_chat."""
    _refuse_unsupported(body, chat=False)
    for name, allowed in (("echo", False), ("best_of", 1)):
        if name in body and body[name] not in (None, allowed):
            raise invalid(f"{name} is not supported by chatapp (only {allowed!r}).", name)
    if body.get("suffix") not in (None, ""):
        raise invalid("suffix is not supported by chatapp.", "suffix")
    raw = body.get("logprobs")
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int)):
        raise invalid(
            f"logprobs must be a whole number from 0 to {MAX_LEGACY_LOGPROBS}.", "logprobs"
        )
    top = _int(body, "logprobs", 0, 0, MAX_LEGACY_LOGPROBS)
    max_tokens = _first_int(body, ("max_tokens",), COMPLETIONS_DEFAULT_MAX_TOKENS)
    prompt = _prompt(body.get("prompt"))
    check_text_size(len(prompt), max_context, max_chars, "prompt")
    answer = _answer(body, max_tokens, vocab_size, default_mode)
    answer = replace(answer, text=prompt, top_logprobs=top)
    return GenerationRequest(
        answer,
        logprobs=raw is not None,
        stream=_bool(body, "stream", False),
        include_usage=_include_usage(body),
        model=_model(body),
        n=_choices(body),
    )


def _refuse_unsupported(body: dict[str, Any], chat: bool) -> None:
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value not in (None, 0, 0.0):
            raise invalid(
                f"{name} is not supported by chatapp; use repetition_penalty instead.", name
            )
    if chat:
        for name in ("functions", "function_call"):
            if body.get(name):
                raise invalid(f"{name} (the old API) is not supported; use tools.", name)
    else:
        for name in ("response_format", "tools"):
            if body.get(name):
                raise invalid(f"{name} is only supported by /v1/chat/completions.", name)


def _messages(value: Any) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise invalid("messages must be a non-empty list of {role, content} objects.", "messages")
    out = []
    for i, item in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"{where} must be an object with role and content.", where)
        role = item.get("role")
        if role not in ROLES:
            raise invalid(
                f"{where}.role must be system, developer, user, assistant or tool (got {role!r}).",
                f"{where}.role",
            )
        content = _content(item.get("content"), role, where)
        if role == "tool":
            out.append(structured_fields.tool_message(item, content, where))
            continue
        calls = structured_fields.assistant_calls(item.get("tool_calls"), where)
        if calls and role != "assistant":
            raise invalid(f"{where}.tool_calls: only assistant messages make calls.", where)
        out.append(Message(ROLES[role], content, tool_calls=calls))
    return tuple(out)


def _content(value: Any, role: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if value is None and role == "assistant":
        return ""
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise invalid(
                    f"{where}.content[{j}]: only text parts are supported (got {kind!r}).",
                    f"{where}.content",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise invalid(f"{where}.content[{j}].text must be a string.", f"{where}.content")
            texts.append(text)
        return "\n".join(texts)
    raise invalid(f"{where}.content must be a string or a list of text parts.", where)


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    if not isinstance(value, str):
        raise invalid(
            "prompt must be one string (lists of prompts and token ids are not supported).",
            "prompt",
        )
    if not value:
        raise invalid("prompt is empty.", "prompt")
    return value


def _choices(body: dict[str, Any]) -> int:
    value = body.get("n")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CHOICES:
        raise invalid(
            f"n must be a whole number from 1 to {MAX_CHOICES} (the choices chatapp makes for "
            f"one request; got {str(value)[:20]}).",
            "n",
        )
    return value


def _logit_bias(value: Any, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's map of token ids (as strings) to biases from -100 to 100."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        example = '{"42": -100}'
        raise invalid(
            f"logit_bias must be an object of token ids to biases: {example}.", "logit_bias"
        )
    if len(value) > MAX_LOGIT_BIASES:
        raise invalid(f"logit_bias takes at most {MAX_LOGIT_BIASES} tokens.", "logit_bias")
    out = []
    for key, bias in value.items():
        # Digits only, and few: int() of 5000 digits raises (Python's 4300-digit limit).
        digits = isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 12
        token = int(key) if digits else -1
        if token < 0 or (vocab_size and token >= vocab_size):
            known = f" from 0 to {vocab_size - 1}" if vocab_size else ""
            raise invalid(
                f"logit_bias: {key[:20]!r} is not a token id of this model (ids are whole "
                f"numbers{known}).",
                "logit_bias",
            )
        ok = not isinstance(bias, bool) and isinstance(bias, int | float) and math.isfinite(bias)
        if not ok or not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
            raise invalid(
                f"logit_bias[{key}] must be a number from -{MAX_LOGIT_BIAS} (ban the token) to "
                f"{MAX_LOGIT_BIAS}.",
                "logit_bias",
            )
        out.append((token, float(bias)))
    return tuple(out)


def _settings(body: dict[str, Any], max_tokens: int, vocab_size: int = 0) -> SamplingSettings:
    top_k = _int(body, "top_k", 0, -1, 1 << 24)
    seed = body.get("seed")
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    ):
        raise invalid("seed must be a whole number from 0 to 2^63-1.", "seed")
    settings = SamplingSettings(
        temperature=_number(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE),
        top_k=max(top_k, 0),  # vLLM's -1 and OpenAI's absence both mean "off"
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        repetition_penalty=_number(
            body, "repetition_penalty", 1.0, 0.0, MAX_REPETITION_PENALTY, low_open=True
        ),
        # llama.cpp's name; absent, the penalty means what vLLM's does: the whole sequence.
        penalty_last_n=_int(body, "repeat_last_n", PENALTY_ALL, -1, 1 << 24),
        seed=seed,
        max_new_tokens=max_tokens,
        logit_bias=_logit_bias(body.get("logit_bias"), vocab_size),
    )
    settings.validate()  # the engine's own rules, already met by the checks above
    return settings


def _mode(body: dict[str, Any], default: str) -> str:
    ext = body.get("chatapp")
    if ext is None:
        return default
    if not isinstance(ext, dict):
        raise invalid('chatapp must be an object such as {"loop": "naive"}.', "chatapp")
    loop = ext.get("loop", default)
    if loop not in MODES:
        raise invalid(
            f"chatapp.loop must be one of {', '.join(MODES)} (got {loop!r}).", "chatapp.loop"
        )
    return str(loop)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid("stop must be a string or a list of strings.", "stop")
    if len(stops) > MAX_STOPS:
        raise invalid(f"stop takes at most {MAX_STOPS} strings.", "stop")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise invalid(f"each stop string must have 1 to {MAX_STOP_CHARS} characters.", "stop")
    return tuple(stops)


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not body.get("stream"):
        raise invalid("stream_options is only allowed when stream is true.", "stream_options")
    if not isinstance(options, dict):
        raise invalid("stream_options must be an object.", "stream_options")
    return _bool(options, "include_usage", False, "stream_options.include_usage")


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model must be a string.", "model")
    return model


def _bool(body: dict[str, Any], name: str, default: bool, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{param or name} must be true or false.", param or name)
    return value


def _int(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(f"{name} must be a whole number from {low} to {high}.", name)
    return value


def _first_int(body: dict[str, Any], names: tuple[str, ...], default: int) -> int:
    for name in names:
        if body.get(name) is not None:
            return _int(body, name, default, 1, 1 << 31)
    return default


def _number(
    body: dict[str, Any],
    name: str,
    default: float,
    low: float,
    high: float,
    low_open: bool = False,
) -> float:
    value = body.get(name)
    if value is None:
        return default
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (low < value if low_open else low <= value)
        and value <= high
    )
    if not ok:
        bounds = f"{'above' if low_open else 'from'} {low:g} {'up ' if low_open else ''}to {high:g}"
        raise invalid(f"{name} must be a number {bounds}.", name)
    return float(value)
