"""`Backend`'s card and counting on a model run here (engine/backend.py, engine/local_card.py):
what the side panel, the comparison and the server's model list render from."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.backend import Backend, BackendCard
from chatapp.engine.engine import Engine
from chatapp.engine.text.chat import Message
from chatapp.units import fmt_bytes

FIGURES = ("ttft", "tokens_per_second", "perplexity", "prompt_perplexity", "transfer", "context")


def test_a_local_card_reports_every_figure_and_describes_the_engine(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    backend: Backend = engine  # the protocol, as the session holds it
    card = backend.card()
    assert isinstance(card, BackendCard) and card.server is None
    assert card.name == engine.info.name and card.runs_on == "this machine"
    assert card.max_context == engine.max_context and card.capabilities.calls_tools
    assert all(card.measure(key).reported for key in FIGURES)
    assert {m.key for m in card.measures} == set(FIGURES)  # each one named, none absent
    assert card.fact("Device").value == engine.device.label
    assert card.fact("Loop").value == engine.mode.label
    assert card.fact("Threads").value == "1"
    kv = engine.info.kv_bytes_per_token()
    assert kv > 0 and card.fact("KV bytes per token").value == fmt_bytes(kv)
    assert card.fact("Precision").value == engine.precision_in_effect
    assert card.description.startswith(engine.info.name) and " on " not in card.description
    # A card is a copy: a later change of loop is the next card's.
    engine.set_mode("naive")
    assert card.fact("Loop").value != backend.card().fact("Loop").value
    assert card.as_dict()["measures"]["transfer"] == {"reported": True}


def test_counting_through_the_protocol_is_the_tokenizers(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    backend: Backend = engine
    chat = [Message("user", "hello there")]
    assert backend.count_tokens(chat) == len(engine.tokenizer.chat_ids(chat, engine.max_context))
    backend.close()  # nothing held open: the engine still answers
    assert backend.count_tokens(chat) > 0
