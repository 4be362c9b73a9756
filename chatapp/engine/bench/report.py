"""A comparison in words and tables: where each loop's time goes, and the Markdown report."""

from __future__ import annotations

from typing import Any

from chatapp.engine.bench.sentences import NO_DIFFERENCE, comparison_sentences, sweep_sentences
from chatapp.engine.bench.summary import (
    MIN_FOR_QUARTILES,
    Ratio,
    per_token_ms,
    summarize_comparison,
    summarize_sweep,
)
from chatapp.engine.guards import PRECISION_LABELS
from chatapp.engine.modes import CACHED_MODES, MODES, Mode
from chatapp.units import fmt_bytes

LOOP_LABELS = {m: m.label for m in MODES} | {"genai": "onnxruntime-genai", "llamacpp": "llama.cpp"}
PEERS = ("genai", "llamacpp")


def weight_bytes_per_step(result: dict[str, Any], system: str) -> int | None:
    """The weight bytes one decode step of `system` reads: the folder's for both loops and
    onnxruntime-genai (they run it), the GGUF's own blocks for llama.cpp."""
    if system == "llamacpp":
        peer = (result.get("peers") or {}).get("llamacpp") or {}
        return peer.get("weight_bytes_per_step")
    return result.get("weight_bytes_per_step")


def _per_token(summary: dict[str, Any]) -> tuple[float, float, float, float]:
    """(run ms, host ms, sample ms, bytes crossing) of a decode step."""
    transfer = summary.get("transfer") or {}
    crossing = transfer.get("h2d_bytes_per_token", 0) + transfer.get("d2h_bytes_per_token", 0)
    return (
        summary["run_s_per_token"] * 1000,
        summary["host_s_per_token"] * 1000,
        summary["sample_s_per_token"] * 1000,
        crossing,
    )


def where_time_goes(result: dict[str, Any], ratio: Ratio | None = None) -> str:
    """One or two sentences on where each loop's time goes on this device (run/host/transfer);
    a saving is claimed only where `ratio` (the time per token's, bench.summary's rule) calls
    IO-Binding faster."""
    n_run, n_host, _n_sample, n_bytes = _per_token(result[Mode.NAIVE])
    i_run, i_host, _i_sample, i_bytes = _per_token(result[Mode.IOBINDING])
    device = result.get("device_label") or result.get("device", "this device")
    context = result.get("prompt_tokens", 0)
    # The answer's context grows as it is written: a step's copy is as long as its own.
    span = f"over an answer from {context} to {context + result.get('max_new_tokens', 0)} tokens"
    if not result.get("device_own_memory"):
        text = (
            f"On the {device} the model's memory is the host's, so neither loop moves anything "
            "across a bus (0 bytes per token). The naive loop's graph copies the whole KV cache "
            "into a new present tensor every step (as long as the context); IO-Binding's does "
            f"not. Mean run time {n_run:.1f} vs {i_run:.1f} ms per token {span} of context"
        )
        if ratio is not None and ratio.measurable and ratio.value > 1:
            return f"{text}: the time IO-Binding saves is inside the run."
        verdict = NO_DIFFERENCE if ratio is None or not ratio.measurable else "IO-Binding slower"
        return f"{text}; the time per token above shows {verdict}, so no saving is claimed."
    return (
        f"On {device} the naive loop moves every layer's KV cache to the host and back: "
        f"{fmt_bytes(n_bytes)} per token (median {span} of context), inside its "
        f"{n_run:.1f} ms run (+{n_host:.1f} ms on the host). IO-Binding keeps the KV on the "
        f"device and moves only the token, the mask and the logits ({fmt_bytes(i_bytes)}): "
        f"{i_run:.1f} ms run, {i_host:.1f} ms host."
    )


def brackets(repeats: int) -> str:
    """What the report's brackets are, column by column (bench.summary's spreads)."""
    if repeats >= MIN_FOR_QUARTILES:
        per_token = "the interquartile range of the runs' medians"
    elif repeats >= 2:
        per_token = "the range (min–max) of the runs' medians"
    else:
        per_token = "the interquartile range of its tokens' step times"
    runs = "min–max over the runs" if repeats >= 2 else "none (one run)"
    return f"in brackets: time per token, {per_token}; tokens/s and TTFT, {runs}"


