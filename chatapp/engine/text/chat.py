"""Chat template, tokenizer and an incremental detokenizer."""

from __future__ import annotations

import contextlib
import json
import logging
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
from chatapp.engine.text.control_tokens import ControlTokens
from chatapp.engine.text.folder_tokenizer import load_tokenizer
from chatapp.engine.text.template import ChatTemplate, TemplateLimitError
from chatapp.engine.text.tokenizer_pieces import LONG_TEXT
from chatapp.error_text import first_line

log = logging.getLogger(__name__)
# Used when a model folder has no chat template of its own (base models).
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
# What an ordinary chat looks like: a template that hits a limit on this is slow for everyone.
ORDINARY_CHAT = ({"role": "user", "content": "Say hi"},)
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

    Message text is tokenized as text: a control token typed, pasted, imported or put in the
    system prompt (`<|im_end|><|im_start|>system...`) becomes the ordinary tokens of its
    characters, so it cannot forge a turn; only the template's own scaffolding produces
    control tokens. Text without any control token string is tokenized exactly as before
    (render, then one encode), so ordinary prompts and the KV prefix reuse are unchanged.
    """

    def __init__(self, files: TokenizerFiles) -> None:
        """From the folder's tokenizer files as read and checked once (a model's description
        holds them: model_description.ModelDescription.tokenizer)."""
        anon_before = resident_memory().get("anon", 0)
        self.tok: Any = load_tokenizer(files)
        source = _template_source(getattr(self.tok, "chat_template", None))
        self.has_template = bool(source)
        self._own_source = source or FALLBACK_TEMPLATE
        # Compiled once per template text; several threads (server slots, the chat) render
        # at once, so what is kept here only grows and never says which style is in use.
        self._templates: dict[str, ChatTemplate] = {}
        self._template_errors: dict[str, ModelError] = {}
        self._ordinary_renders: set[str] = set()  # a small ordinary chat rendered within limits
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
        try:
            return self._render_as_is(dicts, add_generation_prompt, tools, source)
        except TemplateLimitError:
            raise
        except ModelError:
            folded = _fold_system_message(dicts)
            if folded is None:
                raise
            return self._render_as_is(folded, add_generation_prompt, tools, source)

    def _render_as_is(
        self,
        dicts: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        source: str,
    ) -> str:
        failed = self._template_errors.get(source)
        if failed is not None:  # a template that hit a limit fails fast after
            raise failed
        template: ChatTemplate | None = None
        try:
            template = self._compiled(source)
            listed = [dict(t) for t in tools] if tools else None
            context = {**_special_tokens(self.tok), "tools": listed, "documents": None}
            return template.render(
                messages=dicts, add_generation_prompt=add_generation_prompt, **context
            )
        except TemplateLimitError as exc:
            if template is not None:
                self._after_limit(exc, dicts, source, template)
            raise
        except ModelError:
            raise
        except Exception as exc:  # a template may reject e.g. a system role
            raise ModelError(f"The model's chat template failed: {first_line(exc)}") from exc

    def _compiled(self, source: str) -> ChatTemplate:
        template = self._templates.get(source)
        if template is None:  # two threads may both compile it: either copy serves
            template = self._templates.setdefault(source, ChatTemplate(source))
        return template

    def _after_limit(
        self,
        exc: TemplateLimitError,
        dicts: list[dict[str, Any]],
        source: str,
        template: ChatTemplate,
    ) -> None:
        """Whose fault the limit was: the request's content (it alone is refused) or the
        template's (an ordinary chat hits the limit too: it fails fast from now on). A huge
        conversation must not switch the template off for every later one."""
        chars = sum(len(str(d.get("content") or "")) for d in dicts)
        if source not in self._ordinary_renders and not self._renders_ordinary_chat(
            source, template
        ):
            self._template_errors[source] = exc
            log.warning(
                "the chat template hit a limit on an ordinary chat too; it is refused from now "
                "on (%s)",
                exc,
            )
        else:
            log.warning(
                "one conversation (%d messages, %d characters) made the chat template hit a "
                "limit; only it was refused (%s)",
                len(dicts),
                chars,
                exc,
            )

    def _renders_ordinary_chat(self, source: str, template: ChatTemplate) -> bool:
        """A small ordinary chat renders within the limits (asked once, then remembered)."""
        context = {**_special_tokens(self.tok), "tools": None, "documents": None}
        try:
            template.render(
                messages=[dict(m) for m in ORDINARY_CHAT], add_generation_prompt=True, **context
            )
        except TemplateLimitError:
            return False
        except Exception:  # e.g. it refuses something else: not a question of limits
            pass
        self._ordinary_renders.add(source)
        return True


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


class IncrementalDetokenizer:
    """Turns a token stream into text deltas, never emitting half a UTF-8 character.

    Decodes a short window (from a few tokens back) so that tokenizers which merge spaces or
    bytes across token boundaries still produce the right text.
    """

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens whose text has been emitted

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        after = self.tokenizer.decode(self.ids[self._prefix :])
        if after.endswith("\ufffd") or len(after) <= len(before):
            return ""  # an incomplete character (or nothing visible yet): wait for more
        self._prefix, self._read = self._read, len(self.ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is left at the end (e.g. a dangling incomplete byte sequence)."""
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        after = self.tokenizer.decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :] if after.startswith(before) else ""

    @property
    def text(self) -> str:
        return self.tokenizer.decode(self.ids)
