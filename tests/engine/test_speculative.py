"""Speculative decoding (engine/speculative.py): drafting, planning, and the answers it leaves
unchanged: every comparison is made at run time against the plain decode of the same engine."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.batch_loop import BatchLoop, Task
from chatapp.engine.engine import Engine
from chatapp.engine.generation import Generation
from chatapp.engine.loops import Turn
from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import Mode
from chatapp.engine.native_kernels import library_path
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.slots import SlotLoop
from chatapp.engine.speculative import (
    LONGEST_MATCH,
    Draft,
    DraftPlanner,
    PromptLookup,
    match_class,
)
from chatapp.engine.static_window import StaticWindowKv
from chatapp.engine.text.chat import Message
from tests.tiny_families import FAMILIES, write_family_gguf

# Rows verified together equal one-token steps only on the GGUF kernels' fast precision.
BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")
NATIVE = ConvertOptions(graph="native")

GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=40)
# A prompt that repeats itself, so drafts are found; its tokens are the tiny vocabulary's.
REPEATING = [5, 77, 130, 9, 44, 61, 5, 77, 130, 9, 44, 61, 5, 77, 130]


class EveryDraft(DraftPlanner):
    """Verifies every draft it is offered, whatever it costs: the rollback paths run often."""

    def length(self, draft: Draft) -> int:
        return min(self.most, len(draft.tokens))


def run(engine: Engine, prompt: list[int], settings: SamplingSettings, forced: bool) -> RunStats:
    generation = engine.generate_ids(prompt, settings, ignore_eos=True)
    if forced:
        generation.planner = EveryDraft(most=4)
    return generation.run()


# -- drafting ---------------------------------------------------------------------------------
def test_lookup_proposes_what_followed_the_latest_match() -> None:
    lookup = PromptLookup([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3])
    draft = lookup.draft(3)
    assert draft == Draft((5, 6, 1), 3)  # the latest "1 2 3" was followed by 5 6 1


def test_lookup_prefers_the_longest_match_and_stops_at_what_is_known() -> None:
    lookup = PromptLookup([7, 8, 1, 2, 9, 3, 2], sizes=(2, 1))
    assert lookup.draft(5) == Draft((9, 3, 2), 1)  # only "2" matches: it was followed by 9
    lookup.append(5)
    assert lookup.draft(5) is None  # 5 never occurred before
    assert lookup.draft(0) is None


def test_lookup_built_token_by_token_equals_one_built_at_once() -> None:
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3]
    grown = PromptLookup([])
    for i, token in enumerate(tokens):
        grown.append(token)
        assert grown.draft(4) == PromptLookup(tokens[: i + 1]).draft(4)


def test_lookup_says_how_far_back_the_answer_agrees_with_its_source() -> None:
    copied = list(range(10, 30))
    lookup = PromptLookup([*copied, 99, *copied[:15]])
    assert lookup.draft(3) == Draft((25, 26, 27), 15)  # all 15 copied tokens, not only 4
    long = list(range(100, 100 + 2 * LONGEST_MATCH))
    assert PromptLookup([*long, 7, *long[:-1]]).draft(1) == Draft((long[-1],), LONGEST_MATCH)
    assert match_class(15) == 8 and match_class(LONGEST_MATCH) == 16 and match_class(1) == 1


# -- planning ---------------------------------------------------------------------------------
def test_planner_drafts_long_where_drafts_are_kept_and_rows_are_cheap() -> None:
    planner = DraftPlanner(most=8)
    planner.record_run(1, 0.010)
    for rows in range(2, 10):
        planner.record_run(rows, 0.010 + 0.001 * rows)
    for _ in range(20):
        planner.record_draft(3, 8, 8)
    assert planner.length(Draft(tuple(range(8)), 3)) == 8


def test_planner_stops_drafting_what_is_rejected_and_probes_ever_more_rarely() -> None:
    planner = DraftPlanner(most=8, probe_every=4)
    planner.record_run(1, 0.010)
    planner.record_run(2, 0.016)
    for _ in range(20):
        planner.record_draft(1, 1, 0)
    draft = Draft((1, 2, 3), 1)

    def probes(chances: int, kept: int = 0) -> list[int]:
        """The chances (1-based) at which it probes, each probe's draft keeping `kept`."""
        at = []
        for chance in range(1, chances + 1):
            if planner.length(draft):
                at.append(chance)
                planner.record_draft(1, 1, kept)
        return at

    assert probes(28) == [4, 12, 28]  # waits of 4, 8, 16 chances
    assert probes(32, kept=1)[0] == 32  # the next wait, 32; a kept token resets it
    assert probes(4) == [4]  # back to the first wait


