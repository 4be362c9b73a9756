"""A model's chat tokenizer: its tokenizer and chat template, and the control tokens kept out
of the messages' text.

A tokenizer turns the string `<|im_end|>` into the control token wherever it appears, so text
holding it could end a turn and start a forged one. The template is rendered with each
control-token string in the messages wrapped in two Unicode noncharacters (U+FDD0 and U+FDD1,
reserved for such internal use and stripped from the messages first), and the rendered text is
cut at the markers: the pieces between them are encoded normally (the template's own control
tokens stay tokens), each wrapped string with special tokens off (the ordinary tokens of its
characters). A marker that a template string method tore from its partner is dropped but still
cuts the text, so the two sides can never join into a control token.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatapp.engine.errors import ContextOverflowError, ModelError
from chatapp.engine.model_folder.files import (
    TokenizerFiles,
    optional_inside,
    read_json_file,
    read_tokenizer_files,
)
from chatapp.engine.resident import resident_memory, return_freed_heap
from chatapp.engine.text.folder_tokenizer import FolderTokenizer, load_tokenizer
from chatapp.engine.text.template import TemplateLimitError, Templates
from chatapp.engine.text.tokenizer_pieces import LONG_TEXT

# Used when a model folder has no chat template of its own (base models).
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
NO_TEMPLATE_NOTICE = (
    "This model has no chat template (it may be a base model, not a chat model): the "
    "conversation is sent as plain 'User:' / 'Assistant:' lines, and the answer ends where "
    "the model starts a turn of its own."
)

# How a conversation becomes the prompt: an argument of every render, never the tokenizer's
# state, so the chat, a served request and a comparison sharing one model render alike.
STYLE_TEMPLATE = "template"  # the model's own chat template (the fallback without one)
STYLE_CONTINUE = "continue"  # text continuation: the messages' text is one document to go on
STYLE_PLAIN_CHAT = "plain-chat"  # "User: ..." / "Assistant:" lines (FALLBACK_TEMPLATE)
PROMPT_STYLES = (STYLE_TEMPLATE, STYLE_CONTINUE, STYLE_PLAIN_CHAT)
# Text continuation: each message's text as written, a new line before each question after the
# first; an answer goes straight on from the text before it.
CONTINUE_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] != 'assistant' and not loop.first %}{{ '\\n' }}"
    "{% endif %}{{ m['content'] }}{% endfor %}"
)
# A base model chatting through FALLBACK_TEMPLATE writes the next turns itself: these end them.
PLAIN_CHAT_STOPS = ("\nUser:", "\nAssistant:", "\nSystem:")


def prompt_notice(folder: Path) -> str | None:
    """The notice to show for a model folder, read from its files without loading anything
    (only regular files inside the folder, size-capped; an unreadable config counts as none)."""
    try:
        config = read_json_file(folder, "tokenizer_config.json") or {}
        jinja = optional_inside(folder, "chat_template.jinja")
    except (ModelError, OSError):
        config, jinja = {}, None
    if config.get("chat_template") or jinja is not None:
        return None
    return NO_TEMPLATE_NOTICE


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: `arguments` is JSON text, as the OpenAI API carries it."""

    id: str
    name: str
    arguments: str

    def as_dict(self, api: bool = False) -> dict[str, Any]:
        """As chat templates expect it (transformers' convention): arguments as an object;
        `api`: as the OpenAI API carries it to a server, arguments as JSON text."""
        arguments: Any = self.arguments  # as it is too where the token limit cut it
        with contextlib.suppress(ValueError, RecursionError):
            arguments = arguments if api else json.loads(self.arguments)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    # A system message's tool list as JSON text, for templates that read it there
    # (Phi-4-mini's `message['tools']`).
    tools: str | None = None

    def as_dict(self, api: bool = False) -> dict[str, Any]:
        """For the template (`api`: for a server; engine/text/chat.py ToolCall.as_dict)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tools is not None:
            out["tools"] = self.tools
        if self.tool_calls:
            out["tool_calls"] = [call.as_dict(api) for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class ChatTokenizer:
    """The folder's tokenizer (`tokenizers`, or transformers where that alone would give other
    ids; local files only) with its chat template.

    Message text is tokenized as text (the module's docstring): a control token typed, pasted,
    imported or put in the system prompt becomes the ordinary tokens of its characters. Text
    without one is rendered and encoded once, so ordinary prompts and the KV prefix reuse are
    as they would be without it.
    """

    def __init__(self, files: TokenizerFiles) -> None:
        """From the folder's tokenizer files as read and checked once (a model's description
        holds them: model_description.ModelDescription.tokenizer)."""
        anon_before = resident_memory().get("anon", 0)
        self.tok: Any = load_tokenizer(files)
        source = _template_source(getattr(self.tok, "chat_template", None))
        self.has_template = bool(source)
        self._own_source = source or FALLBACK_TEMPLATE
        # Each style's template compiled once; what is kept never says which style is in use.
        self._templates = Templates()
        self._max_chars: int | None = None
        self._last_long: tuple[bool, str, array[int]] | None = None  # see _encode_once
        # For the GUI and `chatapp generate` to show: why a base model's answers look odd.
        self.notice: str | None = None if self.has_template else NO_TEMPLATE_NOTICE
        self._bos = self._bos_to_add()
        self._control = ControlTokens(self.tok)
        # Parsing tokenizer.json frees ~3x what the tokenizer keeps (Gemma 3: 290 MiB freed,
        # 95 MiB kept); glibc holds on to it unless asked (docs/engine.md).
        return_freed_heap()
        # What the tokenizer keeps (anonymous memory, measured; 0 where /proc is not there):
        # `chatapp bench` and scripts/answer_memory.py report it.
        self.resident_bytes = max(0, resident_memory().get("anon", 0) - anon_before)

    @classmethod
    def from_folder(cls, folder: Path) -> ChatTokenizer:
        """The tokenizer of `folder` alone (its files checked and read here), where no model
        description was read (tools, tests)."""
        return cls(read_tokenizer_files(folder))

    def _bos_to_add(self) -> int | None:
        """BOS when the tokenizer puts one in front of plain text (its post-processor decides;
        transformers 5 does not always reflect add_bos_token as an attribute)."""
        bos = self.tok.bos_token_id
        if bos is None:
            return None
        with_specials = list(self.tok.encode("a", add_special_tokens=True))
        return int(bos) if with_specials[:1] == [bos] and self.encode("a")[:1] != [bos] else None

    def with_bos(self, ids: list[int]) -> list[int]:
        """`ids` with BOS first when the model wants one and they do not start with it (as
        llama.cpp adds it: templates that write it get it once)."""
        if self._bos is not None and ids[:1] != [self._bos]:
            return [self._bos, *ids]
        return ids

    def encode(self, text: str) -> list[int]:
        """Ids of text the app itself wrote (special tokens in it are parsed)."""
        return list(self.tok.encode(text, add_special_tokens=False))

    def encode_text(self, text: str) -> list[int]:
        """Ids of text a person wrote: special tokens in it stay text."""
        text = valid_text(text)  # checked here, before the control tokens' encoder sees it
        return self._control.encode_as_text(text)

    @property
    def media_ids(self) -> frozenset[int]:
        """Image and sound markers (Gemma 3's <start_of_image>, ...): a converted model is
        given no media, so no answer contains one (engine/sampling.Sampler's `never`)."""
        return self._control.media_ids

    def decode(self, ids: Sequence[int]) -> str:
        hidden = self._control.media_ids
        shown = [i for i in ids if i not in hidden] if hidden else list(ids)
        return str(self.tok.decode(shown, skip_special_tokens=True))

    def source_of(self, style: str = STYLE_TEMPLATE) -> str:
        """The template text a style renders with (one of PROMPT_STYLES): the model's own,
        text continuation, or plain "User:" / "Assistant:" lines."""
        if style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt style {style!r}")
        return {STYLE_CONTINUE: CONTINUE_TEMPLATE, STYLE_PLAIN_CHAT: FALLBACK_TEMPLATE}.get(
            style, self._own_source
        )

    def tools_in_template(self, style: str = STYLE_TEMPLATE) -> bool:
        """Does `style` render with the model's own template, and does that describe tools
        (Qwen 2.5/3, Llama 3.1+, ...)?"""
        source = self.source_of(style)
        return self.has_template and source == self._own_source and "tools" in source

    def default_system_prompt(self) -> str:
        """The system text the template writes when a chat has none (SmolLM2's "You are a
        helpful AI assistant named SmolLM..."): every prompt holds it, so the window shows it.
        Found as what a system message of the chat's own takes the place of ("": none)."""
        marker, question = "\ue000system\ue000", [Message("user", "\ue001")]
        try:
            alone = self.render(question)
            with_own = self.render([Message("system", marker), *question])
        except (ModelError, ValueError):
            return ""
        head, found, tail = with_own.partition(marker)
        if not found or len(head) + len(tail) > len(alone):
            return ""
        if not (alone.startswith(head) and alone.endswith(tail)):
            return ""
        return alone[len(head) : len(alone) - len(tail)].strip()

    @property
    def template_source(self) -> str:
        """The chat template's text (the fallback for folders without one)."""
        return self._own_source

    @property
    def supports_tools(self) -> bool:
        """Does the model's own template describe tools (Qwen 2.5/3, Llama 3.1+, ...)?"""
        return self.tools_in_template(STYLE_TEMPLATE)

    def render(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        style: str = STYLE_TEMPLATE,
    ) -> str:
        """The prompt text: a pure function of the messages, the tools and the style."""
        source = self.source_of(style)
        return self._render([m.as_dict() for m in messages], add_generation_prompt, tools, source)

    def chat_ids(
        self,
        messages: Sequence[Message],
        limit: int | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        continue_last: bool = False,
        style: str = STYLE_TEMPLATE,
    ) -> list[int]:
        """Prompt ids: the template's control tokens as tokens, the messages' text as text,
        rendered in `style` (PROMPT_STYLES).

        With `limit`, a chat whose text cannot fit in that many tokens (more characters than
        `limit` tokens of the vocabulary's longest can cover) raises ContextOverflowError
        before tokenizing: a 10 MB paste took 21 s and 1.7 GB to count.
        `continue_last`: the last message is an answer cut short; the prompt ends with its
        text, so that the model goes on with it (transformers' continue_final_message).
        """
        messages = [_with_valid_text(m) for m in messages]
        partial = ""
        if continue_last and messages and messages[-1].role == "assistant":
            partial = messages.pop().content
        source = self.source_of(style)
        text = self._render([m.as_dict() for m in messages], True, tools, source) + partial
        self._check_length(text, limit)
        if not any(self._control.found_in(m.content) for m in [*messages, Message("", partial)]):
            return self.with_bos(self._encode_once(text, False))
        marked = [{**m.as_dict(), "content": self._control.mark(m.content)} for m in messages]
        prompt = self._render(marked, True, tools, source) + self._control.mark(partial)
        return self.with_bos(self._encode_once(prompt, True))

    def _encode_once(self, prompt: str, marked: bool) -> list[int]:
        """The prompt's ids; a long one (a paste) is encoded once for the count that fits the
        chat to the context and the answer that follows with the same messages: the last long
        prompt's ids are kept (4 bytes a token)."""
        last = self._last_long
        if last is not None and last[0] == marked and last[1] == prompt:
            return last[2].tolist()
        ids = self._control.encode_marked(prompt) if marked else self.encode(prompt)
        if len(prompt) > LONG_TEXT:
            self._last_long = (marked, prompt, array("i", ids))
        return ids

    def _check_length(self, text: str, limit: int | None) -> None:
        if limit is None:
            return
        per_token = self._chars_per_token()
        if len(text) > per_token * limit:
            raise ContextOverflowError(-(-len(text) // per_token), limit, at_least=True)

    def max_chars(self, tokens: int) -> int:
        """The most characters of text that `tokens` tokens can hold (an upper bound)."""
        return self._chars_per_token() * tokens

    def _chars_per_token(self) -> int:
        """An upper bound of the characters one token stands for: the longest vocabulary
        entry (byte-level and SentencePiece entries spell at least one character per text
        character), four times that when a normalizer may fold several characters into one."""
        if self._max_chars is None:
            longest = max((len(t) for t in self.tok.get_vocab()), default=1)
            backend = getattr(self.tok, "backend_tokenizer", None)
            folds = backend is None or backend.normalizer is not None
            self._max_chars = max(1, longest) * (4 if folds else 1)
        return self._max_chars

    def _render(
        self,
        dicts: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        source: str,
    ) -> str:
        """A template that refuses a system role (Gemma's) gets the system text at the top of
        the first user message instead."""
        listed = [dict(t) for t in tools] if tools else None
        context = {**_special_tokens(self.tok), "tools": listed, "documents": None}
        context["add_generation_prompt"] = add_generation_prompt
        try:
            return self._templates.render(source, {"messages": dicts, **context})
        except TemplateLimitError:
            raise
        except ModelError:
            folded = _fold_system_message(dicts)
            if folded is None:
                raise
            return self._templates.render(source, {"messages": folded, **context})


def _with_valid_text(message: Message) -> Message:
    """A copy with valid text; from anything with a role and a content (the context policy
    counts tokens of its own probe objects), keeping the tool fields where there are any."""
    return Message(
        message.role,
        valid_text(message.content),
        getattr(message, "tool_calls", ()),
        getattr(message, "tool_call_id", None),
        getattr(message, "tools", None),
    )


def _fold_system_message(dicts: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    if len(dicts) < 2 or dicts[0]["role"] != "system" or dicts[1]["role"] != "user":
        return None
    first = {"role": "user", "content": f"{dicts[0]['content']}\n\n{dicts[1]['content']}"}
    return [first, *dicts[2:]]


def valid_text(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes, broken pastes) as U+FFFD: tokenizers
    refuse them with a TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _template_source(value: Any) -> str | None:
    """The chat template text; tokenizers with several named ones use "default"."""
    if isinstance(value, dict):
        value = value.get("default") or next(iter(value.values()), None)
    return value if isinstance(value, str) and value else None


def _special_tokens(tok: Any) -> dict[str, Any]:
    """bos_token, eos_token, ... as plain text: what transformers passes to templates."""
    out: dict[str, Any] = {}
    for key, value in dict(getattr(tok, "special_tokens_map", {}) or {}).items():
        if isinstance(value, list):
            out[key] = [str(v) for v in value]
        elif value is not None:
            out[key] = str(value)
    return out


START, END = "\ufdd0", "\ufdd1"  # around a control-token string of a message (the module's)

# Where an image or a sound goes in a multimodal family's prompt. Gemma 3's GGUFs mark them
# user-defined, so they decode as text, but a converted model never sees media: none is
# sampled (a marker promises an image that never comes; Gemma 3 270M ranks <start_of_image>
# high after text), and one in text to decode is hidden, as transformers' tokenizers (which
# mark them special) hide it.
MEDIA_MARKERS = frozenset(
    {
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
        "<start_of_audio>",
        "<end_of_audio>",
        "<audio_soft_token>",
    }
)
_MARKED = re.compile(f"{START}([^{START}{END}]*){END}|[{START}{END}]")


class ControlTokens:
    """The control tokens of one tokenizer and the encodings that keep them out of text."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        added = getattr(tok, "added_tokens_decoder", {}) or {}
        # Special added tokens are the ones a tokenizer parses out of text; whitespace ones
        # (Gemma's "\n") are ordinary text in every template.
        strings = {
            str(t.content): int(i)
            for i, t in added.items()
            if getattr(t, "special", False) and str(t.content).strip()
        }
        self.ids = frozenset(strings.values())
        self.media_ids = frozenset(
            int(i) for i, t in added.items() if str(t.content) in MEDIA_MARKERS
        )
        ordered = sorted(strings, key=len, reverse=True)  # a token before the tokens inside it
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._plain: Any = None  # a backend tokenizer with special tokens switched off
        self._lock = threading.Lock()

    def found_in(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def mark(self, text: str) -> str:
        text = text.replace(START, "").replace(END, "")
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: f"{START}{m.group(0)}{END}", text)

    def encode_marked(self, rendered: str) -> list[int]:
        # re.split with one group: [text, token-or-None, text, token-or-None, ..., text]
        parts = _MARKED.split(rendered)
        ids = self._encode(parts[0], as_text=False, first=True)
        for i, part in enumerate(parts[1:], start=1):
            if part:
                ids += self._encode(part, as_text=i % 2 == 1, first=False)
        return ids

    def encode_as_text(self, text: str) -> list[int]:
        return self._encode(text, as_text=True, first=True) if text else []

    def _encode(self, text: str, as_text: bool, first: bool) -> list[int]:
        encode = self._encode_plain if as_text else self._encode_normal
        if first:
            ids = encode(text)
        else:
            # After a newline, so a SentencePiece tokenizer adds no word-start space to the
            # middle of a text; the newline's own ids are removed again.
            newline = encode("\n")
            ids = encode("\n" + text)
            ids = ids[len(newline) :] if ids[: len(newline)] == newline else encode(text)
        if as_text and self.ids.intersection(ids):
            # The vocabulary can build the control token from plain text: spell it out.
            ids = [i for ch in text for i in encode(ch)]
            if self.ids.intersection(ids):
                raise ModelError(f"The tokenizer cannot encode {text[:40]!r} as text.")
        return ids

    def _encode_normal(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def _encode_plain(self, text: str) -> list[int]:
        if isinstance(self.tok, FolderTokenizer):  # switches special tokens off itself
            return self.tok.encode(text, add_special_tokens=False, split_special_tokens=True)
        plain = self._plain_tokenizer()
        if plain is None:
            with self._lock:  # the slow path toggles the shared tokenizer's setting
                return list(
                    self.tok.encode(text, add_special_tokens=False, split_special_tokens=True)
                )
        return list(plain.encode(text, add_special_tokens=False).ids)

    def _plain_tokenizer(self) -> Any:
        """A copy of transformers' fast tokenizer with special tokens off, so no shared setting
        is flipped while another thread encodes (a FolderTokenizer needs no copy)."""
        if self._plain is None:
            backend = getattr(self.tok, "backend_tokenizer", None)
            if backend is None:
                return None
            from tokenizers import Tokenizer

            with self._lock:
                if self._plain is None:
                    plain = Tokenizer.from_str(backend.to_str())
                    plain.encode_special_tokens = True
                    self._plain = plain
        return self._plain
