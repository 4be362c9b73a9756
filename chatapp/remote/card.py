"""A server's `BackendCard`: what a client measures of its answers, and why not the rest.

Time to first token, tokens/s, the latency series and perplexity (when the server sends
log-probs) are measured here as tokens arrive. What only the server can know (the loop, the
device and its threads, host↔device bytes, prompt perplexity) has its reason on the card,
so the window says why rather than showing 0. A chatapp server sends its own figures of each
answer (`own_figures`).
"""

from __future__ import annotations

from collections.abc import Mapping

from chatapp.engine.backend import BackendCard, Capabilities, Fact, Measure

SERVER_CAPABILITIES = Capabilities(
    counts_tokens=False,
    constrains_output=False,
    continues_answers=False,
    chooses_loop=False,
    calls_tools=False,
)
LOOP_ABSENT = (
    "The server runs its own loop on its own device and threads: not chosen or seen from here."
)
NOT_REPORTED = "not reported by this server"
MEASURES = (
    Measure(
        "ttft",
        how="Request sent → first token received: network, the server's queue, its prefill",
    ),
    Measure(
        "tokens_per_second",
        how="Tokens after the first / the time they took to arrive, measured here",
    ),
    Measure("perplexity", missing="The server sent no log-probs, so perplexity is not available."),
    Measure(
        "prompt_perplexity",
        absent=(
            "Not available from a remote server: it needs the log-probs of the prompt, which "
            "the OpenAI API does not return."
        ),
    ),
    Measure(
        "transfer",
        absent=(
            "Not available from a remote server: host↔device bytes are counted inside the "
            "engine, on the server."
        ),
    ),
    Measure(
        "context",
        missing="The server sent no token counts (usage), so the context used is not known.",
    ),
)


def server_card(
    model: str,
    origin: str,
    context: int,
    own_figures: bool,
    notice: str | None,
    described: Mapping[str, str] | None = None,
) -> BackendCard:
    """`context`: 0 where the server does not say; `own_figures`: a chatapp server's;
    `described`: the facts its own card gives (/v1/models: a chatapp server's engine)."""
    told = dict(described or {})
    own = "the server's own, reported with each answer" if own_figures else NOT_REPORTED

    def fact(label: str, absent: str) -> Fact:
        return Fact(label, told.get(label), "" if label in told else absent)

    return BackendCard(
        name=model,
        runs_on=f"the server {origin}",
        server=origin,
        max_context=context,
        capabilities=SERVER_CAPABILITIES,
        facts=(
            Fact("Server", origin),
            fact("Device", own),
            fact("Loop", LOOP_ABSENT),
            fact("Threads", own),
            fact("KV bytes per token", NOT_REPORTED),
            Fact("Context", str(context) if context else None, NOT_REPORTED),
        ),
        measures=MEASURES,
        own_figures=own_figures,
        notice=notice,
    )
