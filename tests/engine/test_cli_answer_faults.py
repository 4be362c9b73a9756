"""`chatapp generate` and a fault at each stage of an answer: one line on stderr, never a
traceback; an overflowing perplexity is printed as unknown and the answer succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.cli.main import main
from chatapp.session.formatting import MISSING
from tests.answer_faults import FAILING_STAGES, inject, message_of


def generate(model_dir: Path, *extra: str) -> int:
    return main(
        ["generate", "--model", str(model_dir), "--prompt", "hi", "--temperature", "0",
         "--max-new-tokens", "8", *extra]
    )  # fmt: skip


@pytest.mark.parametrize("stage", FAILING_STAGES)
def test_a_fault_at_any_stage_is_one_line(
    tiny_model_dir: Path, stage: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("CHATAPP_DEBUG", raising=False)
    inject(monkeypatch, stage)
    assert generate(tiny_model_dir) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chatapp: error:")
    assert message_of(stage) in err and "Traceback" not in err


@pytest.mark.parametrize("json_output", [False, True])
def test_an_overflowing_perplexity_is_unknown(
    tiny_model_dir: Path, json_output: bool, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    inject(monkeypatch, "figures overflow")
    assert generate(tiny_model_dir, *(["--json"] if json_output else [])) == 0
    out, err = capsys.readouterr()
    if json_output:
        assert '"perplexity": null' in out
    else:
        assert f"perplexity {MISSING}," in err


HOSTILE_JSON = {
    "a number of 5000 digits": ('{"type": "string", "minLength": ' + "9" * 5000 + "}", "digits"),
    "nested 100k deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "not JSON": ("{'type': 'object'}", "not valid JSON"),
}


@pytest.mark.parametrize("flag", ["--json-schema", "--tools"])
@pytest.mark.parametrize("text,said", HOSTILE_JSON.values(), ids=HOSTILE_JSON.keys())
def test_a_users_json_file_that_cannot_be_read_is_one_line_not_a_bug(
    tiny_model_dir: Path, tmp_path: Path, capsys, flag: str, text: str, said: str
) -> None:
    path = tmp_path / "given.json"
    path.write_text(text, encoding="utf-8")
    assert generate(tiny_model_dir, flag, str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err
    assert "a bug" not in err and "sys.set_int_max_str_digits" not in err
