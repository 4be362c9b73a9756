"""The loop without a KV cache: the cached loops' tokens, the whole sequence every step."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.engine import nocache
from chatapp.engine.engine import Engine
from chatapp.engine.loops import NaiveLoop
from chatapp.engine.modes import CACHED_MODES, MODES, Mode, mode_label
from chatapp.engine.nocache import (
    MIN_ANSWER,
    SEQUENCE_CAP,
    NoCacheKv,
    capped_new_tokens,
)
from chatapp.engine.packed_cache import ENV_VAR as PACKED_ENV_VAR
from tests.convert.test_graph import STEP_TOLERANCE
from tests.engine.test_loops import greedy, run_ids
from tests.engine.test_memory import with_external_data


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Engine:
    return Engine(tiny_model_dir, threads=1, max_context=256)


@pytest.mark.parametrize(
    "prompt", [[5, 77, 130, 9], list(range(3, 60)), [200], [250, 4, 4, 4, 4, 18]]
)
def test_all_three_loops_give_the_same_greedy_tokens(engine: Engine, prompt: list[int]) -> None:
    tokens = {mode: run_ids(engine, prompt, mode, 40) for mode in MODES}
    assert len(tokens[Mode.NOCACHE]) == 40
    assert tokens[Mode.NOCACHE] == tokens[Mode.NAIVE] == tokens[Mode.IOBINDING]


def test_every_step_runs_the_whole_sequence_with_an_empty_past(engine: Engine) -> None:
    loop = engine.loop("nocache")
    assert isinstance(loop, NaiveLoop) and isinstance(loop.kv, NoCacheKv)
    assert loop.mode is Mode.NOCACHE
    seen: list[tuple[int, int, int]] = []
    real_run = loop.session.run

    def recording_run(names, feeds, options=None):
        past = feeds[engine.info.kv[0].past_name]
        ids, mask = feeds[engine.info.io.input_ids], feeds[engine.info.io.attention_mask]
        seen.append((ids.shape[1], mask.shape[1], past.shape[2]))
        assert names == [engine.info.io.logits]  # the presents are never fetched
        return real_run(names, feeds, options)

    loop.session = type("S", (), {"run": staticmethod(recording_run)})()
    try:
        engine.generate_ids([5, 6, 7], greedy(4), "nocache", ignore_eos=True).run()
    finally:
        loop.session = engine.session
    assert seen == [(3, 3, 0), (4, 4, 0), (5, 5, 0), (6, 6, 0)]


def test_nocache_logits_match_a_full_forward_pass(engine: Engine) -> None:
    ids = [7, 90, 33, 180, 41, 12, 250, 99]
    reference = engine.loop("naive")
    reference.reset()
    full = reference.forward(ids, all_logits=True).logits.copy()
    loop = engine.loop("nocache")
    loop.reset()
    rows = [loop.forward(ids[:3], all_logits=True).logits.copy()]
    for t in ids[3:]:
        rows.append(loop.forward([t]).logits[None, :].copy())
    got = np.concatenate(rows)
    np.testing.assert_allclose(got, full, atol=STEP_TOLERANCE * np.abs(full).max())
    np.testing.assert_array_equal(got.argmax(-1), full.argmax(-1))


def test_nothing_is_reused_across_turns(engine: Engine) -> None:
    engine.reset()
    first = engine.generate_ids([5, 6, 7, 8], greedy(3), "nocache").run()
    follow = [5, 6, 7, 8, *first.token_ids, 9, 10]
    second = engine.generate_ids(follow, greedy(3), "nocache").run()
    assert second.reused_tokens == 0


def test_a_chat_answer_is_capped_a_benchmark_is_not(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert capped_new_tokens(40, 4000) == SEQUENCE_CAP - 40
    assert capped_new_tokens(40, 10) == 10
    assert capped_new_tokens(SEQUENCE_CAP + 500, 4000) == MIN_ANSWER
    monkeypatch.setattr(nocache, "SEQUENCE_CAP", 100)  # the tiny engine's context is 256
    engine.reset()
    capped = engine.generate_ids([5] * 60, greedy(200), "nocache").run()
    assert capped.generated_tokens <= 40 and capped.finish_reason in ("length", "eos")
    assert engine.generate_ids([5] * 90, greedy(200), "nocache").settings.max_new_tokens == 16
    exact = engine.generate_ids([5] * 60, greedy(150), "nocache", ignore_eos=True)
    assert exact.settings.max_new_tokens == 150
    cached = engine.generate_ids([5] * 60, greedy(150), "naive")
    assert cached.settings.max_new_tokens == 150


def test_modes_carry_their_labels_and_order() -> None:
    assert [m.label for m in MODES] == ["No cache", "Naive", "IO-Binding"]
    assert [m.order for m in MODES] == [0, 1, 2]
    assert CACHED_MODES == (Mode.NAIVE, Mode.IOBINDING)
    assert not Mode.NOCACHE.caches and Mode.NAIVE.caches
    assert mode_label("nocache") == "No cache" and mode_label("remote") == "remote"
    assert all(m.description.endswith(".") for m in MODES)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="packed copies: Linux only")
def test_no_cache_on_a_packed_weight_copy_gives_the_cached_tokens(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model running from a saved packed copy (engine/packed_cache.py) releases the mapped
    pages around prompts; every no-cache step is a prompt-sized run."""
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(PACKED_ENV_VAR, "1")  # the tiny model is far below the size it is for
    packed = Engine(folder, threads=1, max_context=128)
    assert packed.mapped_files != packed.memory.mapped_files
    prompt = list(range(3, 40))
    tokens = {mode: run_ids(packed, prompt, mode, 16) for mode in MODES}
    assert tokens[Mode.NOCACHE] == tokens[Mode.NAIVE] == tokens[Mode.IOBINDING]
