"""The bounded chat-template renderer: same text as transformers for real templates, and every
hostile template stopped with one line, quickly, in little memory."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from chatapp.engine.errors import ModelError
from chatapp.engine.text import template
from chatapp.engine.text.chat import FALLBACK_TEMPLATE, ChatTokenizer, Message
from chatapp.engine.text.template import LIMITS, ChatTemplate, Limits, TemplateLimitError
from tests.tiny_model import CHATML_TEMPLATE

ROOT = Path(__file__).resolve().parents[2]

# Shapes of templates found in real model folders (written here, not copied).
LLAMA3_LIKE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system = m['content'] %}"
    "{% endif %}{% endfor %}"
    "{% if ns.system %}<|start_header_id|>system<|end_header_id|>\n\n{{ ns.system | trim }}"
    "<|eot_id|>{% endif %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% endif %}"
)
ALTERNATING = (
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)
TOOLS_AND_JSON = (
    "{%- if tools %}{{ tools | tojson(indent=2) }}{% endif -%}"
    "{%- for m in messages %}{{ m | tojson }}\n"
    "{%- if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
    "{%- endif %}{% endfor %}"
    "{%- if add_generation_prompt %}{{ '<|assistant|>' | upper | center(20) }}{% endif %}"
)
TEMPLATES = {
    "chatml": CHATML_TEMPLATE,
    "fallback": FALLBACK_TEMPLATE,
    "llama3-like": LLAMA3_LIKE,
    "tools-json": TOOLS_AND_JSON,
}
CHATS = [
    [Message("user", "Hi")],
    [Message("system", " Be brief. "), Message("user", "Hi"), Message("assistant", "Hello!")],
    [Message("user", 'Grüße 🚀 "quotes" {{ not code }} {% neither %}'), Message("user", "x")],
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> ChatTokenizer:
    return ChatTokenizer.from_folder(tiny_model_dir)


@pytest.fixture(scope="module")
def hf(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)


@pytest.mark.parametrize("name", list(TEMPLATES))
@pytest.mark.parametrize("chat", range(len(CHATS)))
def test_renders_like_transformers(
    tokenizer: ChatTokenizer, hf: PreTrainedTokenizerBase, name: str, chat: int
) -> None:
    messages = [m.as_dict() for m in CHATS[chat]]
    expected = hf.apply_chat_template(
        messages, chat_template=TEMPLATES[name], tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.tok.special_tokens_map == hf.special_tokens_map
    context = {k: v for k, v in tokenizer.tok.special_tokens_map.items()}
    ours = ChatTemplate(TEMPLATES[name]).render(
        messages=messages, add_generation_prompt=True, tools=None, documents=None, **context
    )
    assert ours == expected


def test_raise_exception_is_a_model_error(tokenizer: ChatTokenizer) -> None:
    template = ChatTemplate(ALTERNATING)
    with pytest.raises(Exception, match="must alternate"):
        template.render(messages=[{"role": "assistant", "content": "x"}], eos_token="</s>")


def test_long_legitimate_chats_are_not_limited() -> None:
    big = "word " * 800_000  # 4 MB in one message: above the fixed caps, which grow with it
    messages = [{"role": "user", "content": big}, {"role": "assistant", "content": big}]
    text = ChatTemplate(CHATML_TEMPLATE).render(messages=messages, add_generation_prompt=True)
    assert len(text) > 2 * len(big)


# Each must end in a ModelError (most in a TemplateLimitError) within the time limit.
HOSTILE = {
    "repeat-300MB": "{{ 'x' * 300000000 }}",
    "repeat-list": "{{ ([1] * 100000000) | length }}",
    "nested-loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
    "{% endfor %}",
    "loops-over-lists": "{% set l = [0] * 1000000 %}{% for a in l %}{% for b in l %}"
    "{% endfor %}{% endfor %}",
    "loops-over-a-3MB-list": "{% set l = [0] * 400000 %}{% for a in l %}{% for b in l %}"
    "{% endfor %}{% endfor %}",
    "output-flood": "{% for i in range(100000) %}{{ 'y' * 10000 }}{% endfor %}",
    "namespace-doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "many-big-values": "{% set ns = namespace() %}"
    + "".join(f"{{% set ns.a{i} = 'x' * 4000000 %}}" for i in range(40)),
    "percent-width": "{{ '%0999999999d' % 1 }}",
    "percent-star": "{{ '%*d' % (999999999, 1) }}",
    "format-width": "{{ '{:>999999999}'.format(1) }}",
    "format-nested-width": "{{ '{:>{}}'.format(1, 999999999) }}",
    "center": "{{ 'x'.center(999999999) }}",
    "center-filter": "{{ 'x' | center(999999999) }}",
    "replace-blowup": "{{ ('a' * 3000000).replace('a', 'b' * 3000000) }}",
    "replace-filter": "{{ ('a' * 3000000) | replace('a', 'b' * 3000000) }}",
    "join-blowup": "{{ (['x' * 3000000] * 3000000) | join }}",
    "join-method": "{{ ''.join(['x' * 3000000] * 3000000) }}",
    "indent-blowup": "{{ ('\\n' * 3000000) | indent('x' * 3000000) }}",
    "tojson-indent": "{{ messages | tojson(indent=100000000) }}",
    "power": "{{ 10 ** 10 ** 10 }}",
    "lipsum": "{{ lipsum(1000000) }}",
    "infinite-recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "exponential-macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
    "{% endmacro %}{{ f(60) }}",
    "recursive-loop": "{% for m in [[1]] * 100000 recursive %}{{ loop([[1]] * 100000) }}"
    "{% endfor %}",
    "include-file": "{% include '/etc/passwd' %}",
    "import-file": "{% import 'x.j2' as x %}",
    "dunder-escape": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals-escape": "{{ raise_exception.__globals__ }}",
    "mutate-messages": "{{ messages.append({'role': 'system', 'content': 'x'}) }}",
    "namespace-underscore": "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "syntax-error": "{% for %}",
    "unclosed": "{% if x %}",
}


QUICK = Limits(seconds=0.3)  # the default is 2 s; the tests need not wait that long


def rendered(source: str, limits: Limits = QUICK) -> str:
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    return ChatTemplate(source, limits).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True, **tokens
    )


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_template_is_stopped(case: str) -> None:
    started = time.monotonic()
    try:
        text = rendered(HOSTILE[case])
    except ModelError as exc:
        assert "\n" not in str(exc)
    except MemoryError:
        pytest.fail(f"{case} exhausted memory")
    except Exception:  # a sandbox refusal or a Jinja error: ChatTokenizer words it as one line
        pass
    else:
        assert len(text) < 1 << 20, case  # an escape attempt that rendered to nothing harmful
        assert "subclasses" not in text and "__builtins__" not in text
    assert time.monotonic() - started < 5


def test_time_limit_message() -> None:
    with pytest.raises(TemplateLimitError, match=r"ran for more than 0.3 s"):
        rendered(HOSTILE["nested-loops"])
    assert LIMITS.seconds == 2.0


def test_a_template_too_long_to_be_a_template() -> None:
    with pytest.raises(ModelError, match="characters long"):
        ChatTemplate("x" * (2 << 20))


def test_chat_tokenizer_reports_and_then_fails_fast(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    monkeypatch.setattr(template, "LIMITS", QUICK)
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = HOSTILE["nested-loops"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = ChatTokenizer.from_folder(folder)
    with pytest.raises(TemplateLimitError):
        tok.chat_ids([Message("user", "hi")])
    renders: list[int] = []
    real_render = ChatTemplate.render

    def counted(self: ChatTemplate, **kwargs: Any) -> str:
        renders.append(1)
        return real_render(self, **kwargs)

    monkeypatch.setattr(ChatTemplate, "render", counted)
    with pytest.raises(TemplateLimitError):
        tok.chat_ids([Message("user", "hi again")])
    assert renders == []  # the second time it does not run the template (no clock involved)


def test_hostile_templates_stay_small_in_memory() -> None:
    """All hostile templates in one fresh process: peak RSS stays far below 1 GB."""
    code = (
        "from scripts.hostile_gguf import peak_mb\n"
        "from tests.engine.test_template import HOSTILE, rendered\n"
        "for case, source in HOSTILE.items():\n"
        "    try:\n"
        "        rendered(source)\n"
        "    except BaseException:\n"
        "        pass\n"
        "print(int(peak_mb()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr
    peak_mb = int(result.stdout.split()[-1])
    assert peak_mb < 300, peak_mb
