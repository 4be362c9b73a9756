"""Issue 49: a row's logits are the same bits whatever shares its batch or its cache.

On a native graph at the fast precision (the default), a prompt run whole, run after a prefix
from the cache (written by steps, or by another prompt), cut into small pieces, and a sequence
decoded in a batched step beside others all give each position the logits of its solo fresh
run, bit for bit: the 8-bit products are row-invariant by construction and DecodeAttention
computes a prompt's rows in a step's float order (native/decode_attention.inc). Every
comparison is between runs made here, on this machine; no stored tokens or logits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.loops import KVLoop, Step
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.native_library import usable_isa
from tests.tiny_families import FAMILIES, write_family_gguf

pytestmark = pytest.mark.skipif(not usable_isa(), reason="native kernels not built here")

CONTEXT = 160
LOOPS = ("iobinding", "naive")  # a shared KV buffer written in place; a past copied each run


def rows_fresh(loop: KVLoop, ids: list[int]) -> np.ndarray:
    loop.reset()
    return loop.forward(ids, all_logits=True).logits.copy()


def rows_by_steps(loop: KVLoop, ids: list[int]) -> np.ndarray:
    """One token a run: every position's KV written by the step's attention."""
    loop.reset()
    return np.stack([loop.forward([t]).logits.copy() for t in ids])


def rows_after_cache(loop: KVLoop, ids: list[int], cut: int) -> np.ndarray:
    """The prefix run first (as a conversation's earlier turn), then the rest after it."""
    loop.reset()
    head = loop.forward(ids[:cut], all_logits=True).logits.copy()
    assert loop.prepare(ids) == cut  # the cached prefix is kept
    tail = loop.forward(ids[cut:], all_logits=True).logits.copy()
    return np.concatenate([head, tail])


def rows_in_pieces(loop: KVLoop, ids: list[int], piece: int) -> np.ndarray:
    loop.reset()
    before, loop.prefill_chunk = loop.prefill_chunk, piece
    try:
        return loop.forward(ids, all_logits=True).logits.copy()
    finally:
        loop.prefill_chunk = before


def assert_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, what
    differ = np.flatnonzero((got != want).reshape(len(got), -1).any(axis=1))
    assert differ.size == 0, f"{what}: rows {differ[:8].tolist()} differ from the fresh run"


def check_every_way(engine: Engine, ids: list[int], mode: str) -> None:
    loop = engine.loop(mode)
    fresh = rows_fresh(loop, ids)
    assert_bits(rows_fresh(loop, ids), fresh, "run again")
    assert_bits(rows_by_steps(loop, ids), fresh, "one token a run")
    for cut in (1, 5, len(ids) - 1):
        assert_bits(rows_after_cache(loop, ids, cut), fresh, f"after {cut} cached")
    for piece in (3, 16):
        assert_bits(rows_in_pieces(loop, ids, piece), fresh, f"in pieces of {piece}")


def check_batched(engine: Engine, prompts: list[list[int]], steps: int) -> None:
    """Each sequence decoded beside the others (one batched run a step) gets, at every step,
    the logits it gets alone; the prompts prefilled on their slots."""
    solo = engine.loop("iobinding")
    tokens = [[(7 * i + 3 * j) % 200 + 3 for j in range(steps)] for i in range(len(prompts))]
    alone = []
    for prompt, extra in zip(prompts, tokens, strict=True):
        solo.reset()
        solo.forward(prompt)
        alone.append([solo.forward([t]).logits.copy() for t in extra])
    batch = engine.slots(len(prompts), budget=len(prompts) * engine.max_context)
    together: list[list[np.ndarray]] = [[] for _ in prompts]
    loops = [batch.acquire() for _ in prompts]
    for loop, prompt in zip(loops, prompts, strict=True):
        assert loop is not None
        loop.reset()
        loop.forward(prompt)
    for j in range(steps):  # as the batch's loop runs them: every token handed in, one step
        for i, loop in enumerate(loops):
            assert loop is not None
            batch.hand_in(loop, tokens[i][j])
        assert batch.run_pending()
        for i, loop in enumerate(loops):
            assert loop is not None
            stepped = loop.stepped
            assert isinstance(stepped, Step), stepped
            together[i].append(stepped.logits.copy())
    for loop in loops:
        assert loop is not None
        batch.release(loop)
    assert batch.rows == len(prompts) * batch.steps  # every step carried them all
    for i, (got, want) in enumerate(zip(together, alone, strict=True)):
        assert_bits(np.stack(got), np.stack(want), f"sequence {i} batched")
    engine.release_slots()


def check_seeded(engine: Engine, prompt: list[int]) -> None:
    """A seeded request at temperature 1 draws the same tokens, with the same log-probs, fresh
    and with its prompt from the cache (asked again; a follow-up on an earlier answer)."""
    settings = SamplingSettings(
        temperature=1.0, top_k=0, repetition_penalty=1.0, max_new_tokens=12, seed=5
    )

    def ask(ids: list[int], fresh: bool) -> tuple[list[int], list[float], int]:
        if fresh:
            engine.reset()
        stats = engine.generate_ids(ids, settings, ignore_eos=True).run()
        return stats.token_ids, stats.logprobs, stats.reused_tokens

    first = ask(prompt, fresh=True)
    again = ask(prompt, fresh=False)
    assert again[2] == len(prompt) - 1  # all but the last token came from the cache
    assert again[:2] == first[:2]
    follow_up = prompt + first[0][:6] + prompt[:9]
    reused = ask(follow_up, fresh=False)
    assert reused[2] >= len(prompt)
    assert reused[:2] == ask(follow_up, fresh=True)[:2]


def prompt_ids(length: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 250, length)]


