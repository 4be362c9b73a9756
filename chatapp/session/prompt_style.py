"""How the window turns a chat into a prompt, as a person chooses it: chat or text
continuation, and the stop strings that end an answer. No Qt.

A base model (no chat template) was never taught turns: asked "The capital of France?" it
answers, then writes the next "User: ..." and "Assistant: ..." lines itself until the token
limit. So the window continues text by default for such a model, and chatting with it uses
plain "User:" / "Assistant:" lines with stop strings that end the answer where the model
starts a turn of its own (engine/text/chat.py).
"""

from __future__ import annotations

from chatapp.engine.text.chat import (
    PLAIN_CHAT_STOPS,
    STYLE_CONTINUE,
    STYLE_PLAIN_CHAT,
    STYLE_TEMPLATE,
)

CHAT, CONTINUE = "chat", "continue"  # what the person picks
CHOICE_LABELS = {CHAT: "Chat", CONTINUE: "Text continuation"}
MAX_STOPS = 8  # as the server allows (server/request_body.py)
MAX_STOP_CHARS = 200

BASE_MODEL_NOTICE = (
    "This is a base model without a chat template: what you write is continued as text, not "
    "answered (Sampling > Prompt > Chat talks to it as User: / Assistant: lines instead)."
)
BASE_MODEL_CHAT_NOTICE = (
    "This is a base model without a chat template: messages are sent as User: / Assistant: "
    "lines, and the answer ends where the model starts a turn of its own."
)
BASE_MODEL_NOTICES = (BASE_MODEL_NOTICE, BASE_MODEL_CHAT_NOTICE)


def base_model_notice(choice: str) -> str:
    """What the banner says of a base model under the chat's prompt choice."""
    return BASE_MODEL_NOTICE if choice == CONTINUE else BASE_MODEL_CHAT_NOTICE


# The prompt box's placeholder while the model continues text (a chat's is the view's own).
CONTINUE_PLACEHOLDER = "Text for the model to continue (Enter sends, Shift+Enter: new line)"
CONTINUE_EMPTY_CHAT = (
    "Write the start of a text, e.g. \u201cThe capital of France is\u201d: the model goes on "
    "with it."
)


def default_choice(has_chat_template: bool) -> str:
    """A chat model chats; a base model continues text."""
    return CHAT if has_chat_template else CONTINUE


def engine_style(choice: str, has_chat_template: bool) -> str:
    """The engine's prompt style for a choice: chat through the model's template, or through
    plain lines when it has none."""
    if choice == CONTINUE:
        return STYLE_CONTINUE
    return STYLE_TEMPLATE if has_chat_template else STYLE_PLAIN_CHAT


def answer_stops(
    user_stops: tuple[str, ...], style: str, has_chat_template: bool = True
) -> tuple[str, ...]:
    """The person's stop strings, and for plain-line chat those that end an invented turn
    (a model without a template chats in plain lines under its "template" style too)."""
    plain = style == STYLE_PLAIN_CHAT or (style == STYLE_TEMPLATE and not has_chat_template)
    extra = PLAIN_CHAT_STOPS if plain else ()
    return tuple(dict.fromkeys((*user_stops, *extra)))


def describe(choice: str, has_chat_template: bool) -> str:
    """One line under the choice: what the model is sent."""
    if choice == CONTINUE:
        return "Your text is sent as it is; the model writes what follows."
    if has_chat_template:
        return "Messages go through the model's chat template."
    return (
        "No chat template: messages are sent as User: / Assistant: lines, and the answer "
        "ends where the model starts a turn of its own."
    )


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", ",": ","}


def parse_stops(text: str) -> tuple[str, ...]:
    """Stop strings as typed: separated by commas, `\\n` a new line, `\\t` a tab, `\\,` a comma,
    `\\\\` a backslash. Raises ValueError with a sentence to show."""
    stops: list[str] = []
    current: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "\\")
            current.append(_ESCAPES.get(escaped, "\\" + escaped))
        elif char == ",":
            stops.append("".join(current))
            current = []
        else:
            current.append(char)
    stops.append("".join(current))
    # Spaces around a comma only separate (a \n or \t stays).
    found = tuple(dict.fromkeys(s.strip(" ") for s in stops if s.strip(" ")))
    if len(found) > MAX_STOPS:
        raise ValueError(f"At most {MAX_STOPS} stop strings, not {len(found)}.")
    if any(len(s) > MAX_STOP_CHARS for s in found):
        raise ValueError(f"A stop string may be at most {MAX_STOP_CHARS} characters.")
    return found


def format_stops(stops: tuple[str, ...]) -> str:
    """The text `parse_stops` reads back as `stops`."""

    def escape(stop: str) -> str:
        out = stop.replace("\\", "\\\\").replace(",", "\\,")
        return out.replace("\n", "\\n").replace("\t", "\\t")

    return ", ".join(escape(s) for s in stops)
