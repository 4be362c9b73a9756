"""Conversations and messages: round trips, ordering, rename/delete, search, edit-and-regenerate."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chatapp.store import (
    ConversationNotFoundError,
    Figures,
    HistoryStore,
    MessageDraft,
    MessageNotFoundError,
    default_history_path,
    open_default_store,
)
from chatapp.store.rows import snippet
from tests.store.conftest import FULL_FIGURES, FakeClock, count_rows

UNICODE = "Grüße, 世界! مرحبا 👩‍💻 e\u0301 — tab\there\nnew line\r\nand a NUL \x00 inside"


def _chat(store: HistoryStore, turns: int, title: str = "chat") -> list[int]:
    """A conversation of `turns` user/assistant pairs; returns the message ids."""
    conv = store.create_conversation(title)
    ids = []
    for i in range(turns):
        ids.append(store.append_message(conv.id, "user", f"question {i}").id)
        ids.append(store.append_message(conv.id, "assistant", f"answer {i}", FULL_FIGURES).id)
    return ids


def test_every_field_round_trips(db_path: Path, clock: FakeClock) -> None:
    with HistoryStore(db_path, clock=clock) as s:
        conv = s.create_conversation(UNICODE, model="tiny 🦙", system_prompt=UNICODE)
        user = s.append_message(conv.id, "user", UNICODE)
        answer = s.append_message(conv.id, "assistant", UNICODE * 50, FULL_FIGURES)
    # A fresh store on the same file: nothing comes from memory.
    with HistoryStore(db_path) as s:
        loaded = s.load_conversation(conv.id)
    assert loaded.info.title == UNICODE
    assert loaded.info.model == "tiny 🦙"
    assert loaded.info.system_prompt == UNICODE
    assert loaded.info.created == conv.created
    assert loaded.info.created.tzinfo is not None
    assert loaded.info.message_count == 2
    assert loaded.messages == (user, answer)  # ids, positions, roles, text, times, figures
    assert loaded.messages[1].figures == FULL_FIGURES
    assert loaded.messages[0].figures is None


def test_figures_unknown_values_and_nan(store: HistoryStore) -> None:
    conv = store.create_conversation()
    partial = Figures(mode="naive", perplexity=math.nan, ttft_s=math.inf, generated_tokens=0)
    assert partial.perplexity is None and partial.ttft_s is None
    store.append_message(conv.id, "assistant", "a", partial)
    store.append_message(conv.id, "assistant", "b", Figures())  # nothing known
    a, b = store.load_conversation(conv.id).messages
    assert a.figures == Figures(mode="naive", generated_tokens=0)
    assert b.figures is None


def test_figures_from_numpy_values(store: HistoryStore) -> None:
    np = pytest.importorskip("numpy")
    figures = Figures(
        tokens_per_s=np.float32(12.5), perplexity=np.float64("nan"), generated_tokens=np.int64(7)
    )
    conv = store.create_conversation()
    store.append_message(conv.id, "assistant", "a", figures)
    loaded = store.load_conversation(conv.id).messages[0].figures
    assert loaded == Figures(tokens_per_s=12.5, generated_tokens=7)
    assert type(loaded.generated_tokens) is int
    assert '"generated_tokens": 7' in store.export_json(conv.id)


def test_figures_from_a_gui_dict() -> None:
    gui = {"mode": "iobinding", "device": "cpu", "tokens_per_s": 9.5, "not_a_figure": 1}
    assert Figures.from_mapping({"model": "m", **gui}) == Figures(
        model="m", mode="iobinding", device="cpu", tokens_per_s=9.5
    )


def test_bad_messages_are_refused_and_nothing_written(store: HistoryStore, db_path: Path) -> None:
    conv = store.create_conversation()
    with pytest.raises(ValueError, match="only assistant"):
        store.append_message(conv.id, "user", "x", FULL_FIGURES)
    with pytest.raises(ValueError, match="role"):
        store.append_message(conv.id, "system", "x")  # type: ignore[arg-type]
    with pytest.raises(ConversationNotFoundError, match="no longer exists"):
        store.append_message(conv.id + 100, "user", "x")
    assert count_rows(db_path, "messages") == 0


def test_messages_keep_their_order(store: HistoryStore) -> None:
    ids = _chat(store, 30)
    conv_id = store.list_conversations()[0].id
    messages = store.load_conversation(conv_id).messages
    assert [m.id for m in messages] == ids
    assert [m.position for m in messages] == list(range(60))
    assert [m.content for m in messages[:4]] == ["question 0", "answer 0", "question 1", "answer 1"]
    assert all(a.created < b.created for a, b in itertools.pairwise(messages))


def test_list_is_most_recent_first_and_rename_does_not_reorder(store: HistoryStore) -> None:
    a = store.create_conversation("A")
    b = store.create_conversation("B")
    c = store.create_conversation("C")
    assert [i.title for i in store.list_conversations()] == ["C", "B", "A"]
    store.append_message(a.id, "user", "bump")
    listed = store.list_conversations()
    assert [i.title for i in listed] == ["A", "C", "B"]
    assert [i.message_count for i in listed] == [1, 0, 0]
    assert listed[0].updated > a.updated
    store.rename_conversation(b.id, "B renamed")
    assert [i.title for i in store.list_conversations()] == ["A", "C", "B renamed"]
    assert c.id > b.id > a.id


def test_order_survives_a_clock_that_stands_still(db_path: Path) -> None:
    frozen = datetime(2026, 1, 1, tzinfo=UTC)
    with HistoryStore(db_path, clock=lambda: frozen) as s:
        a = s.create_conversation("A")
        s.create_conversation("B")
        s.append_message(a.id, "user", "later")
        assert [i.title for i in s.list_conversations()] == ["A", "B"]


def test_update_conversation_settings(store: HistoryStore) -> None:
    conv = store.create_conversation("t", model="m1", system_prompt="be brief")
    store.update_conversation(conv.id, model="m2")
    info = store.get_conversation(conv.id)
    assert (info.title, info.model, info.system_prompt) == ("t", "m2", "be brief")
    store.update_conversation(conv.id, system_prompt="")
    assert store.get_conversation(conv.id).system_prompt == ""
    with pytest.raises(ConversationNotFoundError):
        store.rename_conversation(conv.id + 1, "nope")


def test_delete_cascades_to_messages(store: HistoryStore, db_path: Path) -> None:
    _chat(store, 3, "doomed")
    _chat(store, 2, "kept")
    doomed, kept = sorted(store.list_conversations(), key=lambda i: i.title)
    assert count_rows(db_path, "messages") == 10
    assert store.delete_conversation(doomed.id) is True
    # The cascade is SQLite's (foreign keys on), seen from an independent connection.
    assert count_rows(db_path, "messages") == 4
    assert [i.title for i in store.list_conversations()] == ["kept"]
    with pytest.raises(ConversationNotFoundError):
        store.load_conversation(doomed.id)
    assert store.delete_conversation(doomed.id) is False  # already gone: not an error
    # Ids are never reused, even for the newest row.
    assert store.create_conversation("new").id > kept.id


def test_edit_user_message_drops_everything_after_it(store: HistoryStore) -> None:
    ids = _chat(store, 3)
    conv_id = store.list_conversations()[0].id
    appended = store.replace_after(ids[2], new_content="question 1, edited")
    assert appended == []
    messages = store.load_conversation(conv_id).messages
    assert [m.content for m in messages] == ["question 0", "answer 0", "question 1, edited"]
    answer = store.append_message(conv_id, "assistant", "new answer", FULL_FIGURES)
    assert answer.position == 3
    assert [m.position for m in store.load_conversation(conv_id).messages] == [0, 1, 2, 3]


def test_regenerated_answer_replaces_the_tail_at_once(store: HistoryStore) -> None:
    ids = _chat(store, 2)
    conv_id = store.list_conversations()[0].id
    new = MessageDraft("assistant", "better answer", FULL_FIGURES)
    (stored,) = store.replace_after(ids[2], [new])
    assert (stored.position, stored.content, stored.figures) == (3, "better answer", FULL_FIGURES)
    contents = [m.content for m in store.load_conversation(conv_id).messages]
    assert contents == ["question 0", "answer 0", "question 1", "better answer"]


def test_replace_after_is_one_transaction(store: HistoryStore, db_path: Path) -> None:
    ids = _chat(store, 3)
    conv_id = store.list_conversations()[0].id
    before = store.load_conversation(conv_id)
    bad = [MessageDraft("assistant", "fine"), MessageDraft("user", "bad", FULL_FIGURES)]
    with pytest.raises(ValueError):
        store.replace_after(ids[0], bad, new_content="edited")
    assert store.load_conversation(conv_id) == before  # nothing deleted, nothing edited
    with pytest.raises(MessageNotFoundError):
        store.replace_after(10_000)


def test_truncate_after(store: HistoryStore) -> None:
    ids = _chat(store, 3)
    assert store.truncate_after(ids[1]) == 4
    assert store.truncate_after(ids[1]) == 0
    conv_id = store.list_conversations()[0].id
    assert [m.id for m in store.load_conversation(conv_id).messages] == ids[:2]


def test_search_is_case_insensitive_unicode_and_ordered(store: HistoryStore) -> None:
    old = store.create_conversation("Gardening")
    store.append_message(old.id, "user", "How do I grow tomatoes on a balcony?")
    new = store.create_conversation("Travel in Germany")
    store.append_message(new.id, "user", "Is the STRASSE sign about ÜBER roads?")
    store.append_message(new.id, "assistant", "Die Straße über den Fluss.")

    def where(query: str) -> list[tuple[int, int | None]]:
        return [(h.conversation_id, h.position) for h in store.search(query)]

    assert where("tomatoes") == [(old.id, 0)]
    assert where("über") == [(new.id, 0), (new.id, 1)]  # ÜBER and über
    assert where("straße") == [(new.id, 0), (new.id, 1)]  # casefold: ß == ss
    assert where("germany") == [(new.id, None)]  # a title hit
    assert where("o") and where("o")[0][0] == new.id  # most recent conversation first
    assert where("  ") == []
    assert where("no such text") == []
    assert len(store.search("o", limit=2)) == 2


def test_search_snippet_shows_the_match(store: HistoryStore) -> None:
    conv = store.create_conversation()
    text = "lorem ipsum " * 100 + "the NEEDLE is here\nand more " + "dolor sit " * 100
    store.append_message(conv.id, "user", text)
    (hit,) = store.search("needle")
    assert "the NEEDLE is here and more" in hit.snippet
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert len(hit.snippet) <= 82
    assert hit.role == "user" and hit.conversation_title == "New chat"


def _whole_text_snippet(text: str, needle: str, width: int = 80) -> str:
    """The snippet as it was made before: the whole message flattened and folded."""
    flat = " ".join(text.split())
    at = max(flat.casefold().find(needle), 0)
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    return ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")


@pytest.mark.parametrize(
    "text",
    [
        "needle",
        "  Needle at the start, then words " * 3,
        "words before\n\n\tthe NEEDLE\n" + "x " * 30,
        "a " * 5000 + "NEEDLE" + " b" * 5000,  # far from both ends
        "a" * 200_000 + " the needle " + "\n" * 3000,  # only spaces after it
        " " * 3000 + "needle",  # only spaces before it
        "Straße " * 20_000 + "needle",  # folding lengthens the text before the match
        "x" * ((1 << 16) - 3) + "NEEDLE tail",  # the match across a chunk boundary
    ],
)
def test_a_snippet_is_made_from_the_text_near_the_match(text: str) -> None:
    """Only the text around the match is flattened (a hit in a 4 Mi-character message cost
    60 ms when all of it was), and the snippet reads as it did."""
    expected = _whole_text_snippet(text, "needle")
    got = snippet(text, "needle")
    assert "needle" in got.casefold()
    if "Straße" in text:  # the old way counted folded characters and showed "…" alone
        assert got == "…" + ("Straße " * 20)[-26:] + "needle"
    else:
        assert got == expected


def test_default_store_lives_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    assert default_history_path() == tmp_path / "data" / "history.sqlite3"
    with open_default_store() as s:
        assert s.path == tmp_path / "data" / "history.sqlite3"
        assert s.recovery is None
        s.create_conversation("x")
    assert (tmp_path / "data" / "history.sqlite3").is_file()


def test_the_store_keeps_the_engines_figures_record() -> None:
    # One record from the engine to the window and the history: nothing to map, nothing to
    # forget when a figure is added (tests/engine/test_figures.py checks every field's trip).
    from chatapp.engine.figures import AnswerFigures

    assert Figures is AnswerFigures
