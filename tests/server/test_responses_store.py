"""The Responses API's memory stays bounded: entries, age and characters."""

from __future__ import annotations

from chatapp.engine.text.chat import Message, ToolCall
from chatapp.server.responses_store import ResponseStore, StoredResponse


def stored(text: str = "hi") -> StoredResponse:
    return StoredResponse({"id": "x"}, (Message("user", text), Message("assistant", "ok")))


def test_the_least_recently_used_goes_first() -> None:
    store = ResponseStore(max_entries=3)
    for name in "abc":
        store.put(name, stored())
    assert store.get("a") is not None  # used: now the newest
    store.put("d", stored())
    assert store.get("b") is None and store.get("a") is not None
    assert len(store) == 3


def test_entries_expire() -> None:
    now = [1000.0]
    store = ResponseStore(ttl_s=60, clock=lambda: now[0])
    store.put("a", stored())
    now[0] += 59
    assert store.get("a") is not None
    now[0] += 2
    assert store.get("a") is None and len(store) == 0


def test_characters_are_bounded() -> None:
    store = ResponseStore(max_chars=100)
    assert not store.put("huge", stored("x" * 200))  # alone too big: not kept
    assert store.get("huge") is None
    for i in range(10):
        assert store.put(str(i), stored("x" * 18))  # 20 + 11 ('{"id": "x"}') characters each
    assert len(store) == 3 and store.get("9") is not None and store.get("6") is None


def test_tool_call_arguments_count_and_delete_forgets() -> None:
    store = ResponseStore(max_chars=100)
    calls = (ToolCall("c", "f", "1" * 150),)
    assert not store.put("a", StoredResponse({}, (Message("assistant", "", tool_calls=calls),)))
    tools = {"tools": [{"name": "f", "parameters": {"description": "d" * 150}}]}
    assert not store.put("echo", StoredResponse(tools, ()))  # the body counts too
    store.put("b", stored())
    assert store.delete("b") and not store.delete("b") and store.get("b") is None


def test_replacing_an_entry_does_not_count_it_twice() -> None:
    store = ResponseStore(max_chars=100)
    for _ in range(5):
        store.put("a", stored("x" * 50))
    store.put("b", stored("y" * 20))
    assert store.get("a") is not None and store.get("b") is not None
