"""Slots decoded together: each sequence's greedy tokens (and log-probs) equal its solo run's,
with mixed prompt lengths, a sequence joining mid-stream and one leaving early. The solo
references are computed here, on this machine, with the engine's own loop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotBatch
from chatapp.folder_format.native_library import usable_isa

WAIT_S = 600  # a generous bound on any one wait, so that a broken batch fails instead of hanging


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


def solo(engine: Engine, prompt: list[int], n: int) -> RunStats:
    engine.reset()
    return engine.generate_ids(prompt, greedy(n), ignore_eos=True).run()


@dataclass
class Client:
    """One sequence of the scenario, run on its own thread through a slot."""

    prompt: list[int]
    new_tokens: int
    start: threading.Event | None = None  # wait for this before joining
    on_token: Callable[[int], None] = lambda _i: None
    stats: RunStats | None = None
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def run(self, engine: Engine, batch: SlotBatch) -> None:
        try:
            if self.start is not None:
                assert self.start.wait(WAIT_S)
            loop = batch.acquire(self.prompt)
            assert loop is not None
            try:
                gen = engine.generate_ids(
                    self.prompt, greedy(self.new_tokens), ignore_eos=True, loop=loop
                )
                for event in gen:
                    self.on_token(event.index)
                self.stats = gen.stats
            finally:
                batch.release(loop)
        except BaseException as exc:  # re-raised by the test's thread
            self.error = exc


def run_clients(engine: Engine, batch: SlotBatch, clients: list[Client]) -> None:
    for c in clients:
        c.thread = threading.Thread(target=c.run, args=(engine, batch), daemon=True)
        c.thread.start()
    for c in clients:
        c.thread.join(WAIT_S)
        assert not c.thread.is_alive(), "a slot's generation never finished"
        if c.error is not None:
            raise c.error


def joining_and_leaving(
    engine: Engine, prompts: list[list[int]], lengths: list[int], reuse_bits: bool = False
) -> None:
    """A (long) and B (short, leaves early) start together; C joins once A has 4 tokens, and A
    waits for C's first token, so A and C certainly share steps; then D reuses A's slot.
    `reuse_bits`: D's log-probs too equal its solo run's (a native graph at the fast precision,
    where a prefix written by steps holds the bits a prompt writes: tests/engine/
    test_invariance.py)."""
    references = [solo(engine, p, n) for p, n in zip(prompts, lengths, strict=True)]
    batch = engine.slots(3)
    a_has_four, c_joined = threading.Event(), threading.Event()

    def a_progress(index: int) -> None:
        if index == 3:
            a_has_four.set()
            assert c_joined.wait(WAIT_S)

    def c_progress(index: int) -> None:
        if index == 0:
            c_joined.set()

    a = Client(prompts[0], lengths[0], on_token=a_progress)
    b = Client(prompts[1], lengths[1])
    c = Client(prompts[2], lengths[2], start=a_has_four, on_token=c_progress)
    run_clients(engine, batch, [a, b, c])
    for client, ref in zip([a, b, c], references, strict=False):
        assert client.stats is not None
        assert len(client.stats.token_ids) == client.new_tokens
        assert client.stats.token_ids == ref.token_ids
        assert client.stats.logprobs == ref.logprobs  # the same logits, bit for bit
    assert batch.rows > batch.steps  # some steps carried several sequences
    assert batch.busy == 0

    # D continues A's conversation: it gets A's slot back and reuses its cached prefix.
    follow_up = prompts[0] + a.stats.token_ids[:5] if a.stats else []
    d = Client(follow_up, lengths[2])
    run_clients(engine, batch, [d])
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
    stats = engine.generate_ids([1, 2, 3], greedy(5), ignore_eos=True, loop=second).run()
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


def test_the_busy_count_is_read_while_a_step_holds_the_batch(varied_model_dir: Path) -> None:
    """The window polls it on its GUI thread; a step holds the batch's lock for a whole run."""
    import threading

    engine = Engine(varied_model_dir, threads=1, max_context=32)
    batch = engine.slots(2)
    loop = batch.acquire()
    assert loop is not None
    holding, done = threading.Event(), threading.Event()

    def step_running() -> None:
        with batch._cond:  # as _run_if_complete holds it while the session runs
            holding.set()
            done.wait(5)

    thread = threading.Thread(target=step_running)
    thread.start()
    try:
        assert holding.wait(5)
        counted: list[int] = []
        reader = threading.Thread(target=lambda: counted.append(batch.busy))
        reader.start()
        reader.join(2)
        assert counted == [1], "busy waited for the running step"
    finally:
        done.set()
        thread.join()
        reader.join()
    batch.release(loop)