def test_one_stalled_run_does_not_stop_drafting_but_a_dear_length_is_learnt() -> None:
    """A shared machine holds a run up now and then: a length is not ruled out by one slow
    run, nor by a slower machine, only by runs that keep costing more than they give."""
    planner = DraftPlanner(most=3)
    sure = Draft((1, 2, 3), 16)
    for _ in range(9):
        planner.record_run(1, 0.010)
    for rows, cost in ((2, 0.014), (3, 0.016)):
        planner.record_run(rows, cost)
    planner.record_run(4, 0.500)  # stalled, the first of its length: no dearer than guessed
    # the three rows' 1.6 steps, and 0.3 more: what each row past the first cost in them
    assert planner.cost(4) == pytest.approx(0.019)
    for _ in range(3):
        planner.record_run(4, 0.017)
    assert planner.length(sure) == 3
    planner.record_run(4, 0.500)  # stalled again: the median stands
    assert planner.length(sure) == 3
    for _ in range(9):  # the machine gets twice as slow for every row count alike
        planner.record_run(1, 0.020)
    assert planner.length(sure) == 3
    for _ in range(9):  # four rows really cost four steps: three drafted tokens do not pay
        planner.record_run(4, 0.080)
    assert planner.length(sure) == 2


def test_a_length_not_yet_run_costs_per_row_what_the_longest_measured_rows_did() -> None:
    """Rows cheaper than `row_share` guesses (a verifying pass sharing the weights' unpacking)
    make longer drafts worth a try; before, each length past the measured ones was guessed at
    half a step a row, so four rows that cost 1.8 steps looked like 2.2 and were never run."""
    planner = DraftPlanner(most=8, row_share=0.5)
    planner.record_run(1, 0.010)
    assert planner.cost(3) == pytest.approx(0.020)  # nothing measured: half a step a row
    for _ in range(3):
        planner.record_run(2, 0.012)
    assert planner.cost(4) == pytest.approx(0.016)  # 1.2 steps, then 0.2 a row
    # drafts kept 3 times in 5: two tokens (1.96 expected) for 1.4 steps beat one for 1.2
    # (at half a step a row, 1.7 steps: one)
    assert planner.length(Draft(tuple(range(8)), 2)) == 2
    for _ in range(3):
        planner.record_run(4, 0.028)  # dearer than that: learnt, and its slope is capped
    assert planner.cost(4) == pytest.approx(0.028)
    assert planner.cost(6) == pytest.approx(0.028 + 2 * 0.005)


def test_planner_does_not_draft_before_a_plain_step_was_timed() -> None:
    assert DraftPlanner().length(Draft((1, 2, 3), 4)) == 0


# -- the same answers -------------------------------------------------------------------------
# Every KV layout: the shared buffer (the native default), concat (standard attention), and
# static windows of one and of four tokens a run (fixed shapes, one window a run; contexts with
# room for two turns of 40 tokens, one window each).
LAYOUTS = {
    "shared": NATIVE,
    "concat": ConvertOptions(attention="standard", graph="native"),
    "static-w1": ConvertOptions(
        kv_layout="static", attention="standard", context_length=128, window=1, graph="native"
    ),
    "static-w4": ConvertOptions(
        kv_layout="static", attention="standard", context_length=512, window=4, graph="native"
    ),
}
FAMILY_NAMES = ("llama3", "qwen3", "gemma3", "phi3")


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("speculative-families")
    folders = {}
    for name in FAMILY_NAMES:
        gguf = write_family_gguf(root / f"{name}.gguf", FAMILIES[name])
        for layout, options in LAYOUTS.items():
            folders[name, layout] = convert_gguf(gguf, root / f"{name}-{layout}", options)
    return folders


