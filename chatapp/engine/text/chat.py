"""A model's tokenizer as the chat uses it, in one room: the folder's tokenizer loaded
(`load_tokenizer`: `FolderTokenizer`, or transformers where that alone gives the same ids), its
chat template, and the control tokens kept out of the messages' text (`ChatTokenizer`).

Control tokens. A tokenizer turns the string `<|im_end|>` into the control token wherever it
appears, so text holding it could end a turn and start a forged one. The template is rendered
with each control-token string in the messages wrapped in two Unicode noncharacters (U+FDD0 and
U+FDD1, reserved for such internal use and stripped from the messages first), and the rendered
text is cut at the markers: the pieces between them are encoded normally (the template's own
control tokens stay tokens), each wrapped string with special tokens off (the ordinary tokens of
its characters). A marker that a template string method tore from its partner is dropped but
still cuts the text, so the two sides can never join into a control token.

The folder's tokenizer (the end of this module). A model folder's `tokenizer.json` is loaded
with `tokenizers` alone, without transformers: transformers' `AutoTokenizer` wraps the same
`tokenizers.Tokenizer`, and for a folder whose tokenizer_config.json has no
`added_tokens_decoder` (every folder the converter writes) it also parses the whole
tokenizer.json in Python to read its added tokens. On Gemma 3's 262k-token tokenizer.json
(33 MB) that took the load's peak from 424 to 627 MiB for nothing kept; the tokenizer itself
keeps about 95 MiB (docs/engine.md, "The tokenizer's memory").
Only folders whose tokenizer transformers would load as the generic fast tokenizer are taken
(tokenizer_class `PreTrainedTokenizerFast` or `TokenizersBackend`: what the converter, Optimum
and onnxruntime-genai's builder write), or as `Qwen2Tokenizer` (Qwen 2/2.5/3's own folders:
152k tokens), whose pipeline around tokenizer.json's vocabulary and merges is rebuilt here as
transformers 5 rebuilds it, and only when every special token the config names is already an
added token of tokenizer.json, so that nothing transformers would add or rebuild is missing;
`FolderTokenizer.load` returns None for any other folder, and `load_tokenizer` (the one way a
folder's tokenizer is loaded) uses transformers. The ids are the same as transformers'
(tests/engine/test_folder_tokenizer.py compares them on every fixture folder and converted
family). The object answers the part of transformers' tokenizer API that chatapp uses
(`encode`, `decode`, `special_tokens_map`, `added_tokens_decoder`, ...), so ControlTokens,
TokenText and the constraint compiler take either.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from chatapp.engine.errors import ContextOverflowError, ModelError
from chatapp.engine.mapped_weights import resident_memory, return_freed_heap
from chatapp.engine.model_folder.model import TokenizerFiles
from chatapp.engine.model_folder.read import optional_inside, read_json_file, read_tokenizer_files
from chatapp.engine.text.template import TemplateLimitError, Templates
from chatapp.engine.text.tokenizer_pieces import LONG_TEXT, QWEN2_SPLIT, TextPieces
from chatapp.error_text import first_line

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
        context = {**_template_specials(self.tok), "tools": listed, "documents": None}
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


def _template_specials(tok: Any) -> dict[str, Any]:
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


# ---- the folder's tokenizer: `tokenizers` alone where that gives transformers' ids ----------

GENERIC_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
# Classes whose transformers __init__ builds its own pipeline around tokenizer.json's BPE.
QWEN2_CLASSES = frozenset({"Qwen2Tokenizer", "Qwen2TokenizerFast"})
# transformers 5's Qwen2Tokenizer: the special tokens it defaults to (its split: QWEN2_SPLIT).
_QWEN2_DEFAULTS = {
    "unk_token": "<|endoftext|>",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
}
# Set beside HF_HUB_OFFLINE when chatapp set it, not the user.
HUB_OFFLINE_SET_BY_CHATAPP = "CHATAPP_HF_HUB_OFFLINE_SET"
# transformers' named special tokens; a config's other `*_token` keys are special tokens too.
NAMED_SPECIAL = frozenset(
    {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}
)


def load_tokenizer(files: TokenizerFiles) -> Any:
    """The folder's tokenizer from its files as read and checked once: `tokenizers` alone
    where that gives transformers' ids (`FolderTokenizer.load`), else transformers' (local
    files only, no remote code); ModelError says why it cannot be loaded."""
    # Never reach a model hub: the folder is all there is. Marked as chatapp's, so that
    # the hub's requests the user asks for (chatapp/hub) tell it from the user's own.
    if "HF_HUB_OFFLINE" not in os.environ:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ[HUB_OFFLINE_SET_BY_CHATAPP] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        found = FolderTokenizer.load(files)
        if found is not None:
            return found
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            str(files.folder), local_files_only=True, trust_remote_code=False
        )
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(
            f"The tokenizer in {files.folder.name} could not be loaded ({first_line(exc)})."
        ) from exc


class _SharedLock:
    """Many encodes at once, or one that switches special tokens off (a setting of the shared
    tokenizer) alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def _content(value: Any) -> str | None:
    """A special token's text: a string, or a serialized AddedToken ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _configured_specials(
    config: Mapping[str, Any], stored: Mapping[str, Any], defaults: Mapping[str, str]
) -> dict[str, str] | None:
    """bos_token, eos_token, ... as transformers 5 reads them (special_tokens_map.json counts
    only when the config has no added_tokens_decoder); None for a value it would not take.
    `defaults` are the class's own, for the keys the config does not name (null included)."""
    # A config's own `*_token` keys count when their value is text (a serialized token there
    # stays a plain setting); special_tokens_map.json is read after that, for the named ones.
    values: dict[str, Any] = {k: v for k, v in defaults.items() if k not in config}
    values.update(
        (key, value)
        for key, value in config.items()
        if value is not None
        and (key in NAMED_SPECIAL or (key.endswith("_token") and isinstance(value, str)))
    )
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):  # named extra tokens are special tokens by those names
        values.update(extra)
    for key, value in stored.items():
        if key in NAMED_SPECIAL and value is not None:
            values[key] = value
    out: dict[str, str] = {}
    for key, value in values.items():
        text = _content(value)
        if text is None:
            return None
        out[key] = text
    return out


