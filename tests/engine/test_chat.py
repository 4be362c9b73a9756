"""Chat template and the incremental detokenizer."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.errors import ModelError
from chatapp.engine.text.chat import (
    NO_TEMPLATE_NOTICE,
    PROMPT_STYLES,
    STYLE_CONTINUE,
    STYLE_PLAIN_CHAT,
    STYLE_TEMPLATE,
    ChatTokenizer,
    Message,
    prompt_notice,
)
from chatapp.engine.text.stops import IncrementalDetokenizer

TEXTS = [
    "Hello there, the answer is in an hour.",
    "Grüße aus Köln — naïve café ☕ 🚀 日本語のテキスト",
    "  spaces\n\nand\ttabs  ",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> ChatTokenizer:
    return ChatTokenizer.from_folder(tiny_model_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_deltas_add_up_to_the_text_and_are_whole_characters(
    tokenizer: ChatTokenizer, text: str
) -> None:
    ids = tokenizer.encode(text)
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push(i) for i in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)


def test_multibyte_characters_wait_for_their_last_byte(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode("🚀")
    assert len(ids) == 4  # the tiny vocabulary has only byte tokens for it
    detok = IncrementalDetokenizer(tokenizer)
    assert [detok.push(i) for i in ids] == ["", "", "", "🚀"]


def test_chat_template_renders_roles_and_generation_prompt(tokenizer: ChatTokenizer) -> None:
    text = tokenizer.render([Message("system", "Be brief."), Message("user", "Hi")])
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tokenizer.chat_ids([Message("user", "Hi")])
    start = tokenizer.tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids.count(start) == 2


def test_folder_without_template_uses_a_plain_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    import json
    import shutil

    folder = tmp_path / "no-template"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tok = ChatTokenizer.from_folder(folder)
    assert not tok.has_template
    assert tok.render([Message("user", "Hi")]) == "User: Hi\nAssistant:"


def _with_template(tiny_model_dir: Path, folder: Path, template: str | None) -> Path:
    import json
    import shutil

    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    if template is not None:
        config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    return folder


def test_no_template_gives_a_notice(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = _with_template(tiny_model_dir, tmp_path / "base", None)
    tok = ChatTokenizer.from_folder(folder)
    assert tok.notice == NO_TEMPLATE_NOTICE == prompt_notice(folder)
    assert "no chat template" in tok.notice
    assert ChatTokenizer.from_folder(tiny_model_dir).notice is None
    assert prompt_notice(tiny_model_dir) is None


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # escape through Python attributes
        "{% include '/etc/passwd' %}",  # read a file
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    ],
    ids=["attributes", "include", "globals"],
)
def test_templates_run_sandboxed(tiny_model_dir: Path, tmp_path: Path, template: str) -> None:
    tok = ChatTokenizer.from_folder(_with_template(tiny_model_dir, tmp_path / "evil", template))
    with pytest.raises(ModelError, match="chat template failed"):
        tok.render([Message("user", "Hi")])


def test_system_role_refused_by_the_template_is_folded(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}"
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    )
    tok = ChatTokenizer.from_folder(_with_template(tiny_model_dir, tmp_path / "nosys", template))
    text = tok.render([Message("system", "Be brief."), Message("user", "Hi")])
    assert text == "[user] Be brief.\n\nHi\n"
    with pytest.raises(ModelError, match="no system"):  # nothing to fold: the error stays
        tok.render([Message("system", "Be brief.")])


def test_a_base_model_file_converts_to_a_folder_without_template(base_model_dir: Path) -> None:
    tok = ChatTokenizer.from_folder(base_model_dir)
    assert not tok.has_template
    assert prompt_notice(base_model_dir) == NO_TEMPLATE_NOTICE


def test_text_continuation_sends_the_text_as_written(base_model_dir: Path) -> None:
    tok = ChatTokenizer.from_folder(base_model_dir)
    messages = [
        Message("system", "Facts."),
        Message("user", "The capital of France is"),
        Message("assistant", " Paris."),
        Message("user", "The capital of Italy is"),
    ]
    text = tok.render(messages, style=STYLE_CONTINUE)
    assert text == "Facts.\nThe capital of France is Paris.\nThe capital of Italy is"
    assert tok.chat_ids(messages, style=STYLE_CONTINUE) == tok.with_bos(tok.encode(text))
    plain = tok.render(messages[1:2], style=STYLE_PLAIN_CHAT)
    assert plain == "User: The capital of France is\nAssistant:"
    # Without a template of its own: the plain lines again.
    assert tok.render(messages[1:2]) == "User: The capital of France is\nAssistant:"
    with pytest.raises(ValueError):
        tok.render(messages, style="poetry")


def test_a_style_is_an_argument_not_the_tokenizers_state(tokenizer: ChatTokenizer) -> None:
    hi = [Message("user", "Hi")]
    templated = tokenizer.render(hi)
    assert tokenizer.render(hi, style=STYLE_CONTINUE) == "Hi"
    assert not tokenizer.tools_in_template(STYLE_CONTINUE)
    # Rendering in another style changed nothing for the next render without one.
    assert tokenizer.render(hi) == templated == tokenizer.render(hi, style=STYLE_TEMPLATE)
    assert templated.startswith("<|im_start|>user\nHi")
    assert not hasattr(tokenizer, "use_style") and not hasattr(tokenizer, "prompt_style")


def test_four_threads_rendering_at_once_get_the_prompts_of_serial_rendering(
    tiny_model_dir: Path,
) -> None:
    """Server slots and the chat render on one tokenizer at once, each in its own style."""
    tok = ChatTokenizer.from_folder(
        tiny_model_dir
    )  # a fresh one: templates compile under the threads
    chats = [
        [Message("user", "Hi")],
        [Message("system", "Be brief."), Message("user", "The capital of France is")],
        [Message("user", "a"), Message("assistant", "b"), Message("user", "c <|im_end|>")],
    ]
    cases = [(i, style) for i in range(len(chats)) for style in PROMPT_STYLES]
    serial = {case: tok.chat_ids(chats[case[0]], style=case[1]) for case in cases}
    barrier = threading.Barrier(4)
    results: list[list[tuple[tuple[int, str], list[int]]]] = [[] for _ in range(4)]

    def render(slot: int) -> None:
        barrier.wait()
        for turn in range(40):
            case = cases[(slot + turn) % len(cases)]  # each thread in another order
            results[slot].append((case, tok.chat_ids(chats[case[0]], style=case[1])))

    threads = [threading.Thread(target=render, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(len(r) == 40 for r in results)
    assert all(ids == serial[case] for r in results for case, ids in r)


def test_continue_last_ends_the_prompt_with_the_cut_answer(tokenizer: ChatTokenizer) -> None:
    messages = [Message("user", "Hi"), Message("assistant", "Hello the")]
    prompt = tokenizer.render(messages[:1]) + "Hello the"
    ids = tokenizer.chat_ids(messages, continue_last=True)
    assert ids == tokenizer.with_bos(tokenizer.encode(prompt))
    # A control token typed into the cut answer stays text there too.
    typed = [Message("user", "Hi"), Message("assistant", "a <|im_end|>")]
    end = tokenizer.tok.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer.chat_ids(typed, continue_last=True)
    assert ids.count(end) == 1  # the template's own, after the question


# ---- a template limit: the conversation's fault or the template's (issue 37) ----------------
SLOW_LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.fixture
def short_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatapp.engine.text import template

    monkeypatch.setattr(template, "LIMITS", template.Limits(seconds=0.3))


def _huge_chat(count: int = 400_000) -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", "hi") for i in range(count)]


def test_a_huge_conversation_is_refused_alone(
    tiny_model_dir: Path, short_limit: None, caplog: pytest.LogCaptureFixture
) -> None:
    from chatapp.engine.text.template import TemplateLimitError

    tok = ChatTokenizer.from_folder(tiny_model_dir)
    for _ in range(2):  # again: still only that conversation
        with pytest.raises(TemplateLimitError):
            tok.render(_huge_chat())
        assert "Say hi" in tok.render([Message("user", "Say hi")])
    assert "only it was refused" in caplog.text and "400000 messages" in caplog.text
    assert "from now on" not in caplog.text


@pytest.mark.parametrize(
    "template",
    [
        SLOW_LOOP,
        "{{ 'x' * 5000000 }}{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ SLOW }}".replace(
            "{{ SLOW }}", SLOW_LOOP
        ),
    ],
    ids=["slow", "big", "slow-after-messages"],
)
def test_a_template_that_fails_an_ordinary_chat_is_switched_off(
    tiny_model_dir: Path,
    tmp_path: Path,
    short_limit: None,
    caplog: pytest.LogCaptureFixture,
    template: str,
) -> None:
    from chatapp.engine.text.template import TemplateLimitError

    tok = ChatTokenizer.from_folder(_with_template(tiny_model_dir, tmp_path / "slow", template))
    with pytest.raises(TemplateLimitError) as first:
        tok.render([Message("user", "Hi")])
    with pytest.raises(TemplateLimitError) as again:
        tok.render([Message("user", "Say hi")])
    assert again.value is first.value  # failed fast: the template did not run again
    assert "hit a limit on an ordinary chat too" in caplog.text


def test_an_ordinary_template_is_probed_once(
    tiny_model_dir: Path, short_limit: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.engine.text.template import TemplateLimitError

    tok = ChatTokenizer.from_folder(tiny_model_dir)
    probes = []
    probe = tok._templates._renders_ordinary_chat

    def counted(*args: Any) -> bool:
        probes.append(1)
        return probe(*args)

    monkeypatch.setattr(tok._templates, "_renders_ordinary_chat", counted)
    for _ in range(3):
        with pytest.raises(TemplateLimitError):
            tok.render(_huge_chat())
    assert probes == [1]


def test_the_tokenizer_measures_what_it_keeps_after_handing_the_parse_back(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.engine.text import chat

    events: list[str] = []
    readings = iter([100 << 20, 130 << 20])

    def reading() -> dict[str, int]:
        events.append("measured")
        return {"anon": next(readings)}

    monkeypatch.setattr(chat, "resident_memory", reading)
    monkeypatch.setattr(chat, "return_freed_heap", lambda: events.append("trimmed"))
    tokenizer = ChatTokenizer.from_folder(tiny_model_dir)
    assert events == ["measured", "trimmed", "measured"]  # kept: after the freed heap is back
    assert tokenizer.resident_bytes == 30 << 20


def test_a_long_prompt_is_encoded_once_for_its_count_and_its_answer(tiny_model_dir: Path) -> None:
    tokenizer = ChatTokenizer.from_folder(tiny_model_dir)
    encoded: list[int] = []
    encode = tokenizer.tok.encode

    def counting(text: str, *args: object, **kwargs: object) -> list[int]:
        encoded.append(len(text))
        return list(encode(text, *args, **kwargs))

    tokenizer.tok.encode = counting
    paste = [Message("user", "A pasted line of text, again and again.\n" * 2000)]
    count = len(tokenizer.chat_ids(paste, limit=10**6))  # fitting the chat to the context
    ids = tokenizer.chat_ids(paste, limit=10**6)  # the answer with the same messages
    assert len(ids) == count and len(encoded) == 1
    assert ids == tokenizer.with_bos(encode(tokenizer.render(paste), add_special_tokens=False))
    longer = [*paste, Message("assistant", "Yes."), Message("user", "And?")]
    tokenizer.chat_ids(longer)  # another prompt: encoded
    assert len(encoded) == 2
    special = next(str(t) for t in tokenizer.tok.added_tokens_decoder.values() if t.special)
    marked = [Message("user", paste[0].content + special)]  # control tokens typed: as text
    first = tokenizer.chat_ids(marked)
    calls = len(encoded)
    assert tokenizer.chat_ids(marked) == first and len(encoded) == calls
    short = [Message("user", "Hi")]
    tokenizer.chat_ids(short)
    tokenizer.chat_ids(short)
    assert len(encoded) == calls + 2  # short prompts are not kept


def test_a_templates_own_system_prompt_is_found(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SmolLM2's template writes a system prompt when the chat has none: every prompt holds
    it, so the window shows it (what the chat's own system message takes the place of)."""
    own = (
        "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a tiny helper."
        "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tok = ChatTokenizer.from_folder(_with_template(tiny_model_dir, tmp_path / "own", own))
    assert tok.default_system_prompt() == "You are a tiny helper."
    prompt = tok.render([Message("user", "Hi")])
    assert tok.default_system_prompt() in prompt
    # A template that adds none, and plain lines, have none.
    assert ChatTokenizer.from_folder(tiny_model_dir).default_system_prompt() == ""
    assert "tiny helper" not in tok.render([Message("user", "Hi")], style=STYLE_PLAIN_CHAT)
