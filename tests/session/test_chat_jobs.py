"""The generation and context jobs, run without Qt (tests/session/drive.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.engine import LOCAL_CAPABILITIES, Engine
from chatapp.engine.generation import StepEvent
from chatapp.engine.metrics import RunStats, StepTiming
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.session.answer import STOP_STRING
from chatapp.session.chat_jobs import (
    AnswerResult,
    StatsSnapshot,
    TokenBatch,
    TokenItem,
    failure_stats,
    measure_context_job,
    measured_request,
    window_job,
)
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.context import ContextReport
from chatapp.session.jobs import Job
from chatapp.session.model_jobs import EngineHost
from tests.session.drive import drive

GREEDY_LONG = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=300)


@pytest.fixture(scope="module")
def host(tiny_model_dir: Path) -> EngineHost:
    host = EngineHost()
    host.engine = Engine(tiny_model_dir, threads=1)
    return host


def opts(settings: SamplingSettings = GREEDY_LONG, **chosen: object) -> GenerationOptions:
    return GenerationOptions(settings, Mode.IOBINDING, **chosen)  # type: ignore[arg-type]


def ask(host: EngineHost, text: str = "hello", options: GenerationOptions | None = None) -> Job:
    """The window's answer job, as Chat submits it."""
    return window_job(host, (Message("user", text),), options or opts())


def test_an_answer_streams_every_token_once_after_the_context_report(host: EngineHost) -> None:
    out = drive(ask(host), request_id=5)
    report, tokens = out.items[0], out.items[1:]
    assert isinstance(report, ContextReport) and report.request_id == 5
    assert all(isinstance(t, TokenItem) for t in tokens)
    result: AnswerResult = out.result
    assert result.stats.finish_reason == "length" and result.stats.generated_tokens == 300
    streamed = [t for t in tokens if t.token_id is not None]
    assert [t.token_id for t in streamed] == result.stats.token_ids
    assert [t.index for t in streamed] == list(range(300))
    assert tokens[300:] in ([], [TokenItem(300, tokens[-1].text)])  # a held-back tail
    assert "".join(t.text for t in tokens) == result.text
    # The report and the first token go out at once: the first token is the TTFT.
    assert out.flushed_at[:2] == [1, 2]
    assert out.partial is None  # nothing failed


def test_the_stop_flag_ends_the_answer_after_its_first_token(host: EngineHost) -> None:
    out = drive(ask(host), stopped=True)
    assert out.result.stats.finish_reason == "stop"
    assert out.result.stats.generated_tokens == 1


def test_no_model_and_bad_settings_are_one_sentence(host: EngineHost) -> None:
    out = drive(ask(EngineHost()))
    assert out.message == "No model is loaded yet."
    bad = drive(ask(host, options=opts(SamplingSettings(temperature=-1.0))))
    assert bad.message is not None and bad.message.startswith("Invalid sampling settings: ")


