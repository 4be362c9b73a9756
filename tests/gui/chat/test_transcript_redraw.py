"""The transcript redraws only the messages that changed, and ends up exactly as a fresh
drawing of the same messages would."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.transcript import TranscriptView
from chatapp.session.context import ContextReport, TurnTokens
from chatapp.session.conversation import ChatMessage

FIGURES = AnswerFigures("iobinding", "cpu", 42.0, 0.2, 1.5, 3.0, 10, 0, 20, 512, "eos")


def chat(turns: int) -> list[ChatMessage]:
    messages = []
    for i in range(turns):
        messages.append(ChatMessage("user", f"question {i}\nsecond line"))
        answer = f"answer {i}: **bold**\n\n- item\n\n```python\nprint({i})\n```"
        messages.append(ChatMessage("assistant", answer, FIGURES))
    return messages


def report(messages: Sequence[ChatMessage], dropped: int, tokens: int = 30) -> ContextReport:
    turns = tuple(
        TurnTokens(start, start + 2, tokens + start, start >= dropped, (10, tokens + start - 10))
        for start in range(0, len(messages), 2)
    )
    return ContextReport(
        request_id=1,
        message_count=len(messages),
        limit=512,
        reserve=64,
        prompt_tokens=sum(t.tokens for t in turns if t.sent),
        overhead_tokens=5,
        dropped=dropped,
        turns=turns,
        fits=True,
        elapsed_s=0.01,
    )


@pytest.fixture
def views(qtbot) -> tuple[TranscriptView, TranscriptView]:
    """One transcript that redraws, one drawn from scratch each time to compare with."""
    pair = []
    for _ in range(2):
        view = TranscriptView()
        qtbot.addWidget(view)
        view.resize(600, 400)
        pair.append(view)
    pair[1].links = pair[0].links  # the same action key, so that the two HTMLs compare
    return pair[0], pair[1]


def redraw(
    views: tuple[TranscriptView, TranscriptView],
    messages: Sequence[ChatMessage],
    context: ContextReport | None = None,
) -> int | None:
    """Draw on both; the first changed document position of the redrawn one (None: none)."""
    kept, fresh = views
    changes: list[int] = []
    kept.document().contentsChange.connect(lambda pos, _removed, _added: changes.append(pos))
    kept.context = fresh.context = context
    kept.show_messages(messages)
    kept.finish_drawing()
    kept.document().contentsChange.disconnect()
    fresh.show_messages([])
    fresh.show_messages(messages)
    fresh.finish_drawing()
    assert kept.toHtml() == fresh.toHtml()
    assert kept._starts == fresh._starts
    return min(changes) if changes else None


def end_of(view: TranscriptView) -> int:
    return view.document().characterCount() - 1


def test_sending_draws_only_the_new_message(views) -> None:
    messages = chat(5)
    redraw(views, messages)
    before = end_of(views[0])
    first = redraw(views, [*messages, ChatMessage("user", "one more question")])
    assert first is not None and first >= before


def test_a_streamed_answer_is_replaced_by_the_final_message(views) -> None:
    messages = chat(3)
    redraw(views, messages)
    before = end_of(views[0])
    views[0].begin_answer(len(messages))
    views[0].update_answer("partial **answer**")
    final = ChatMessage("assistant", "the whole **answer**", FIGURES)
    first = redraw(views, [*messages, final])
    assert first is not None and first >= before
    assert "partial" not in views[0].toPlainText()


def test_regenerate_and_edit_redraw_from_the_changed_message(views) -> None:
    messages = chat(4)
    redraw(views, messages)
    keep = views[0]._drawn[6][1]  # where the last answer's drawing begins
    regenerated = [*messages[:7], ChatMessage("assistant", "another answer", FIGURES)]
    assert redraw(views, regenerated) >= keep
    edit_at = views[0]._drawn[2][1]
    edited = [*messages[:2], ChatMessage("user", "edited question")]
    assert redraw(views, edited) >= edit_at


def test_token_counts_redraw_only_the_turns_they_change(views) -> None:
    messages = chat(4)
    redraw(views, messages, report(messages, dropped=0))
    last_turn = views[0]._drawn[6][1]
    # A new count for the last turn only (as after an answer).
    changed = report(messages, dropped=0)
    changed = replace(changed, turns=(*changed.turns[:3], TurnTokens(6, 8, 99, True, (10, 89))))
    assert redraw(views, messages, changed) >= last_turn
    # A cut greys everything above it: all is drawn again, and still equals a fresh drawing.
    assert redraw(views, messages, report(messages, dropped=4)) == 0


def test_nothing_changed_changes_nothing(views) -> None:
    messages = chat(3)
    redraw(views, messages)
    assert redraw(views, messages) is None


def test_an_empty_answer_says_when_the_model_ended_it_at_once(qtbot) -> None:
    view = TranscriptView()
    qtbot.addWidget(view)
    at_once = replace(FIGURES, generated_tokens=0, finish_reason="eos")
    hidden_only = replace(FIGURES, generated_tokens=3, finish_reason="eos")  # tokens, no text
    view.show_messages(
        [
            ChatMessage("user", "go on"),
            ChatMessage("assistant", "", at_once),
            ChatMessage("user", "again"),
            ChatMessage("assistant", "", hidden_only),
            ChatMessage("user", "and again"),
            ChatMessage("assistant", ""),  # no figures (an imported chat)
        ]
    )
    qtbot.waitUntil(lambda: "and again" in view.toPlainText(), timeout=5000)
    text = view.toPlainText()
    assert text.count("(empty answer: the model ended it before writing anything)") == 1
    assert text.count("(empty answer)") == 2
