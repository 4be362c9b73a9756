"""Slots decoded together: each sequence's greedy tokens (and log-probs) equal its solo run's,
with mixed prompt lengths, a sequence joining mid-stream and one leaving early. The solo
references are computed here, on this machine, with the engine's own loop; the sequences run as
the server runs them, tasks of the batch's one loop (tests/engine/slot_tasks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.batch_loop import BatchLoop
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.slots import SlotBatch
from chatapp.folder_format.native_library import usable_isa
from tests.engine.slot_tasks import Client, add, drive, greedy, run, together


def solo(engine: Engine, prompt: list[int], n: int) -> RunStats:
    engine.reset()
    return engine.generate_ids(prompt, greedy(n), ignore_eos=True).run()


def joining_and_leaving(
    engine: Engine, prompts: list[list[int]], lengths: list[int], reuse_bits: bool = False
) -> None:
    """A (long) and B (short, leaves early) start together; C joins once A has 4 tokens (A and
    C then share steps); then D reuses A's slot. `reuse_bits`: D's log-probs too equal its solo
    run's (a native graph at the fast precision, where a prefix written by steps holds the bits
    a prompt writes: tests/engine/test_invariance.py)."""
    references = [solo(engine, p, n) for p, n in zip(prompts, lengths, strict=True)]
    batch = engine.slots(3)
    tasks = BatchLoop(batch)
    overlapping: list[int] = []

    def a_progress(index: int) -> None:
        if index == 3:
            add(tasks, engine, c)
        if c.stats is not None and 0 < c.stats.generated_tokens < lengths[2]:
            overlapping.append(index)  # C is decoding while A is: they share the steps

    a = Client(prompts[0], greedy(lengths[0]), on_token=a_progress)
    b = Client(prompts[1], greedy(lengths[1]))
    c = Client(prompts[2], greedy(lengths[2]))
    add(tasks, engine, a)
    add(tasks, engine, b)
    run(tasks, [a, b, c])
    for client, ref in zip([a, b, c], references, strict=False):
        assert client.stats is not None
        assert len(client.stats.token_ids) == client.settings.max_new_tokens
        assert client.stats.token_ids == ref.token_ids
        assert client.stats.logprobs == ref.logprobs  # the same logits, bit for bit
    assert batch.rows > batch.steps  # some steps carried several sequences
    assert c.slot not in (None, a.slot) and overlapping  # C joined A's steps
    assert batch.busy == 0

    # D continues A's conversation: it gets A's slot back and reuses its cached prefix.
    follow_up = prompts[0] + a.stats.token_ids[:5] if a.stats else []
    d = Client(follow_up, greedy(lengths[2]))
    together(engine, batch, [d])
    assert d.slot == a.slot
    assert d.stats is not None and d.stats.reused_tokens == len(prompts[0]) + 4
    alone = solo(engine, follow_up, lengths[2])
    assert d.stats.token_ids == alone.token_ids
    if reuse_bits:
        assert d.stats.logprobs == alone.logprobs


PROMPTS = [list(range(3, 60)), [5, 77, 130, 9], [200]]  # 57, 4 and 1 tokens


@pytest.fixture(scope="module")
def native_dir(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not usable_isa():
        pytest.skip("native kernels not built here")
    out = tmp_path_factory.mktemp("slots-native") / "m"
    return convert_gguf(varied_gguf, out, ConvertOptions(graph="native"))


def test_stock_graph_slots_give_each_sequence_its_solo_tokens(varied_model_dir: Path) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=128)
    joining_and_leaving(engine, PROMPTS, [24, 6, 12])


def test_native_graph_slots_give_each_sequence_its_solo_tokens(native_dir: Path) -> None:
    engine = Engine(native_dir, threads=2, max_context=128, precision="fast")
    joining_and_leaving(engine, PROMPTS, [24, 6, 12], reuse_bits=True)


@pytest.mark.default_model
def test_default_model_slots_give_each_sequence_its_solo_tokens(
    default_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fast (the default): D's reused prefix, written by decode steps, holds the bits its solo
    # run's prompt writes, so D's log-probs equal too (issue 49). Exact's products take another
    # path for one row than for a prompt's rows, so there only A, B and C keep their bits.
    monkeypatch.setenv("CHATAPP_GGUF_PRECISION", "fast")
    engine = Engine(default_model_dir, max_context=256)
    tok = engine.tokenizer.tok
    prompts = [
        tok.encode("Once upon a time, in a small village by the sea, there lived an old man who"),
        tok.encode("def fibonacci(n):"),
        tok.encode("The capital of France is"),
    ]
    joining_and_leaving(engine, [list(p) for p in prompts], [12, 4, 6], reuse_bits=True)


def test_a_full_slot_cache_gives_up_its_last_token_for_a_filler_row(
    varied_model_dir: Path,
) -> None:
    """A slot below a decoding one that is not decoding itself runs as a filler row, written
    one past its cache; a full cache has no such position, so it forgets its last token
    instead of having it overwritten."""
    engine = Engine(varied_model_dir, threads=1, max_context=16)
    batch = engine.slots(2, budget=32)  # room for both: the first fills a whole context
    first = batch.acquire()
    assert first is not None and first.index == 0
    first.forward(list(range(3, 19)))
    assert len(first.cached) == 16  # the whole context; the slot stays taken, not decoding
    second = batch.acquire([1, 2, 3])
    assert second is not None and second.index == 1
    reference = solo(engine, [1, 2, 3], 5).token_ids
    stats = drive(engine.generate_ids([1, 2, 3], greedy(5), ignore_eos=True, loop=second), batch)
    batch.release(second)
    batch.release(first)
    assert stats.token_ids == reference
    assert len(first.cached) == 15


def test_slots_refuse_a_concat_kv_layout(varied_gguf: Path, tmp_path: Path) -> None:
    folder = convert_gguf(varied_gguf, tmp_path / "m", ConvertOptions(attention="standard"))
    engine = Engine(folder, threads=1, max_context=64)
    with pytest.raises(EngineError, match="GroupQueryAttention"):
        engine.slots(2)


def test_no_free_slot_gives_none(varied_model_dir: Path) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=32)
    batch = engine.slots(2)
    taken = [batch.acquire(), batch.acquire()]
    assert None not in taken and batch.acquire() is None and batch.busy == 2
    for loop in taken:
        assert loop is not None
        batch.release(loop)
    assert batch.busy == 0


def test_a_batch_of_one_slot_answers_its_queue_in_turn(varied_model_dir: Path) -> None:
    """More requests than slots: the loop admits the next once a slot is free."""
    engine = Engine(varied_model_dir, threads=1, max_context=64)
    prompts = [[7, 8, 9], [10, 11], [12]]
    references = [solo(engine, p, 5).token_ids for p in prompts]
    batch = SlotBatch(engine.session, engine.info, engine.device, 64, 1)
    clients = [Client(p, greedy(5)) for p in prompts]
    assert [s.token_ids for s in together(engine, batch, clients)] == references
    assert batch.widest == 1 and batch.busy == 0


def test_a_generation_on_a_slot_runs_only_in_the_batchs_loop(varied_model_dir: Path) -> None:
    """Iterated by hand, its first step (which waits for the batched step) is refused in words:
    nothing else would run that step."""
    engine = Engine(varied_model_dir, threads=1, max_context=32)
    batch = engine.slots(2)
    loop = batch.acquire()
    assert loop is not None
    gen = engine.generate_ids([3, 4, 5], greedy(4), ignore_eos=True, loop=loop)
    with pytest.raises(EngineError, match="its answer runs in the batch's loop"):
        list(gen)
    batch.release(loop)
    assert batch.stepping == 0 and batch.busy == 0
