"""What a chat remembers of how it was answered: the model, the system prompt, the sampling,
the prompt style, the stop strings (as LM Studio and Jan keep them per chat) and the tools the
model may call (their JSON and the choice, under "tools" and "tool_choice"). No Qt.

The history keeps the model and the system prompt in their own columns and the rest as one
JSON object (store/schema.py, version 4); each answer request writes them (`remember`), and a
chat opened from the list gets them back (`Conversation.settings`). What cannot be read (an
older or hand-edited file) is left out, never an error: the window then keeps what it shows.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.structured.tool_calls import Tool
from chatapp.engine.text.chat import (
    PLAIN_CHAT_STOPS,
    PROMPT_STYLES,
    STYLE_CONTINUE,
    STYLE_PLAIN_CHAT,
    STYLE_TEMPLATE,
)
from chatapp.session.prompt_style import CHAT, CONTINUE, MAX_STOP_CHARS, MAX_STOPS
from chatapp.session.tool_specs import CHOICES, ToolSpecError, tools_as_json, tools_from_value
from chatapp.store import HistoryStore, StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationOptions:
    """Everything the side panel decides for one answer, captured when it is requested: what
    the chat remembers (`settings_of`), and with the conversation the answer's request
    (chat_jobs.answer_request)."""

    settings: SamplingSettings
    mode: Mode
    system_prompt: str = ""
    json_schema: str | None = None  # "JSON answer": None off; "" any object; else a schema
    stops: tuple[str, ...] = ()  # the answer ends before the first of these
    prompt_style: str = STYLE_TEMPLATE  # engine/text/chat.py PROMPT_STYLES
    tools: tuple[Tool, ...] = ()  # the Tools option's (session/tool_specs.py)
    tool_choice: str = "auto"  # auto, required or none (tool_specs.choice_by_word)


@dataclass(frozen=True)
class ChatSettings:
    model: str | None = None
    system_prompt: str = ""
    sampling: SamplingSettings | None = None  # None: not known (a chat from before)
    prompt_style: str | None = None  # engine/text/chat.py PROMPT_STYLES; None: not known
    stops: tuple[str, ...] = ()  # as sent, with the plain-line chat's own
    tools: tuple[Tool, ...] = ()  # the Tools option's (session/tool_specs.py)
    tool_choice: str = "auto"  # auto, required or none

    @property
    def known(self) -> bool:
        """Written by an answer request (a chat from before keeps only model and prompt)."""
        return self.sampling is not None or self.prompt_style is not None

    @property
    def choice(self) -> str | None:
        """Chat or text continuation (session/prompt_style.py), as the window offers it."""
        if self.prompt_style is None:
            return None
        return CONTINUE if self.prompt_style == STYLE_CONTINUE else CHAT

    @property
    def user_stops(self) -> tuple[str, ...]:
        """The stop strings the person typed (those plain-line chat adds left out)."""
        if self.prompt_style != STYLE_PLAIN_CHAT:
            return self.stops
        return tuple(s for s in self.stops if s not in PLAIN_CHAT_STOPS)

    def to_json(self) -> str:
        """The settings column: everything but the model and the system prompt."""
        body: dict[str, Any] = {"stops": list(self.stops)}
        if self.sampling is not None:
            body["sampling"] = {
                k: v for k, v in asdict(self.sampling).items() if k not in NOT_REMEMBERED
            }
        if self.prompt_style is not None:
            body["prompt_style"] = self.prompt_style
        if self.tools:
            body["tools"] = tools_as_json(self.tools)
            body["tool_choice"] = self.tool_choice
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_store(cls, model: str | None, system_prompt: str, text: str) -> ChatSettings:
        try:
            body = json.loads(text) if text else {}
        except (ValueError, RecursionError):  # a hand-edited history: nested too deeply too
            body = {}
        if not isinstance(body, dict):
            body = {}
        style = body.get("prompt_style")
        return cls(
            model,
            system_prompt,
            _sampling(body.get("sampling")),
            style if style in PROMPT_STYLES else None,
            _stops(body.get("stops")),
            *_tools(body.get("tools"), body.get("tool_choice")),
        )


def settings_of(options: GenerationOptions, model: str | None) -> ChatSettings:
    """What an answer request used, to remember for its chat."""
    return ChatSettings(
        model,
        options.system_prompt.strip(),
        options.settings,
        options.prompt_style,
        options.stops,
        options.tools,
        options.tool_choice if options.tools else "auto",
    )


# Not chosen by the person: set per answer (session/answer.py: text continuation's one token)
# or the app's own (what the penalty looks at).
NOT_REMEMBERED = frozenset({"min_new_tokens", "penalty_last_n"})


# What the window's spin boxes hold (gui/chat/sampling_box.py): a stored or imported value
# beyond them (a seed of 2^70) is dropped or brought in, never handed to Qt (OverflowError).
MAX_SEED = 2**31 - 1
MAX_NEW_TOKENS = 8192
WHOLE = ("top_k", "seed", "max_new_tokens")


def _sampling(value: object) -> SamplingSettings | None:
    if not isinstance(value, dict):
        return None
    known = {f.name: f.type for f in fields(SamplingSettings) if f.name not in NOT_REMEMBERED}
    values: dict[str, Any] = {}
    for name, number in value.items():
        if name not in known or isinstance(number, bool):
            continue
        if name == "seed" and number is None:
            values[name] = None
        elif isinstance(number, int | float) and math.isfinite(number):
            values[name] = _in_range(name, int(number) if name in WHOLE else number)
    settings = SamplingSettings(**values)
    try:
        settings.validate()
    except ValueError:
        return None
    return settings


def _in_range(name: str, number: float) -> Any:
    """A stored value as the window can show it; the rest of the settings still come back."""
    if name == "seed" and not 0 <= number <= MAX_SEED:
        log.warning("a chat's seed %.3g is beyond %d: a random seed instead", number, MAX_SEED)
        return None
    if name == "max_new_tokens" and not 1 <= number <= MAX_NEW_TOKENS:
        log.warning("a chat's token limit %.3g is brought within 1..%d", number, MAX_NEW_TOKENS)
        return min(max(int(number), 1), MAX_NEW_TOKENS)
    if name == "top_k" and number > 1 << 24:  # more than any vocabulary: all of them
        return 0
    return number


def _stops(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    found = [s for s in value if isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS]
    return tuple(dict.fromkeys(found))[: MAX_STOPS + len(PLAIN_CHAT_STOPS)]


def _tools(value: object, choice: object) -> tuple[tuple[Tool, ...], str]:
    """The chat's tools and choice; none where they cannot be used (a hand-edited file, or
    llguidance missing here)."""
    if not isinstance(value, list) or not value:
        return (), "auto"
    try:
        tools = tools_from_value(value)
    except (ToolSpecError, RecursionError):
        return (), "auto"
    return tools, choice if choice in CHOICES else "auto"


def remember(store: HistoryStore | None, conversation_id: int | None, chat: ChatSettings) -> bool:
    """Write a stored chat's settings (the history's messages say what failed when the store
    does: this is one more write to the same file, so it is not said twice)."""
    if store is None or conversation_id is None or store.read_only:
        return False
    try:
        store.update_conversation(
            conversation_id,
            model=chat.model,
            system_prompt=chat.system_prompt,
            settings=chat.to_json(),
        )
    except StoreError:
        log.warning("the chat's settings were not saved", exc_info=True)
        return False
    return True
