"""`chatapp bench --speculative`: plain decoding against speculative decoding on the same
prompts (chatapp/resources/speculative_prompts.json), greedy, interleaved.

Each repeat runs every prompt plain and speculative, the order alternating between repeats,
each from an empty KV cache; the figure is decode tokens/s (the first token excluded, as the
side panel counts it), and the ratio is the median of the per-repeat ratios. Both runs of a
prompt must give the same tokens: a verifying run computes the rows a one-token step would.
The planner keeps what it learnt between prompts, as it does between the answers of a chat.

With `--peer llamacpp`, llama.cpp's plain decode (its own process, llamacpp_peer.py) answers
each prompt too, beside ours in every repeat on the same ids, the three in an order that
rotates between repeats; it is asked for as many tokens as our plain answer gave, and its
decode tokens/s are counted as ours (the first token excluded).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol

from chatapp.engine.bench.report import conditions
from chatapp.engine.bench.summary import SHOWN
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message

if TYPE_CHECKING:
    from chatapp.engine.bench.peers import PeerSettings
    from chatapp.engine.engine import Engine

PROMPTS_RESOURCE = "speculative_prompts.json"
KIND_LABELS = {"grounded": "Prompts that quote their own text", "open": "Open-ended prompts"}


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str  # grounded: the answer can quote the prompt; open: open-ended chat
    chat: str
    continuation: str


def bench_prompts() -> list[BenchPrompt]:
    raw = resources.files("chatapp.resources").joinpath(PROMPTS_RESOURCE).read_text("utf-8")
    return [
        BenchPrompt(p["name"], p["kind"], p["chat"], p["continue"])
        for p in json.loads(raw)["prompts"]
    ]


@dataclass
class PromptResult:
    name: str
    kind: str
    plain_tps: list[float] = field(default_factory=list)
    speculative_tps: list[float] = field(default_factory=list)
    tokens: int = 0
    runs: int = 0  # the speculative answer's forward passes after the first token
    drafted: int = 0
    accepted: int = 0
    same_tokens: bool = True
    llamacpp_tps: list[float] = field(default_factory=list)  # llama.cpp's plain decode
    llamacpp_same_tokens: bool | None = None  # as our plain answer's (None: not run)

    @property
    def ratios(self) -> list[float]:
        """Per repeat: speculative / plain decode tokens/s."""
        return per_repeat(self.speculative_tps, self.plain_tps)

    @property
    def ratio(self) -> float:
        """Median over repeats of speculative / plain decode tokens/s."""
        return median_or_zero(self.ratios)

    @property
    def speculative_vs_llamacpp(self) -> list[float]:
        """Per repeat: our speculative / llama.cpp's plain decode tokens/s."""
        return per_repeat(self.speculative_tps, self.llamacpp_tps)

    @property
    def plain_vs_llamacpp(self) -> list[float]:
        """Per repeat: our plain / llama.cpp's plain decode tokens/s."""
        return per_repeat(self.plain_tps, self.llamacpp_tps)

    @property
    def tokens_per_run(self) -> float:
        return (self.tokens - 1) / self.runs if self.runs else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "ratio": self.ratio, "tokens_per_run": self.tokens_per_run}
        if self.llamacpp_tps:
            data["speculative_vs_llamacpp"] = median_or_zero(self.speculative_vs_llamacpp)
            data["plain_vs_llamacpp"] = median_or_zero(self.plain_vs_llamacpp)
        return data


