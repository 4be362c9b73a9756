"""The comparison's requests: which loops a sweep point runs, and what a sweep will take."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine import model_description
from chatapp.engine.engine import Engine
from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import CACHED_MODES, MODES, Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.session.compare_jobs import (
    DEFAULT_SWEEP,
    NOCACHE_SWEEP_MAX,
    SWEEP_TOKENS,
    CompareRequest,
    ProgressLine,
    SweepCosts,
    SweepRequest,
    compare_job,
    duration_text,
)
from chatapp.session.model_jobs import EngineHost
from tests.session.drive import drive


def test_a_sweep_runs_no_cache_only_on_the_shorter_contexts() -> None:
    request = SweepRequest("Hi", (128, 2048), max_new_tokens=32, modes=MODES)
    assert request.modes_at(128) == MODES
    assert request.modes_at(NOCACHE_SWEEP_MAX - 32) == MODES
    assert request.modes_at(NOCACHE_SWEEP_MAX) == CACHED_MODES
    cached = SweepRequest("Hi", (128,), modes=CACHED_MODES)
    assert cached.modes_at(128) == CACHED_MODES


def test_the_cost_model_counts_every_step_of_every_loop() -> None:
    costs = SweepCosts(prefill_s_per_token=0.01, decode_s=0.05)
    request = SweepRequest("Hi", (100,), max_new_tokens=4, repeats=2, modes=MODES)
    # Cached loops: a prefill of 100 tokens, then 3 decode steps. No cache: every token is a
    # prefill of the whole sequence so far (100, 101, 102, 103 tokens).
    cached = 100 * 0.01 + 3 * 0.05
    nocache = (100 + 101 + 102 + 103) * 0.01
    assert abs(costs.point_s(request, 100) - 2 * (2 * cached + nocache)) < 1e-9
    assert costs.step_s(Mode.NAIVE, 100, 2) == 0.05
    assert abs(costs.step_s(Mode.NOCACHE, 100, 2) - 1.02) < 1e-9


def test_costs_come_from_a_measured_run() -> None:
    run = RunStats("iobinding", "cpu", prompt_tokens=200, ttft_s=2.0, latencies_s=[0.1, 0.3, 0.2])
    costs = SweepCosts.from_run(run)
    assert abs(costs.prefill_s_per_token - 0.01) < 1e-12 and costs.decode_s == 0.2


def test_the_default_sweep_fits_three_minutes_at_the_speed_measured_on_two_busy_cores() -> None:
    # SmolLM2-135M on 2 cores with other work running: a 258-token prefill took 3.2 s and a
    # decode step 60 ms (chatapp bench --context-tokens 256). The default sweep must stay
    # under 3 minutes at that speed, no cache included where it runs.
    request = SweepRequest("Why is the sky blue?")
    assert request.contexts == DEFAULT_SWEEP and request.max_new_tokens == SWEEP_TOKENS
    busy = SweepCosts(prefill_s_per_token=3.2 / 258, decode_s=0.060)
    assert busy.sweep_s(request) < 180


def test_durations_read_as_a_person_says_them() -> None:
    assert duration_text(12) == "about 10 s"
    assert duration_text(95) == "about 1 min 40 s"
    assert duration_text(120) == "about 2 min"
    assert duration_text(1900) == "about 32 min"


def test_the_view_is_told_where_no_cache_runs_and_why() -> None:
    """In words the view shows (issue 47: the reason was only in a tooltip)."""
    note = SweepRequest("Hi", (128, 512, 1024), max_new_tokens=16, modes=MODES).nocache_note()
    assert note.startswith("No cache runs at 128 only: past 256 tokens")
    assert (
        SweepRequest("Hi", (512,), modes=MODES)
        .nocache_note()
        .startswith("No cache runs at none of these contexts")
    )
    assert SweepRequest("Hi", (64, 128), max_new_tokens=16, modes=MODES).nocache_note() == ""
    assert SweepRequest("Hi", (512,), modes=CACHED_MODES).nocache_note() == ""


def test_a_comparisons_later_runs_move_the_bar_step_by_step(tiny_model_dir: Path) -> None:
    host = EngineHost()
    host.engine = Engine(tiny_model_dir, threads=1)
    request = CompareRequest("Hi", max_new_tokens=6, repeats=2, modes=CACHED_MODES)
    outcome = drive(compare_job(host, request))
    assert outcome.error is None, outcome.message
    lines = [i for i in outcome.items if isinstance(i, ProgressLine)]
    second = next(n for n, line in enumerate(lines) if line.text.startswith("Run 2/2"))
    later = list(dict.fromkeys(line.fraction for line in lines[second + 1 :]))
    assert len(later) == 6 * len(CACHED_MODES)  # one a step of each loop
    assert later == sorted(later) and 0.5 < later[0] < later[-1] < 1.0


def test_a_comparison_runs_on_a_context_of_its_own_and_the_chat_keeps_its_cache(
    tiny_model_dir: Path,
) -> None:
    host = EngineHost()
    engine = host.engine = Engine(tiny_model_dir, threads=1, max_context=128)
    greedy = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=6)
    prompt = [1, 5, 9, 2, 7, 3, 8]
    answer = engine.generate_ids(prompt, greedy, ignore_eos=True).run().token_ids
    follow_up = [*prompt, *answer, 11, 12]
    request = CompareRequest("Hi", max_new_tokens=4, repeats=1, modes=CACHED_MODES)
    outcome = drive(compare_job(host, request))
    assert outcome.error is None, outcome.message
    # The comparison reset and ran its own loops; the chat's still holds its conversation.
    again = engine.generate_ids(follow_up, greedy, ignore_eos=True).run()
    assert again.reused_tokens == len(prompt) + len(answer) - 1


def test_a_comparison_without_room_for_its_own_kv_is_refused_in_words_and_the_chat_keeps_its_own(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison's context allocates KV caches beside the chat's: where the memory free
    now cannot hold one, it says so instead of swapping or meeting the out-of-memory killer."""
    host = EngineHost()
    engine = host.engine = Engine(tiny_model_dir, threads=1, max_context=128)
    greedy = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=6)
    prompt = [1, 5, 9, 2, 7, 3, 8]
    answer = engine.generate_ids(prompt, greedy, ignore_eos=True).run().token_ids
    need = engine.info.kv_bytes_per_token() * 128
    monkeypatch.setattr(model_description, "available_memory", lambda: need - 1)
    request = CompareRequest("Hi", max_new_tokens=4, repeats=1, modes=CACHED_MODES)
    outcome = drive(compare_job(host, request))
    assert outcome.error is not None
    assert outcome.message.startswith("Another KV cache for 128 tokens")
    assert f"but {(need - 1) >> 20} MB are free" in outcome.message
    monkeypatch.setattr(model_description, "available_memory", lambda: need)
    again = engine.generate_ids([*prompt, *answer, 11], greedy, ignore_eos=True).run()
    assert again.reused_tokens == len(prompt) + len(answer) - 1  # the chat's cache is intact


def test_the_loops_are_compared_plain_while_the_chat_drafts(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chat's "Speculative decoding" box is on by default; the loop comparison measures
    the loops themselves, as `chatapp bench` does (found driving the window: a kept draft
    drew a 0 ms token into "Time per token" and its medians, and no line said it drafted).
    Plain vs speculative is its own view."""
    host = EngineHost()
    engine = host.engine = Engine(tiny_model_dir, threads=1, max_context=128)
    engine.speculative = True
    asked: list[bool] = []
    loaded = type(engine.loaded)
    new_context = loaded.new_context

    def spy(self, mode=Mode.IOBINDING, speculative=False):  # type: ignore[no-untyped-def]
        asked.append(speculative)
        return new_context(self, mode, speculative)

    monkeypatch.setattr(loaded, "new_context", spy)
    request = CompareRequest("Hi", max_new_tokens=4, repeats=1, modes=CACHED_MODES)
    outcome = drive(compare_job(host, request))
    assert outcome.error is None, outcome.message
    assert asked == [False]
    assert engine.speculative  # the chat's choice stays
