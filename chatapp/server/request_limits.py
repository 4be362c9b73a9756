"""How big one chat request may be, counted before the chat template sees it.

The template renders in a bounded sandbox (engine/text/template.py: 2 s, bounded memory), but a
request of 100 000 tiny messages (3.4 MB, under the body cap) used to run it into that limit,
and every later request was then refused too. Counting first gives the big request its own
clear 400, in microseconds, before it waits in the queue; the template never sees it.

- Messages: at most `MAX_MESSAGES` (the default model's template renders 4096 in about 0.05 s,
  40x within its limit on a busy 2-core machine; real chats stay far below).
- Characters: at most what the model's context can hold (its tokens times the longest
  vocabulary entry's characters, the bound the engine checks after rendering): more could
  never fit, so it is refused as the context overflow it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatapp.engine.errors import ContextOverflowError
from chatapp.engine.text.chat import Message
from chatapp.server.errors import ApiError, invalid

MAX_MESSAGES = 4096


def check_chat_size(
    messages: Sequence[Message], max_context: int, max_chars: int | None, param: str
) -> None:
    """Refuse (400) a conversation with too many messages or more text than fits."""
    check_message_count(len(messages), param)
    check_text_size(sum(_chars(m) for m in messages), max_context, max_chars, param)


def check_message_count(count: int, param: str) -> None:
    """Refuse (400) more than MAX_MESSAGES; also asked of the body's raw list, before each
    message is checked (100 000 of them: refused in 0.24-0.32 s instead of 1.2-1.3 s, most of
    it now reading the JSON, on a busy 2-core machine)."""
    if count > MAX_MESSAGES:
        raise invalid(
            f"{param} holds {count} messages; chatapp takes at most {MAX_MESSAGES} in one request.",
            param,
            "too_many_messages",
        )


def check_text_size(chars: int, max_context: int, max_chars: int | None, param: str) -> None:
    """Refuse (400) more characters than the context can hold (a raw prompt's too: a 10 MB
    one took 21 s and 1.7 GB to tokenize)."""
    if max_chars is not None and chars > max_chars:
        per_token = max(1, max_chars // max(1, max_context))
        overflow = ContextOverflowError(-(-chars // per_token), max_context, at_least=True)
        raise ApiError(
            400,
            f"{param} holds {chars} characters, more than the model's context can hold: {overflow}",
            param=param,
            code="context_length_exceeded",
        )


def _chars(message: Message) -> int:
    return len(message.content) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