def _spread(summary: dict[str, Any], key: str, scale: float, fmt: str) -> str:
    low, high = (summary.get("spread") or {}).get(key, (None, None))
    if low is None or summary.get("repeats", 1) < 2:
        return ""
    return f" ({fmt.format(low * scale)}–{fmt.format(high * scale)})"


def _prompt_speed(summary: dict[str, Any]) -> str:
    speed = summary.get("prompt_tokens_per_s")
    return f"{speed:.0f}" if speed else "n/a"


def _tokenizer_line(result: dict[str, Any]) -> list[str]:
    held = result.get("tokenizer_bytes")
    if not held:
        return []
    vocab = result.get("vocab_size")
    words = f" for {vocab:,} tokens" if vocab else ""
    return ["", f"The tokenizer holds {fmt_bytes(held)} of the process's memory{words}."]


def device_words(result: dict[str, Any]) -> str:
    """The device a result was measured on, with the GGUF kernels' precision where they ran
    ("cpu, fast 8-bit"; older results and other kernels name none)."""
    precision = PRECISION_LABELS.get(result.get("precision") or "")
    device = str(result.get("device", "this machine"))
    return f"{device}, {precision}" if precision else device


def markdown_report(result: dict[str, Any]) -> str:
    """The Markdown tables a person can paste into a report."""
    kernels = f" ({result['kernels']})" if result.get("kernels") else ""
    lines = [
        f"**{result['model']}** ({result['layout']}) on **{result['device']}**{kernels}, "
        f"prompt {result['prompt_tokens']} tokens, {result['max_new_tokens']} new tokens, "
        f"median of {result['repeats']} runs ({brackets(int(result['repeats']))})",
        *_tokenizer_line(result),
        "",
        "| loop | time per token (ms, median) | tokens/s (mean) | weights read / token "
        "| TTFT (ms) | prompt tokens/s | p95 time per token (ms) | host prep share "
        "| host→device / token | device→host / token |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines[0] += (
        "; time per token: the median of each run's median step (a median is what every ratio "
        "and sentence below uses)"
    )
    lines += []
    rows = [(m, LOOP_LABELS[m], result[m]) for m in LOOP_LABELS if m in result]
    for system, label, r in rows:
        weights = weight_bytes_per_step(result, system)
        share = r.get("host_prep_share")
        transfer = r.get("transfer")
        moved = (
            f"{fmt_bytes(transfer['h2d_bytes_per_token'])} | "
            f"{fmt_bytes(transfer['d2h_bytes_per_token'])} |"
            if transfer
            else "n/a | n/a |"
        )
        per_token = (
            per_token_ms(r).text("") if "first_run" in r else f"{r['latency_p50_s'] * 1000:.1f}"
        )
        lines.append(
            f"| {label} | {per_token} | "
            f"{r['tokens_per_s']:.1f}{_spread(r, 'tokens_per_s', 1, '{:.1f}')} | "
            f"{fmt_bytes(weights) if weights is not None else 'n/a'} | "
            f"{r['ttft_s'] * 1000:.0f}{_spread(r, 'ttft_s', 1000, '{:.0f}')} | "
            f"{_prompt_speed(r)} | "
            f"{r['latency_p95_s'] * 1000:.1f} | "
            + (f"{share * 100:.1f}% | " if share is not None else "n/a | ")
            + moved
        )
    lines += ["", *_loop_ratios(result)]
    summary = None
    if all("first_run" in result[m] for m in MODES if m in result):
        summary = summarize_comparison(result)
        lines += ["", *comparison_sentences(summary)]
    for peer in (p for p in PEERS if p in result):
        lines.append(
            f"IO-Binding / {LOOP_LABELS[peer]}: **{result[f'iobinding_vs_{peer}']:.2f}x** "
            "tokens/s (median of the repeats' ratios, each run beside the other)"
            + (
                f", {result[f'iobinding_ttft_vs_{peer}']:.2f}x its time to first token"
                if f"iobinding_ttft_vs_{peer}" in result
                else ""
            )
            + f"; same tokens: {'yes' if result.get(f'{peer}_same_tokens') else 'NO'}"
        )
    cached = all(m in result for m in CACHED_MODES)
    if cached and "run_s_per_token" in result[Mode.NAIVE]:
        lines += ["", where_time_goes(result, summary.io_vs_naive if summary else None)]
    lines += conditions(result)
    lines += _floor_table(result.get("floor"))
    sweep = result.get("sweep", [])
    if sweep:
        lines += _sweep_table(sweep)
        lines += ["", *sweep_sentences(summarize_sweep(sweep))]
    return "\n".join(lines)