def _extra_special(config: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str] | None:
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if stored:
        extra = [*extra, *(stored.get("additional_special_tokens") or [])]
    if isinstance(extra, dict):
        extra = list(extra.values())
    texts = [_content(v) for v in extra] if isinstance(extra, list) else [None]
    return None if any(t is None for t in texts) else [t for t in texts if t is not None]


def _chat_template(files: TokenizerFiles, config: Mapping[str, Any]) -> str | dict[str, str] | None:
    """chat_template.jinja beside the config first, as transformers reads it."""
    if files.chat_template is not None:
        return files.chat_template
    value = config.get("chat_template")
    if isinstance(value, list):  # [{"name": ..., "template": ...}, ...]
        return {
            str(t["name"]): str(t["template"])
            for t in value
            if isinstance(t, dict) and "name" in t and "template" in t
        }
    return value if isinstance(value, str) else None


def _qwen2_pipeline(backend: Tokenizer, config: Mapping[str, Any]) -> bool:
    """Give `backend` the normalizer, pre-tokenizer and decoder transformers 5's Qwen2Tokenizer
    builds around tokenizer.json's vocabulary and merges; False (nothing changed) when
    tokenizer.json's BPE settings differ from the ones it builds (its ids would differ)."""
    model = backend.model
    if not isinstance(model, BPE):
        return False
    settings = (
        model.dropout,
        model.unk_token,
        model.continuing_subword_prefix or "",
        model.end_of_word_suffix or "",
        model.fuse_unk,
        model.byte_fallback,
        model.ignore_merges,
    )
    if settings != (None, None, "", "", False, False, False):
        return False
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(
                add_prefix_space=bool(config.get("add_prefix_space")), use_regex=False
            ),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return True