def test_a_fault_midway_keeps_the_figures_so_far(
    host: EngineHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.engine import loops

    calls = {"n": 0}
    forward = loops.KVLoop.forward

    def failing_forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 4:
            raise RuntimeError("simulated fault\nwith a second line")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(loops.KVLoop, "forward", failing_forward)
    out = drive(ask(host))
    assert out.message == "Generation failed: RuntimeError: simulated fault"
    stats = failure_stats(out.partial)
    assert stats is not None and stats.finish_reason == "error"
    assert stats.generated_tokens == sum(isinstance(i, TokenItem) for i in out.items) > 0
    assert failure_stats(None) is None


class _FakeGeneration:
    """Yields fixed deltas and, like the real Generation, a held-back tail as a last event."""

    def __init__(self, deltas: list[str], tail: str) -> None:
        self.deltas, self.tail = deltas, tail
        self.stats = RunStats(mode="iobinding", device="cpu", prompt_tokens=3)
        self.text = ""

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i, delta in enumerate(self.deltas):
            self.stats.token_ids.append(i)
            self.stats.logprobs.append(-0.5)
            self.text += delta
            yield StepEvent(i, i, delta, -0.5, StepTiming(0, 0, 0), 0.01)
        self.stats.finish_reason = "eos"
        if self.tail:
            self.text += self.tail
            yield StepEvent(len(self.deltas), -1, self.tail, math.nan, StepTiming(0, 0, 0), 0.0)


class _FakeTokenizer:
    has_template = True  # a chat model: no plain-line stops added

    def chat_ids(self, messages: list[Message], *_args: object, **_kwargs: object) -> list[int]:
        return [0] * 4 * len(messages)  # what the context policy counts


class _FakeEngine:
    """A local backend (engine/backend.py) with a fixed answer."""

    max_context = 512
    capabilities = LOCAL_CAPABILITIES
    answerer = "fake"

    def __init__(self, generation: _FakeGeneration) -> None:
        self.generation = generation
        self.tokenizer = _FakeTokenizer()

    @property
    def chat_tokenizer(self) -> _FakeTokenizer:
        return self.tokenizer

    def needs_warm_up(self, _mode: object) -> bool:  # as on the CPU
        return False

    def chat(self, *_args: object, **_kwargs: object) -> _FakeGeneration:
        return self.generation


def test_the_held_back_tail_is_the_last_item_and_the_text_adds_up() -> None:
    host = EngineHost()
    host.engine = _FakeEngine(_FakeGeneration(["The", " capital", " is", " Par"], "is."))  # type: ignore[assignment]
    out = drive(ask(host), request_id=3)
    tokens = [i for i in out.items if isinstance(i, TokenItem)]
    assert tokens[-1] == TokenItem(4, "is.")  # text only: no token, no latency
    joined = TokenBatch.join(3, tokens)
    assert joined.text == out.result.text == "The capital is Paris."
    assert joined.token_ids == (0, 1, 2, 3) and joined.first_index == 0
    assert len(joined.latencies_s) == 4


def test_a_stop_string_across_tokens_ends_the_answer_before_it() -> None:
    host = EngineHost()
    deltas = ["Paris.", "\nUs", "er: and", " more"]
    host.engine = _FakeEngine(_FakeGeneration(deltas, ""))  # type: ignore[assignment]
    options = GenerationOptions(GREEDY_LONG, Mode.NAIVE, stops=("\nUser:",))
    out = drive(window_job(host, (Message("user", "Capital?"),), options), request_id=3)
    assert out.error is None
    tokens = [i for i in out.items if isinstance(i, TokenItem)]
    assert "".join(t.text for t in tokens) == out.result.text == "Paris."
    # Every token generated keeps its id, the held ones too: the figures count them all.
    assert [t.token_id for t in tokens] == [0, 1, 2]
    assert out.result.figures.finish_reason == STOP_STRING
    assert out.result.stats.finish_reason == "eos"  # the backend's own: not patched


def test_a_snapshot_copies_the_running_figures() -> None:
    host = EngineHost()
    host.engine = _FakeEngine(_FakeGeneration(["a", "b"], ""))  # type: ignore[assignment]
    snapshots: list[StatsSnapshot] = []
    job = ask(host)
    # Snapshot at every token, as a flush would.
    from chatapp.session.jobs import JobControl

    control = JobControl(9, lambda: False, lambda _item: None, lambda: None)
    gen = job.run(control)
    for item in gen:
        if isinstance(item, TokenItem) and control.snapshot is not None:
            snapshots.append(control.snapshot())
    assert [s.figures.generated_tokens for s in snapshots] == [1, 2]
    assert all(s.request_id == 9 for s in snapshots)


def test_measuring_the_context_needs_a_model(host: EngineHost) -> None:
    chat = (Message("user", "hi"), Message("assistant", "hello"))
    request = measured_request(chat, opts(SamplingSettings(max_new_tokens=64)))
    assert drive(measure_context_job(EngineHost(), request)).result is None
    report = drive(measure_context_job(host, request), request_id=4).result
    assert report.request_id == 4 and report.message_count == 2 and report.fits


def test_a_json_answer_follows_the_schema_and_a_bad_one_is_one_sentence(
    host: EngineHost,
) -> None:
    pytest.importorskip("llguidance", reason="JSON answers need llguidance")
    import json

    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    out = drive(ask(host, options=opts(json_schema=json.dumps(schema))))
    assert out.message is None and isinstance(json.loads(out.result.text)["ok"], bool)
    anything = drive(ask(host, options=opts(json_schema="")))  # any JSON object
    assert anything.message is None and anything.result.text.startswith("{")
    hostile = (
        ("{nope", "not valid JSON"),
        ('{"type": "objectx"}', "objectx"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # was an uncaught RecursionError
        ('{"$ref": "#"}', "loop"),
        ('{"enum": []}', "cannot be used"),
    )
    for text, words in hostile:
        bad = drive(ask(host, options=opts(json_schema=text)))
        assert bad.message is not None and words in bad.message and "\n" not in bad.message


def test_a_device_s_first_answer_warms_it_up_first(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.engine import model_context as engine_module
    from chatapp.engine.warm_up import STEPS, WarmUpProgress

    # As on a device that compiles programs (the CPU needs none).
    monkeypatch.setattr(engine_module, "needs_warm_up", lambda loop: not loop.warmed_up)
    fresh = EngineHost()
    fresh.engine = Engine(tiny_model_dir, threads=1)
    short = SamplingSettings(temperature=0.0, max_new_tokens=4)
    out = drive(ask(fresh, options=opts(short)))
    warm = [i for i in out.items if isinstance(i, WarmUpProgress)]
    assert [p.done for p in warm] == list(range(STEPS + 1))
    kinds = [type(i).__name__ for i in out.items]
    assert kinds.index("TokenItem") > kinds.index("WarmUpProgress")  # before the answer
    assert out.result.stats.reused_tokens == 0
    again = drive(ask(fresh, "again", opts(short)))
    assert not any(isinstance(i, WarmUpProgress) for i in again.items)


def test_stop_during_the_warm_up_gives_the_question_back(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.engine import model_context as engine_module

    monkeypatch.setattr(engine_module, "needs_warm_up", lambda loop: not loop.warmed_up)
    fresh = EngineHost()
    fresh.engine = Engine(tiny_model_dir, threads=1)
    out = drive(ask(fresh), stopped=True)
    assert out.error is not None and "being prepared" in (out.message or "")
    assert not any(isinstance(i, TokenItem) for i in out.items)
    assert fresh.engine.needs_warm_up("iobinding")  # not warmed: the next answer does it


def test_a_tool_call_comes_back_structured_and_shows_as_a_block(host: EngineHost) -> None:
    pytest.importorskip("llguidance", reason="tool calls need llguidance")
    import json

    from chatapp.engine.structured.tool_calls import Tool, with_calls

    pick = Tool(
        "pick",
        "Pick a colour",
        {
            "type": "object",
            "properties": {"colour": {"enum": ["red", "blue"]}},
            "required": ["colour"],
            "additionalProperties": False,
        },
    )
    asked = opts(tools=(pick,), tool_choice="required")
    out = drive(ask(host, options=asked))
    assert out.message is None, out.message
    # The grammar makes the tiny model's answer a call: kept structured (no text), and shown
    # as its name, then a JSON block.
    (call,) = out.result.tool_calls
    assert out.result.text == "" and call.name == "pick"
    assert json.loads(call.arguments)["colour"] in ("red", "blue")
    heading, _, block = with_calls("", (call,)).partition("**Tool call: pick**\n\n```json\n")
    assert heading == "" and block.endswith("\n```")
    assert json.loads(block.removesuffix("\n```")) == json.loads(call.arguments)
    assert out.result.figures.finish_reason == "tool_calls"  # notes tell a call apart
    streamed = [i for i in out.items if isinstance(i, TokenItem) and i.token_id is not None]
    assert len(streamed) == out.result.stats.generated_tokens  # the call's tokens counted
    wrong = drive(ask(host, options=replace(asked, tool_choice="get_time")))
    assert wrong.message is not None and "not among the tools" in wrong.message


def test_the_context_count_includes_the_tools_the_next_answer_is_given(host: EngineHost) -> None:
    """The tools' definitions are part of the prompt: "Context used" counts them, as the answer
    that follows sends them (the same count as the prompt the engine builds)."""
    from chatapp.engine.structured.tool_calls import Tool, ToolPlan
    from chatapp.session.tool_specs import choice_by_word

    pick = Tool("pick", "Pick a colour", {"type": "object", "properties": {"c": {"enum": ["r"]}}})
    messages = (Message("user", "hi"), Message("assistant", "hello"))
    options = opts(SamplingSettings(max_new_tokens=64))
    plain = drive(measure_context_job(host, measured_request(messages, options))).result
    choice = choice_by_word("required", (pick,))
    with_tools = replace(options, tools=(pick,), tool_choice="required")
    counted = drive(measure_context_job(host, measured_request(messages, with_tools))).result
    # A choice naming no tool counts as no tools (the answer says why), and the JSON answer
    # adds no prompt text.
    wrong = replace(with_tools, tool_choice="get_time", json_schema="{nope")
    counted_wrong = drive(measure_context_job(host, measured_request(messages, wrong))).result
    assert (counted_wrong.prompt_tokens, counted_wrong.turns) == (plain.prompt_tokens, plain.turns)
    tokenizer = host.engine.tokenizer
    plan = ToolPlan((pick,), choice, tokenizer.template_source, tokenizer.supports_tools)
    sent = tokenizer.chat_ids(plan.messages(list(messages)), None, plan.template_tools())
    assert counted.prompt_tokens == len(sent) > plain.prompt_tokens
    # The tools are the prompt's shared part, not the first question's.
    assert counted.message_tokens(0) == plain.message_tokens(0)
    assert counted.overhead_tokens > plain.overhead_tokens
