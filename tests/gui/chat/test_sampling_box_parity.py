"""The window's Precise preset and `chatapp generate --greedy` are the same settings, so they
write the same tokens (issue 47: the command line used to drop the repetition penalty at
temperature 0 while the window kept 1.1). Compared at run time, on this machine's kernels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chatapp.cli.engine_cmds import sampling_from_args
from chatapp.cli.main import build_parser
from chatapp.engine.modes import Mode
from tests.gui.conftest import send_and_wait

PROMPT = "Tell me about the sea and the sea"
TOKENS = 12


def test_precise_in_the_window_and_greedy_on_the_command_line_write_the_same_tokens(
    qtbot, make_window, varied_model_dir: Path
) -> None:
    window = make_window(["--model", str(varied_model_dir), "--mode", Mode.IOBINDING])
    box = window.chat.side_panel.sampling_box
    box.preset_buttons["precise"].click()
    box.max_tokens_spin.setValue(TOKENS)
    window.chat.side_panel.system_prompt_box.set_text("")
    settings = window.chat.side_panel.sampling_settings()
    assert settings.greedy and settings.repetition_penalty > 1.0  # the penalty is part of it
    argv = ["generate", "--prompt", PROMPT, "--greedy", "--max-new-tokens", str(TOKENS)]
    assert sampling_from_args(build_parser().parse_args(argv)) == settings
    # A stronger penalty than the preset's, so that dropping it changes this tiny model's
    # tokens (checked below): the window's own value, the command line's --repetition-penalty.
    box.repetition_spin.setValue(2.0)
    send_and_wait(qtbot, window, PROMPT)
    answer = window.chat.conversation.messages[-1]
    assert answer.figures is not None

    def generate(*extra: str) -> dict[str, object]:
        args = ["--model", str(varied_model_dir), "--prompt", PROMPT, "--greedy", "--json"]
        args += ["--max-new-tokens", str(TOKENS), "--mode", Mode.IOBINDING, *extra]
        out = subprocess.run(
            [sys.executable, "-m", "chatapp", "generate", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    cli = generate("--repetition-penalty", "2")
    assert cli["text"] == answer.content
    # The penalty matters on this prompt (else the comparison could not fail): without it the
    # command line writes other tokens, as the old --greedy did.
    off = generate("--repetition-penalty", "1")
    assert off["token_ids"] != cli["token_ids"]