@pytest.fixture(scope="module")
def varied_layouts(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("speculative-varied")
    return {
        layout: convert_gguf(varied_gguf, root / layout, options)
        for layout, options in LAYOUTS.items()
    }


@pytest.fixture(scope="module")
def varied_native(varied_layouts: dict[str, Path]) -> Path:
    return varied_layouts["shared"]


def assert_same_as_plain(engine: Engine, prompt: list[int], settings: SamplingSettings) -> RunStats:
    plain = run(engine, prompt, settings, forced=False)
    engine.reset()
    drafted = run(engine, prompt, settings, forced=True)
    assert drafted.drafted, "nothing was drafted: the test would show nothing"
    assert drafted.token_ids == plain.token_ids
    assert drafted.logprobs == plain.logprobs  # the rows are the one-token steps' own
    assert sum(drafted.accepted) <= sum(drafted.drafted)
    assert drafted.runs == len(drafted.latencies_s) - sum(drafted.accepted)
    return drafted


@BUILT
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("mode", [Mode.IOBINDING, Mode.NAIVE])
def test_greedy_answers_are_the_plain_decodes_in_every_family_and_layout(
    family_folders: dict[tuple[str, str], Path], family: str, layout: str, mode: Mode
) -> None:
    engine = Engine(family_folders[family, layout], mode=mode, threads=1, precision="fast")
    assert engine.speculation_refusal() is None
    assert_same_as_plain(engine, REPEATING, GREEDY)


@BUILT
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("mode", [Mode.IOBINDING, Mode.NAIVE])
def test_seeded_sampling_gives_the_plain_decodes_tokens(
    varied_layouts: dict[str, Path], layout: str, mode: Mode
) -> None:
    """Each row is sampled in order with the history it would have had, and a drafted token
    is kept only when the sample equals it: the same random numbers, the same tokens. Drafts
    are rejected here, so every layout's rollback runs (a static window masks the slots out)."""
    engine = Engine(varied_layouts[layout], mode=mode, threads=1, precision="fast")
    rejected = 0
    for seed in range(4):
        settings = SamplingSettings(
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            repetition_penalty=1.1,
            seed=seed,
            max_new_tokens=40,
        )
        engine.reset()
        drafted = assert_same_as_plain(engine, REPEATING, settings)
        rejected += sum(drafted.drafted) - sum(drafted.accepted)
    assert rejected, "no draft was rejected: the rollback did not run"


@BUILT
@pytest.mark.parametrize("mode", [Mode.IOBINDING, Mode.NAIVE])
@pytest.mark.parametrize("layout", ["static-w1", "static-w4"])
def test_a_static_windows_rollback_leaves_the_cache_single_steps_would(
    varied_layouts: dict[str, Path], layout: str, mode: Mode
) -> None:
    """Verified one token a window, then taken back: the slots, the mask and every KV value
    are those of a loop that never ran the rejected tokens."""

    def state(engine: Engine) -> tuple[list[bool], int, list[np.ndarray]]:
        kv = engine.loop().kv
        assert isinstance(kv, StaticWindowKv)
        if mode is Mode.NAIVE:
            pasts = list(kv.host_feeds().values())
        else:
            pasts = [value.numpy() for value in kv.past_values.values()]
        return kv.valid.tolist(), kv.used_slots, pasts

    drafted = Engine(varied_layouts[layout], mode=mode, threads=1, precision="fast")
    plain = Engine(varied_layouts[layout], mode=mode, threads=1, precision="fast")
    for engine in (drafted, plain):
        loop = engine.loop()
        loop.prepare(REPEATING)
        loop.forward(REPEATING)
    verified = drafted.loop().verify([7, 8, 9, 10])
    drafted.loop().rollback(2)  # 9 and 10 were not kept
    singles = [plain.loop().forward([t]).logits.copy() for t in (7, 8)]
    assert np.array_equal(verified.logits[:2], np.stack(singles))
    assert drafted.loop().cached == plain.loop().cached
    (valid, used, pasts), (valid_p, used_p, pasts_p) = state(drafted), state(plain)
    assert (valid, used) == (valid_p, used_p)
    assert all(np.array_equal(a, b) for a, b in zip(pasts, pasts_p, strict=True))
    # The next token runs as it would have.
    assert np.array_equal(drafted.loop().forward([11]).logits, plain.loop().forward([11]).logits)


@BUILT
def test_on_a_static_window_the_engine_only_probes(varied_layouts: dict[str, Path]) -> None:
    """There each drafted token is verified in a run of its own, as dear as a step: the
    engine's planner knows it from the start and drafts only its rare one-token probes."""
    engine = Engine(varied_layouts["static-w4"], threads=1, precision="fast")
    plain = run(engine, REPEATING, GREEDY, forced=False)
    engine.reset()
    engine.speculative = True
    drafted = engine.generate_ids(REPEATING, GREEDY, ignore_eos=True).run()
    assert drafted.token_ids == plain.token_ids
    assert set(drafted.drafted) <= {1}


@BUILT
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_follow_up_turn_after_rejected_drafts_reuses_a_correct_cache(
    varied_layouts: dict[str, Path], layout: str
) -> None:
    folder = varied_layouts[layout]
    engine = Engine(folder, threads=1, precision="fast")
    first = run(engine, REPEATING, GREEDY, forced=True)
    assert sum(first.accepted) < sum(first.drafted), "no draft was rejected"
    follow_up = [*REPEATING, *first.token_ids, 12, 13, 14]
    reused = run(engine, follow_up, GREEDY, forced=True)
    assert reused.reused_tokens > len(REPEATING)
    fresh = Engine(folder, threads=1, precision="fast")
    assert reused.token_ids == run(fresh, follow_up, GREEDY, forced=False).token_ids


def test_where_rows_are_not_the_steps_own_nothing_is_drafted(varied_native: Path) -> None:
    engine = Engine(varied_native, threads=1, precision="exact")
    engine.speculative = True
    assert "fast precision" in (engine.speculation_refusal() or "")
    stats = engine.generate_ids(REPEATING, GREEDY, ignore_eos=True).run()
    assert stats.drafted == [] and stats.generated_tokens == GREEDY.max_new_tokens


@BUILT
def test_the_default_model_keeps_drafts_when_it_repeats_a_text(
    default_model_dir: Path, exact_default_precision: None
) -> None:
    """A request to repeat a paragraph: the engine's own planner drafts from the prompt, keeps
    most of it, and the answer is the plain decode's."""
    engine = Engine(default_model_dir, precision="fast")
    paragraph = (
        "The old lighthouse keeper climbed the spiral stairs every evening at dusk. He "
        "polished the brass lamp, trimmed the wick, and checked the oil before lighting it."
    )
    messages = [Message("user", f"Repeat this paragraph exactly:\n\n{paragraph}")]
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=48)
    plain = engine.chat(messages, settings).run()
    engine.reset()
    engine.speculative = True
    drafted = engine.chat(messages, settings).run()
    assert drafted.token_ids == plain.token_ids
    assert sum(drafted.accepted) >= drafted.generated_tokens // 2
    assert drafted.runs < plain.runs


