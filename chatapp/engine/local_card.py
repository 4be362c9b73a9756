"""The `BackendCard` of a model run here (`Engine.card()`): everything is measured on this
machine, so every figure of an answer is reported; host↔device bytes are 0 where the device
is the host."""

from __future__ import annotations

from chatapp.engine.backend import BackendCard, Capabilities, Fact, Measure
from chatapp.units import fmt_bytes

RUNS_HERE = "this machine"
MEASURES = (
    Measure("ttft", how="Request → first token: the prompt's prefill and the first sample"),
    Measure("tokens_per_second", how="Tokens after the first / their time, measured here"),
    Measure("perplexity", how="exp(-mean log-prob) of the answer's tokens, under the raw logits"),
    Measure("prompt_perplexity", how="exp(-mean log-prob) of the prompt's tokens"),
    Measure("transfer", how="Host↔device bytes of a decode step (median); 0 on the CPU"),
    Measure("context", how="The prompt's and the answer's tokens, of the context allocated"),
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