def per_repeat(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """The ratios of the repeats both sides measured (a zero figure has none)."""
    return [a / b for a, b in zip(numerators, denominators, strict=False) if b]


def median_or_zero(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def prompt_medians(
    results: list[PromptResult], ratios: Callable[[PromptResult], list[float]]
) -> list[float]:
    """Each prompt's median ratio, of the prompts that measured one."""
    return [statistics.median(r) for r in map(ratios, results) if r]


@dataclass(frozen=True)
class SpeculativeBench:
    model: str
    precision: str | None
    refusal: str | None
    repeats: int
    results: list[PromptResult]
    # llama.cpp's settings (peers.py describe()), where it ran beside ours
    llamacpp: dict[str, Any] | None = None
    # The machine's load (run.LoadStart.record) and the threads each system ran on
    load_average: dict[str, Any] | None = None
    threads: int | None = None

    def median_ratio(self, kind: str) -> float:
        return median_or_zero([r.ratio for r in self.results if r.kind == kind])

    def to_dict(self) -> dict[str, Any]:
        data = {
            "model": self.model,
            "precision": self.precision,
            "refusal": self.refusal,
            "repeats": self.repeats,
            "threads": self.threads,
            "load_average": self.load_average,
            "grounded_ratio": self.median_ratio("grounded"),
            "open_ratio": self.median_ratio("open"),
            "prompts": [r.to_dict() for r in self.results],
        }
        if self.llamacpp is not None:
            data["llamacpp"] = self.llamacpp
            kinds = dict.fromkeys(r.kind for r in self.results)
            data["vs_llamacpp"] = {  # per kind: the median of its prompts' median ratios
                kind: {
                    "speculative": median_or_zero(
                        prompt_medians(self.of_kind(kind), lambda r: r.speculative_vs_llamacpp)
                    ),
                    "plain": median_or_zero(
                        prompt_medians(self.of_kind(kind), lambda r: r.plain_vs_llamacpp)
                    ),
                }
                for kind in kinds
            }
        return data

    def of_kind(self, kind: str) -> list[PromptResult]:
        return [r for r in self.results if r.kind == kind]


def prompt_ids(engine: Engine, prompt: BenchPrompt) -> list[int]:
    """The chat form through the template; a model without one continues the text form."""
    tok = engine.tokenizer
    if tok.has_template:
        return tok.chat_ids([Message("user", prompt.chat)], engine.max_context)
    return tok.with_bos(tok.encode_text(prompt.continuation))


def answer_once(
    engine: Engine,
    ids: list[int],
    settings: SamplingSettings,
    drafts: bool,
    should_stop: Callable[[], bool] | None = None,
) -> RunStats:
    """One greedy answer from an empty KV cache, plain or with drafting; the engine's own
    choice (the window's) is left as it was."""
    chosen, engine.speculative = engine.speculative, drafts
    engine.reset()
    try:
        return engine.generate_ids(ids, settings, should_stop=should_stop).run()
    finally:
        engine.speculative = chosen


class PlainPeer(Protocol):
    """Another system's plain greedy decode: exactly n tokens on a cold cache (llama.cpp)."""

    def run(self, ids: list[int], n: int) -> RunStats: ...


@dataclass(frozen=True)
class SpeculativeRun:
    """One answer of the interleaved runs: which prompt and repeat, plain or drafted, ours or
    llama.cpp's (its plain decode)."""

    prompt: int  # index into the prompts
    repeat: int
    drafts: bool
    stats: RunStats
    peer: bool = False


def speculative_runs(
    engine: Engine,
    prompts: list[list[int]],
    new_tokens: int,
    repeats: int,
    should_stop: Callable[[], bool] | None = None,
    peer: PlainPeer | None = None,
) -> Iterator[SpeculativeRun]:
    """Every prompt plain and speculative in each repeat (and the peer's plain decode, given
    one), the order rotating between repeats: plain, speculative (, peer); then speculative,
    (peer,) plain; ... so each system leads in turn. First one drafted answer the planner times
    its runs with, and a short answer of the peer (neither yielded). The peer is asked for as
    many tokens as our plain answer to the prompt gave (plain leads the first repeat)."""
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=new_tokens)
    answer_once(engine, prompts[0], settings, True, should_stop)
    if peer is not None:
        peer.run(prompts[0], min(8, new_tokens))
    systems = ["plain", "speculative", *(["peer"] if peer is not None else [])]
    lengths: dict[int, int] = {}  # our plain answer's tokens, by prompt
    for repeat in range(repeats):
        shift = repeat % len(systems)
        order = systems[shift:] + systems[:shift]
        for index, ids in enumerate(prompts):
            for system in order:
                if peer is not None and system == "peer":
                    stats = peer.run(ids, max(1, lengths[index]))
                    yield SpeculativeRun(index, repeat, False, stats, peer=True)
                    continue
                drafts = system == "speculative"
                stats = answer_once(engine, ids, settings, drafts, should_stop)
                if not drafts:
                    lengths.setdefault(index, stats.generated_tokens)
                yield SpeculativeRun(index, repeat, drafts, stats)


def add_run(result: PromptResult, run: SpeculativeRun, plain: list[int] | None) -> list[int]:
    """Fold one of our runs into its prompt's result; returns the tokens to compare with."""
    stats = run.stats
    if not run.drafts:
        result.plain_tps.append(stats.tokens_per_s)
    else:
        result.speculative_tps.append(stats.tokens_per_s)
        result.tokens = stats.generated_tokens
        result.runs, result.drafted = stats.runs, stats.drafted_tokens
        result.accepted = stats.accepted_tokens
    if plain is None:
        return stats.token_ids
    result.same_tokens &= plain == stats.token_ids
    return plain


def add_llamacpp_run(result: PromptResult, stats: RunStats, plain: list[int]) -> None:
    """Fold one of llama.cpp's runs in: its tokens/s, and whether its tokens were our plain
    answer's (other arithmetic may pick another token at a near tie: told, not a failure)."""
    result.llamacpp_tps.append(stats.tokens_per_s)
    same = stats.token_ids[: len(plain)] == plain
    before = result.llamacpp_same_tokens
    result.llamacpp_same_tokens = same if before is None else before and same


def measure_speculative(
    engine: Engine,
    new_tokens: int,
    repeats: int,
    prompts: list[BenchPrompt] | None = None,
    peer: PeerSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> SpeculativeBench:
    """The prompts' interleaved runs; with `peer` naming llamacpp, llama.cpp's beside them."""
    from chatapp.engine.bench.peers import PeerSettings, open_peers
    from chatapp.engine.bench.run import LoadStart

    report = progress or (lambda _m: None)
    if peer is not None and set(peer.names) - {"llamacpp"}:
        raise EngineError("Speculative decoding is compared with llama.cpp only (--peer llamacpp).")
    start = LoadStart.now()
    warning = start.early_warning(engine.threads)
    if warning:
        report(warning)
    prompts = prompts or bench_prompts()
    results = [PromptResult(p.name, p.kind) for p in prompts]
    encoded = [prompt_ids(engine, p) for p in prompts]
    n_ctx = max(len(ids) for ids in encoded) + new_tokens + 8
    firsts: dict[tuple[int, int], list[int]] = {}
    plain: dict[int, list[int]] = {}
    refusal = engine.speculation_refusal()  # then only the refusal is told: no llama.cpp
    settings = peer if peer is not None and not refusal else PeerSettings((), engine.threads)
    with open_peers(settings, engine, n_ctx, report) as peers:
        llama = peers[0] if peers else None
        for run in speculative_runs(engine, encoded, new_tokens, repeats, peer=llama):
            result = results[run.prompt]
            if run.peer:
                add_llamacpp_run(result, run.stats, plain[run.prompt])
            else:
                if not run.drafts:
                    plain.setdefault(run.prompt, run.stats.token_ids)
                key = (run.prompt, run.repeat)
                firsts[key] = add_run(result, run, firsts.get(key))
            _progress(report, result, run.repeat, repeats, llama is not None)
        described = llama.describe() if llama is not None else None
    return SpeculativeBench(
        engine.info.name,
        engine.precision_in_effect,
        refusal,
        repeats,
        results,
        llamacpp=described,
        load_average=start.record(engine.threads),
        threads=engine.threads,
    )


def _progress(
    report: Callable[[str], None], result: PromptResult, repeat: int, repeats: int, peer: bool
) -> None:
    """A line when every system has answered the prompt in this repeat."""
    figures = [result.plain_tps, result.speculative_tps, *([result.llamacpp_tps] if peer else [])]
    if any(len(f) != repeat + 1 for f in figures):
        return
    said = f"plain {figures[0][-1]:.1f}, speculative {figures[1][-1]:.1f}"
    said += f", llama.cpp {figures[2][-1]:.1f}" if peer else ""
    report(f"  repeat {repeat + 1}/{repeats}, {result.name}: {said} tok/s")


def speculative_lines(bench: SpeculativeBench) -> list[str]:
    """The table and the sentences, each true of the numbers beside it."""
    if bench.refusal:
        return [f"Speculative decoding does not run on {bench.model}: {bench.refusal}."]
    llama = bench.llamacpp is not None
    systems = "plain and speculative decoding" + (" and llama.cpp's plain decode" if llama else "")
    lines = [
        f"{bench.model}, greedy, {bench.repeats} interleaved repeats of {systems}, the order "
        "rotating (decode tokens/s, medians; ratio: median of the per-repeat ratios)",
        *_conditions(bench),
        f"{'prompt':40} {'kind':8} {'plain':>7} {'spec.':>7} {'ratio':>6} "
        f"{'tok/run':>7} {'kept':>9} same"
        + (f" {'llama':>7} {'spec/ll':>7} {'plain/ll':>8}" if llama else ""),
    ]
    for r in bench.results:
        kept = f"{r.accepted}/{r.drafted}"
        line = (
            f"{r.name[:40]:40} {r.kind:8} {median_or_zero(r.plain_tps):7.1f} "
            f"{median_or_zero(r.speculative_tps):7.1f} {r.ratio:5.2f}x "
            f"{r.tokens_per_run:7.2f} {kept:>9} {'yes ' if r.same_tokens else 'NO  '}"
        )
        if llama:
            line += (
                f" {median_or_zero(r.llamacpp_tps):7.1f}"
                f" {median_or_zero(r.speculative_vs_llamacpp):6.2f}x"
                f" {median_or_zero(r.plain_vs_llamacpp):7.2f}x"
            )
        lines.append(line.rstrip())
    for kind in dict.fromkeys(r.kind for r in bench.results):
        of_kind = bench.of_kind(kind)
        label = KIND_LABELS.get(kind, "This prompt" if len(of_kind) == 1 else "These prompts")
        lines.append(f"{label}: {_verdict(of_kind, PLAIN)}")
        if llama:
            lines.append(
                f"{label}, against llama.cpp: {_verdict(of_kind, SPECULATIVE_VS_LLAMA)[:-1]}; "
                f"{_verdict(of_kind, PLAIN_VS_LLAMA)}"
            )
    if not all(r.same_tokens for r in bench.results):
        lines.append("Some answers differed from the plain decode's: that is a bug.")
    if llama:
        lines.append(_llama_tokens(bench.results))
    return lines


def _conditions(bench: SpeculativeBench) -> list[str]:
    """The load, the busy warning and llama.cpp's settings, as the loops' report says them."""
    result: dict[str, Any] = {"threads": bench.threads, "load_average": bench.load_average}
    if bench.llamacpp is not None:
        result["peers"] = {"llamacpp": bench.llamacpp}
    # Plain text here: the report's bold (**...**) goes.
    return [line.strip("*") for line in conditions(result) if line]


def _llama_tokens(results: list[PromptResult]) -> str:
    same, count = sum(1 for r in results if r.llamacpp_same_tokens), len(results)
    told = f"all {count} prompts" if same == count > 1 else f"{same} of {count} prompt"
    told += "s" if count > 1 and same < count else ""
    if same == count:
        return f"llama.cpp gave our plain decode's tokens on {told}."
    return (
        f"llama.cpp gave our plain decode's tokens on {told}: its arithmetic differs "
        "from ours, so a near tie can go the other way and the answer goes on from there "
        "(its tokens/s still count the same number of tokens)."
    )


@dataclass(frozen=True)
class Comparison:
    """Which ratio a sentence is about, and the words for its two sides."""

    ratios: Callable[[PromptResult], list[float]]
    subject: str
    other: str  # whose tokens/s the ratio divides by


PLAIN = Comparison(lambda r: r.ratios, "speculative decoding", "the plain decode")
SPECULATIVE_VS_LLAMA = Comparison(
    lambda r: r.speculative_vs_llamacpp, "speculative decoding", "llama.cpp"
)
PLAIN_VS_LLAMA = Comparison(lambda r: r.plain_vs_llamacpp, "our plain decode", "llama.cpp")


def _verdict(results: list[PromptResult], comparison: Comparison) -> str:
    """A sentence about the prompts' median ratio with its range (one prompt: its repeats'):
    faster or slower only where every ratio is on that side of 1 (by more than a shown
    rounding)."""
    if len(results) == 1:
        ratios, whose = comparison.ratios(results[0]), "the repeats'"
    else:
        ratios, whose = prompt_medians(results, comparison.ratios), "the prompts'"
    subject = comparison.subject
    if not ratios:
        return "nothing was measured."
    low, high = min(ratios), max(ratios)
    median = statistics.median(ratios)
    spread = f"{whose} ratios {low:.2f}-{high:.2f}x" if len(ratios) > 1 else "one run"
    figure = f"{median:.2f}x {comparison.other}'s tokens/s ({spread})"
    if low > 1.0 + SHOWN:
        return f"{subject} was faster, {figure}."
    if high < 1.0 - SHOWN:
        return f"{subject} was slower, {figure}."
    if comparison is PLAIN:
        return f"no difference the runs can tell: {figure}."
    return f"no difference the runs can tell for {subject}: {figure}."