def test_generation_without_a_planner_drafts_nothing(varied_native: Path) -> None:
    engine = Engine(varied_native, threads=1)
    generation = engine.generate_ids(REPEATING, GREEDY, ignore_eos=True)
    assert isinstance(generation, Generation) and generation.planner is None
    assert generation.run().drafted == []


@BUILT
def test_slots_decoding_together_keep_their_answers_while_drafting(varied_native: Path) -> None:
    """A slot verifies its draft alone between two batched steps (engine/slots.py): each
    sequence's tokens are its plain solo run's, whatever the others do meanwhile."""
    engine = Engine(varied_native, threads=1, precision="fast")
    prompts = [REPEATING, [9, 44, 61, 9, 44, 61, 9, 44], list(range(20, 40))]
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=24)
    alone = []
    for prompt in prompts:
        engine.reset()
        alone.append(run(engine, prompt, settings, forced=False).token_ids)
    batch = engine.slots(len(prompts))
    results: dict[int, RunStats] = {}
    errors: list[BaseException] = []

    def client(i: int, loop: SlotLoop) -> Task:  # a task of the batch's loop, as served
        try:
            generation = engine.generate_ids(prompts[i], settings, ignore_eos=True, loop=loop)
            generation.planner = EveryDraft(most=3)
            yield from (t for t in generation.turns() if isinstance(t, Turn))
            results[i] = generation.stats
        except Exception as exc:  # reported below
            errors.append(exc)

    tasks = BatchLoop(batch)
    for i, prompt in enumerate(prompts):
        tasks.add(partial(client, i), prompt)
    tasks.run_until_done()
    assert not errors, errors
    assert sum(sum(r.drafted) for r in results.values()) > 0
    assert [results[i].token_ids for i in range(len(prompts))] == alone
