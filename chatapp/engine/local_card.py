"""The `BackendCard` of a model run here (`Engine.card()`): everything is measured on this
machine, so every figure of an answer is reported; host↔device bytes are 0 where the device
is the host."""

from __future__ import annotations

from chatapp.engine.backend import BackendCard, Capabilities, Fact, Measure
from chatapp.units import fmt_bytes

RUNS_HERE = "this machine"
# Every figure is measured here, and the window's own words explain each (its tooltips
# follow the loop and the device), so no `how` overrides them.
MEASURES = tuple(
    Measure(key)
    for key in (
        "ttft",
        "tokens_per_second",
        "perplexity",
        "prompt_perplexity",
        "transfer",
        "context",
    )
)


def local_card(
    name: str,
    device: str,
    loop: str,
    threads: int | None,
    kv_bytes_per_token: int,
    kernels: str,
    precision: str | None,
    max_context: int,
    capabilities: Capabilities,
) -> BackendCard:
    """`device` and `loop` as people read them; `precision`: None where no GGUF kernels run."""
    kv = kv_bytes_per_token
    return BackendCard(
        name=name,
        runs_on=RUNS_HERE,
        server=None,
        max_context=max_context,
        capabilities=capabilities,
        facts=(
            Fact("Device", device),
            Fact("Loop", loop),
            Fact("Threads", str(threads) if threads else "ONNX Runtime's default"),
            Fact("KV bytes per token", fmt_bytes(kv) if kv else None, "no KV cache in the graph"),
            Fact("Kernels", kernels),
            Fact("Precision", precision, "no GGUF kernels run this graph"),
            Fact("Context", str(max_context)),
        ),
        measures=MEASURES,
    )
