"""KV strategies: the factory picks one per layout and mode, and each plans the runs of a step
(what the loops feed) on its own, without a session."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.devices import CPU
from chatapp.engine.engine import Engine
from chatapp.engine.kv_strategy import GraphRun, SharedBufferKv, StandardKv, Step
from chatapp.engine.loop_factory import make_kv
from chatapp.engine.loops import IOBindingLoop, NaiveLoop
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.model_folder.model import ModelInfo
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.nocache import NoCacheKv
from chatapp.engine.static_window import PAD_ID, StaticWindowKv
from tests.engine.test_layouts import CONTEXT, folders  # noqa: F401  (a fixture)

STRATEGY = {
    "gqa": SharedBufferKv,
    "standard": StandardKv,
    "static": StaticWindowKv,
    "static-w4": StaticWindowKv,
}


class Recorder:
    """A RunGraph that records the runs a strategy plans and returns numbered logits rows."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.runs: list[GraphRun] = []
        self.masks: list[list[int]] = []

    def __call__(self, run: GraphRun) -> Step:
        self.runs.append(run)
        if run.mask is not None:
            self.masks.append(run.mask[0].tolist())
        # Row i's logits are all (start + i): which row came back is readable.
        rows = np.arange(run.start, run.start + len(run.ids), dtype=np.float32)
        logits = np.repeat(rows[:, None], self.vocab, axis=1)
        picked = logits[-1] if run.wanted is None else logits[run.wanted]
        return Step(picked, 0.001, 0.002, 8, 16)


def info_of(folder: Path) -> ModelInfo:
    return open_model_folder(folder)


@pytest.mark.parametrize("name", list(STRATEGY))
def test_the_factory_gives_each_layout_its_strategy_and_each_mode_its_loop(
    folders: dict[str, Path],  # noqa: F811
    name: str,
) -> None:
    for mode in MODES:
        engine = Engine(folders[name], mode=mode, threads=1, max_context=CONTEXT)
        loop = engine.loop()
        assert loop.mode is mode
        assert type(loop) is (IOBindingLoop if mode is Mode.IOBINDING else NaiveLoop)
        kv = loop.kv.inner if isinstance(loop.kv, NoCacheKv) else loop.kv
        assert type(kv) is STRATEGY[name]
        assert isinstance(loop.kv, NoCacheKv) == (not mode.caches)
        # Only IO-Binding keeps its KV in bound device values.
        assert bool(loop.kv.bound_values()) == (mode is Mode.IOBINDING)


def test_a_static_window_runs_left_padded_windows_over_its_slots(
    folders: dict[str, Path],  # noqa: F811
) -> None:
    info = info_of(folders["static-w4"])
    kv = make_kv(Mode.NAIVE, info, CPU, CONTEXT)
    assert isinstance(kv, StaticWindowKv) and kv.window == 4 and kv.context == CONTEXT
    kv.truncate(0)
    run = Recorder(info.vocab_size)
    step = kv.forward(run, [], [11, 12, 13, 14, 15, 16], wanted=[0, 5])
    # 6 tokens: two windows of 4, the first left-padded with 2.
    assert [list(r.ids) for r in run.runs] == [[PAD_ID, PAD_ID, 11, 12], [13, 14, 15, 16]]
    assert all(r.wanted == [0, 1, 2, 3] for r in run.runs)  # every row, the real ones kept
    # The mask marks the real tokens' slots, filled from the right.
    assert run.masks[0] == [0] * (CONTEXT - 4) + [0, 0, 1, 1]
    assert run.masks[1] == [0] * (CONTEXT - 8) + [0, 0, 1, 1] + [1, 1, 1, 1]
    assert kv.used_slots == 8
    # Rows 0 and 5 of the new tokens: the first window's row 2, the second's row 3.
    assert step.logits[:, 0].tolist() == [2.0, 7.0]
    assert (step.h2d_bytes, step.d2h_bytes) == (16, 32)
    # A token now takes a whole window: (96 - 8 - 4) / 4 more fit after one.
    assert kv.tokens_that_fit(6, 1) == (CONTEXT - 8 - 4) // 4
    assert kv.reusable([1, 2], [1, 2, 3]) == 2 and kv.reusable([1, 2], [1, 5, 3]) == 0
    kv.truncate(0)
    assert kv.used_slots == 0 and not kv.valid.any()