class FolderTokenizer:
    """tokenizer.json with the settings transformers would read beside it."""

    def __init__(
        self,
        backend: Tokenizer,
        special: Mapping[str, str],
        chat_template: str | dict[str, str] | None,
        clean_up_spaces: bool,
    ) -> None:
        backend.no_truncation()  # transformers' encode() without truncation= or padding=
        backend.no_padding()
        backend.encode_special_tokens = False
        self.backend_tokenizer = backend
        self.special_tokens_map = dict(special)
        self.chat_template = chat_template
        self.added_tokens_decoder: dict[int, AddedToken] = backend.get_added_tokens_decoder()
        self.all_special_ids = sorted(
            {i for i, t in self.added_tokens_decoder.items() if t.special}
            | {i for t in special.values() if (i := backend.token_to_id(t)) is not None}
        )
        self.bos_token_id = self._id("bos_token")
        self.eos_token_id = self._id("eos_token")
        # transformers skips its clean-up for BPE models (it strips spaces before punctuation).
        self._clean_up = clean_up_spaces and type(backend.model).__name__ != "BPE"
        self._lock = _SharedLock()
        self._pieces = TextPieces.for_tokenizer(backend, self.added_tokens_decoder.values())

    @staticmethod
    def load(files: TokenizerFiles) -> FolderTokenizer | None:
        """The folder's tokenizer from its files as read and checked once, or None when
        transformers must load it (see the module)."""
        path, config = files.tokenizer_json, files.config
        if path is None or config is None:
            return None
        qwen2 = config.get("tokenizer_class") in QWEN2_CLASSES
        if not qwen2 and config.get("tokenizer_class") not in GENERIC_CLASSES:
            return None
        if files.other_sources:
            return None
        stored = files.special_tokens_map or {}
        special = _configured_specials(config, stored, _QWEN2_DEFAULTS if qwen2 else {})
        extra = _extra_special(config, stored)
        if special is None or extra is None:
            return None
        backend = Tokenizer.from_file(str(path))
        if qwen2 and not _qwen2_pipeline(backend, config):
            return None
        added = {
            str(t.content): (i, t.special) for i, t in backend.get_added_tokens_decoder().items()
        }
        if any(text not in added for text in [*special.values(), *extra]):
            return None  # transformers would add it as a new token
        for index, token in (config.get("added_tokens_decoder") or {}).items():
            if not isinstance(token, dict) or added.get(str(token.get("content"))) != (
                int(index),
                bool(token.get("special", False)),
            ):
                return None
        clean = bool(config.get("clean_up_tokenization_spaces", False))
        return FolderTokenizer(backend, special, _chat_template(files, config), clean)

    def _id(self, key: str) -> int | None:
        text = self.special_tokens_map.get(key)
        return None if text is None else self.backend_tokenizer.token_to_id(text)

    def encode(
        self, text: str, add_special_tokens: bool = True, split_special_tokens: bool = False
    ) -> list[int]:
        """Ids of `text`; with `split_special_tokens` a control token's string is plain text.
        That switches a setting of the one shared tokenizer, so it waits for other encodes
        and they for it (no second copy of the tokenizer, which cost as much as the first)."""
        backend = self.backend_tokenizer
        if not split_special_tokens:
            with self._lock.shared():
                return self._ids(text, add_special_tokens)
        with self._lock.exclusive():
            backend.encode_special_tokens = True
            try:
                return self._ids(text, add_special_tokens)
            finally:
                backend.encode_special_tokens = False

    def _ids(self, text: str, add_special_tokens: bool) -> list[int]:
        """A text up to LONG_TEXT characters: encode, on this thread, as always. A longer one
        (a paste) in pieces where the pipeline allows (engine/text/tokenizer_pieces.py), with
        encode_batch_fast: encode's ids without the character offsets nothing here reads (a
        table of every character: a fifth of a 1 MB paste's instructions), on tokenizers'
        worker threads, each with a heap of its own (docs/engine.md, "A long paste").
        Special tokens a post-processor adds around a text ask for it whole."""
        backend = self.backend_tokenizer
        if len(text) <= LONG_TEXT:
            return list(backend.encode(text, add_special_tokens=add_special_tokens).ids)
        pieces = [text]
        if self._pieces is not None and not add_special_tokens:
            pieces = self._pieces.cut(text)
        # tokenizers before 0.20 has no encode_batch_fast: the same ids with the offsets.
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        encodings = encode(pieces, add_special_tokens=add_special_tokens)
        return [i for encoding in encodings for i in encoding.ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        text = str(
            self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        )
        return _clean_up_tokenization(text) if self._clean_up else text

    def convert_ids_to_tokens(self, token_id: int) -> str | None:
        return self.backend_tokenizer.id_to_token(int(token_id))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int | None] | None:
        """Ids of vocabulary entries; one that is not there: the unknown token's (or None)."""
        if isinstance(tokens, str):
            return self._token_id(tokens)
        return [self._token_id(t) for t in tokens]

    def _token_id(self, token: str) -> int | None:
        found = self.backend_tokenizer.token_to_id(token)
        return self._id("unk_token") if found is None else found

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend_tokenizer.get_vocab(with_added_tokens=True))

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))


def _clean_up_tokenization(text: str) -> str:
    """transformers' `clean_up_tokenization` (WordPiece-era spacing before punctuation)."""
    for before, after in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(before, after)
    return text
