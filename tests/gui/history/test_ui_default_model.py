"""History and context policy with the real default model (SmolLM2-135M, 8192 tokens of context
here). Skipped when the model is not prepared. One window is shared by the module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.gui.chat.transcript import CUT_TEXT
from chatapp.gui.common.settings import SETTINGS_ENV
from chatapp.gui.main_window import MainWindow
from chatapp.session.answer import AnswerRequest
from chatapp.store import ConversationDraft, Figures, HistoryStore, MessageDraft
from chatapp.store import history as store_history
from tests.gui.conftest import (
    counted_transcript,
    greedy,
    open_loaded_window,
    send_and_wait,
    set_sampling,
)
from tests.gui.history.test_ui import _known, click_row, history

pytestmark = [pytest.mark.default_model, pytest.mark.usefixtures("exact_default_precision")]


@pytest.fixture(scope="module")
def history_path(tmp_path_factory) -> Iterator[Path]:
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("data") / "history.sqlite3"
    mp.setenv(SETTINGS_ENV, str(tmp_path_factory.mktemp("settings") / "chatapp.ini"))
    mp.setattr(store_history, "default_history_path", lambda: path)
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def window(qapp, default_model_dir: Path, history_path: Path) -> Iterator[MainWindow]:
    win = open_loaded_window(default_model_dir)
    yield win
    win.close()
    win.deleteLater()


@pytest.fixture(autouse=True)
def _keep_module_history(history_path: Path, monkeypatch) -> None:
    # The package conftest gives every test its own history file; this module shares one.
    monkeypatch.setattr(store_history, "default_history_path", lambda: history_path)


def test_a_saved_chat_reopens_in_another_window_and_continues(
    qtbot,
    window: MainWindow,
    default_model_dir: Path,
    history_path: Path,
    generate_requests: list[AnswerRequest],
) -> None:
    window.new_chat_action.trigger()
    set_sampling(window, greedy(16))
    send_and_wait(qtbot, window, "What is the capital of France?")
    first = window.chat.conversation
    assert first.id is not None and "Paris" in first.messages[1].content
    line = counted_transcript(qtbot, window, messages=2).splitlines()[-1]
    assert "tok/s" in line and "TTFT" in line

    other = open_loaded_window(default_model_dir)  # a restart, or a second instance
    try:
        set_sampling(other, greedy(16))
        assert first.id in history(other).panel.ids()
        click_row(qtbot, other, first.id)
        # The reopened chat is counted on the worker: until then the figure line carries the
        # answer's token count, after it the header does (one count per answer).
        assert counted_transcript(qtbot, other, messages=2).splitlines()[-1] == line
        assert [m.content for m in other.chat.conversation.messages] == [
            m.content for m in first.messages
        ]
        send_and_wait(qtbot, other, "And what is its most famous tower?")
        sent = [m.content for m in generate_requests[-1].messages]
        assert "What is the capital of France?" in sent and first.messages[1].content in sent
        assert other.chat.conversation.messages[-1].figures.prompt_tokens > 40  # history included
    finally:
        other.close()
        other.deleteLater()
    with HistoryStore(history_path) as store:
        rows = store.load_conversation(first.id).messages
    assert [m.role for m in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[3].figures.model == window.chat.controller.backend_session.model.name
    assert rows[3].figures.generated_tokens and rows[3].figures.tokens_per_s > 0


def test_a_chat_longer_than_8192_tokens_is_cut_and_counted_exactly(
    qtbot, window: MainWindow, history_path: Path
) -> None:
    """80 turns (about 12 900 tokens): the oldest no longer fit; the per-turn figures add up
    to the tokenizer's count of the whole chat (ChatML renders turns independently)."""
    with HistoryStore(history_path) as store:
        now = store._now()
        drafts = []
        for i in range(80):
            drafts.append(
                MessageDraft("user", f"question {i} " + "about bread and its long history " * 10)
            )
            drafts.append(
                MessageDraft(
                    "assistant",
                    f"answer {i} " + "bread is made of flour and water. " * 10,
                    Figures(mode="iobinding", device="cpu", generated_tokens=80),
                )
            )
        conversation_id = store.add_conversation(
            ConversationDraft("bread, at length", now, now, messages=tuple(drafts))
        ).id
    history(window).refresh()
    window.chat.side_panel.system_prompt_box.edit.setPlainText("")
    set_sampling(window, greedy(256))
    with qtbot.waitSignal(
        window.chat.controller.chat.events.context, timeout=20_000, check_params_cb=_known
    ) as blocker:
        click_row(qtbot, window, conversation_id)
    report = blocker.args[0]
    engine = window.host.engine
    whole = engine.count_tokens(window.chat.conversation.engine_messages(""))
    print(
        f"\ncontext policy, {len(drafts)} messages / {whole} tokens: counted in "
        f"{report.elapsed_s * 1000:.0f} ms, {report.dropped} messages not sent, "
        f"{report.prompt_tokens} of {report.limit} sent"
    )
    assert report.limit == 8192 and report.reserve == 256
    assert whole > 8192 and report.dropped > 0 and report.fits
    assert report.prompt_tokens + 256 <= 8192
    assert report.overhead_tokens + sum(t.tokens for t in report.turns) == whole
    window.chat.chat_view.flush()  # a long chat is drawn a slice at a time
    text = window.chat.chat_view.transcript.toPlainText()
    assert text.count(CUT_TEXT) == 1
    assert text.index(f"question {report.dropped // 2 - 1} ") < text.index(CUT_TEXT)
    assert (
        window.chat.side_panel.figures_box.context_value.text() == f"{report.prompt_tokens} / 8192"
    )
    # Measured again (a later answer): the per-turn counts are remembered.
    with qtbot.waitSignal(
        window.chat.controller.chat.events.context, timeout=20_000, check_params_cb=_known
    ) as again:
        history(window).measure()
    print(f"measured again in {again.args[0].elapsed_s * 1000:.0f} ms")
    assert again.args[0].turns == report.turns