def test_a_standard_cache_keeps_the_shared_prefix(folders: dict[str, Path]) -> None:  # noqa: F811
    kv = make_kv(Mode.NAIVE, info_of(folders["standard"]), CPU, CONTEXT)
    assert kv.reusable([1, 2, 3, 4], [1, 2, 3, 9, 9]) == 3
    assert kv.reusable([1, 2, 3], [1, 2, 3]) == 2  # at least one token must run
    assert kv.fits(CONTEXT - 1) and not kv.fits(CONTEXT)
    with pytest.raises(ValueError, match="full"):
        kv.check_room(CONTEXT - 2, 3)
    run = Recorder(8)
    step = kv.forward(run, [1, 2], [3, 4, 5], wanted=None)
    assert [(list(r.ids), r.start, r.wanted, r.shrink_arena) for r in run.runs] == [
        ([3, 4, 5], 2, None, True)  # one run after the cached two; a prompt's run shrinks
    ]
    assert step.logits[0] == 4.0  # the last position's row


def test_without_a_cache_every_step_runs_the_whole_sequence_in_pieces(
    folders: dict[str, Path],  # noqa: F811
) -> None:
    info = info_of(folders["gqa"])
    short_runs = dataclasses.replace(CPU, max_run_rows=4)
    kv = make_kv(Mode.NOCACHE, info, short_runs, CONTEXT)
    assert isinstance(kv, NoCacheKv) and not kv.caches
    assert kv.reusable([1, 2, 3], [1, 2, 3, 4]) == 0  # nothing is reused
    assert kv.piece_tokens(512) is None  # the loop never cuts a step: the strategy does
    kv.truncate(0)
    run = Recorder(8)
    step = kv.forward(run, [1, 2, 3, 4, 5], [6], wanted=None)
    # Six tokens in runs of at most 4; only the last run drops its presents unfetched.
    assert [(list(r.ids), r.start, r.keep_kv) for r in run.runs] == [
        ([1, 2, 3, 4], 0, True),
        ([5, 6], 4, False),
    ]
    assert run.runs[1].wanted == [1] and run.runs[0].wanted is None
    assert step.logits[0] == 5.0  # the sequence's last position
    assert (step.h2d_bytes, step.host_s) == (16, pytest.approx(0.002))
    with pytest.raises(ValueError, match="longer than the model's context"):
        kv.check_room(CONTEXT - 1, 2)


def test_without_a_cache_a_static_window_starts_over_every_step(
    folders: dict[str, Path],  # noqa: F811
) -> None:
    kv = make_kv(Mode.NOCACHE, info_of(folders["static-w4"]), CPU, CONTEXT)
    assert isinstance(kv, NoCacheKv) and isinstance(kv.inner, StaticWindowKv)
    kv.truncate(0)
    for cached, pad in (([1, 2, 3], 0), ([1, 2, 3, 4, 5, 6], 1)):
        run = Recorder(8)
        kv.forward(run, cached, [9], wanted=None)
        # The whole sequence packed into windows from an empty cache: no window per token,
        # only the first one padded.
        sequence = [*cached, 9]
        assert [t for r in run.runs for t in r.ids] == [PAD_ID] * pad + sequence
        assert run.masks[0][-4:] == [0] * pad + [1] * (4 - pad)
        assert sum(run.masks[-1]) == len(sequence)
    assert kv.tokens_that_fit(7, 1) == CONTEXT - 8