def _loop_ratios(result: dict[str, Any]) -> list[str]:
    """Whether the loops wrote the same tokens (their ratios are the sentences below)."""
    return [f"Same tokens in every loop: {'yes' if result['same_tokens'] else 'NO'}."]


def _sweep_table(sweep: list[dict[str, Any]]) -> list[str]:
    # A sweep may leave no cache out of its longer contexts: cells say "–" there.
    modes = [m for m in MODES if any(m in point for point in sweep)]
    ratios = summarize_sweep(sweep).ratios
    ratio = len(ratios) == len(sweep)
    head = ["context (tokens)", *[f"{m.label} ms per token (median)" for m in modes]]
    head += ["Naive / IO-Binding time"] if ratio else []
    head += [f"{m.label} host↔device / token" for m in modes]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for index, point in enumerate(sweep):
        typed = point.get("context_tokens", point["prompt_tokens"])
        cells = [
            f"{point['prompt_tokens']}"
            + ("" if typed == point["prompt_tokens"] else f" ({typed} typed)")
        ]
        cells += [per_token_ms(point[m]).text("") if m in point else "–" for m in modes]
        if ratio:
            r = ratios[index][1]
            cells.append(f"{r.numerator:.1f} / {r.denominator:.1f} = {r.value:.2f}x")
        cells += [fmt_bytes(_per_token(point[m])[3]) if m in point else "–" for m in modes]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def conditions(result: dict[str, Any]) -> list[str]:
    """The machine's load and the peers' settings: what a reader needs to trust the ratios."""
    lines = []
    load = result.get("load_average") or {}
    if load.get("before"):
        cores = f" on {load['cores']} cores" if load.get("cores") else ""
        threads = result.get("threads")
        per_system = (
            f"{threads} thread{'' if threads == 1 else 's'} per system"
            if threads
            else "one thread per CPU for each system"
        )
        lines.append(
            f"Load average (1, 5, 15 min): {', '.join(map(str, load['before']))} before, "
            f"{', '.join(map(str, load.get('after') or []))} after{cores}, {per_system}."
        )
    others = load.get("others_cores") or {}
    if others.get("before") is not None or others.get("during") is not None:
        lines.append(
            f"Other work: {others.get('before', '?')} cores before the run, "
            f"{others.get('during', '?')} during it (the machine's busy time less this run's)."
        )
    if load.get("busy_warning"):
        lines.append(f"**{load['busy_warning']}**")
    llama = (result.get("peers") or {}).get("llamacpp")
    if llama:
        busy = (
            " On a busy machine its spinning OpenMP threads lose the most "
            "(OMP_WAIT_POLICY=PASSIVE suits one)."
            if load.get("busy_warning")
            else ""
        )
        lines.append(
            f"llama.cpp {llama['version']}: flash attention, f16 KV cache, "
            f"OpenMP wait policy: {llama['omp_wait_policy']}.{busy}"
        )
    ours, theirs = (
        weight_bytes_per_step(result, Mode.IOBINDING),
        weight_bytes_per_step(result, "llamacpp"),
    )
    if ours and theirs:
        lines.append(
            f"Weights read per token: {fmt_bytes(ours)} from the folder, {fmt_bytes(theirs)} "
            f"from the GGUF ({ours / theirs:.2f}x): a decode step is bound by memory "
            "bandwidth, so tokens/s follow these bytes."
        )
    return ["", *lines] if lines else []


def _floor_table(floor: dict[str, Any] | None) -> list[str]:
    if not floor:
        return []
    lines = [
        "",
        f"Physical floor: this machine reads {floor['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s "
        f"on {floor['threads']} threads; a decode step at {floor['context_tokens']} tokens must "
        "read every weight once and the whole KV cache.",
        "",
        "| system | bytes read per token | ceiling (tok/s) | measured (tok/s) | share |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in floor["systems"].items():
        total = row["weight_bytes_per_step"] + row["kv_bytes_per_step"]
        lines.append(
            f"| {LOOP_LABELS.get(name, name)} | {fmt_bytes(total)} | "
            f"{row['ceiling_tokens_per_s']:.0f} | {row['tokens_per_s']:.1f} | "
            f"{row['share_of_ceiling'] * 100:.0f}% |"
        )
    return lines
