"""The token figure on each message's header does not change as the chat grows (issue 16:
the first question's "turn: N tokens" read 37, then 60, then 35)."""

from __future__ import annotations

import re
from pathlib import Path

from chatapp.gui.chat.controller import State
from tests.gui.conftest import greedy, send_and_wait, set_sampling


def header_figures(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^(?:You|Assistant)   (?:‹.*› +)?(\d+) tokens", text, re.M)]


def test_each_message_keeps_its_token_figure_as_the_chat_grows(
    qtbot, make_window, tiny_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    set_sampling(window, greedy(6))
    seen: list[list[int]] = []
    for question in ("What is the capital of France?", "And of Italy?", "Thanks!"):
        send_and_wait(qtbot, window, question)
        qtbot.waitUntil(
            lambda: (
                len(header_figures(window.chat.chat_view.transcript.toPlainText()))
                == len(window.chat.conversation.messages)
            ),
            timeout=10_000,
        )
        window.chat.chat_view.flush()
        seen.append(header_figures(window.chat.chat_view.transcript.toPlainText()))
    # Every figure, once shown, stays: each list starts with the one before.
    assert [len(s) for s in seen] == [2, 4, 6]
    assert seen[1][:2] == seen[0] and seen[2][:4] == seen[1]
    assert all(n > 0 for n in seen[2])
    report = window.chat.chat_view.transcript.context
    assert report is not None
    assert sum(seen[2]) == sum(t.tokens for t in report.turns)