# LongRoPE (Phi-3.5 / Phi-4 mini) picks its RoPE tables by the sequence's whole length, as
# transformers does: a prompt cut after its original context rotates its first keys with the
# short tables. Its answers depend on the cut by the model's own definition, so only its batched
# rows are compared (each sequence takes the tables of its own length, not its partners').
def cut_invariant(family: str) -> None:
    if FAMILIES[family].longrope:
        pytest.skip("LongRoPE's tables follow the run's length (transformers' definition)")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def family_dir(family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp(f"invariance-{family}")
    gguf = write_family_gguf(base / "m.gguf", family)
    return convert_gguf(gguf, base / "m", ConvertOptions(graph="native"))


@pytest.mark.parametrize("mode", LOOPS)
def test_every_family_gives_a_row_the_same_bits_every_way(
    family: str, family_dir: Path, mode: str
) -> None:
    cut_invariant(family)
    engine = Engine(family_dir, threads=2, max_context=CONTEXT, precision="fast")
    # Past one 128-position chunk of the attention; the tiny families' windows are short.
    check_every_way(engine, prompt_ids(min(140, engine.max_context), seed=1), mode)


def test_every_family_samples_the_same_seeded_answer_fresh_and_reused(
    family: str, family_dir: Path
) -> None:
    cut_invariant(family)
    engine = Engine(family_dir, threads=2, max_context=CONTEXT, precision="fast")
    check_seeded(engine, prompt_ids(40, seed=2))


def test_every_family_gives_a_batched_row_its_solo_bits(family_dir: Path) -> None:
    engine = Engine(family_dir, threads=2, max_context=CONTEXT, precision="fast")
    # 7 tokens: within phi4-mini's original context of 16 while its partners are past it.
    check_batched(engine, [prompt_ids(n, seed=n) for n in (30, 7, 61)], steps=6)


@pytest.mark.default_model
@pytest.mark.parametrize("mode", LOOPS)
def test_the_default_model_gives_a_row_the_same_bits_every_way(
    default_model_dir: Path, mode: str
) -> None:
    engine = Engine(default_model_dir, max_context=512, precision="fast")
    tok = engine.tokenizer.tok
    text = "Once upon a time, in a small village by the sea, there lived an old man who " * 5
    check_every_way(engine, list(tok.encode(text))[:150], mode)


@pytest.mark.default_model
def test_the_default_model_gives_a_batched_row_its_solo_bits(default_model_dir: Path) -> None:
    engine = Engine(default_model_dir, max_context=CONTEXT, precision="fast")
    tok = engine.tokenizer.tok
    prompts = [
        list(tok.encode(t))
        for t in ("The capital of France is", "def fibonacci(n):", "Write a haiku about rain.")
    ]
    check_batched(engine, prompts, steps=8)


@pytest.mark.default_model
def test_the_default_model_samples_the_same_seeded_answer_fresh_and_reused(
    default_model_dir: Path,
) -> None:
    engine = Engine(default_model_dir, max_context=CONTEXT, precision="fast")
    tok = engine.tokenizer.tok
    check_seeded(engine, list(tok.encode("Write a story about a famous author called Erin")))
