"""The live panel's words: what each loop does, in plain words, and what an answer's
host↔device figure means on the device that ran it. No Qt.

Every number in these sentences comes from the model (its KV cache's bytes per token) and the
answer (its tokens in context, its measured transfers), never from this machine's speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.engine.figures import AnswerFigures
from chatapp.session import formatting as fmt
from chatapp.session.formatting import DEVICE_NAMES, REMOTE
from chatapp.units import fmt_bytes

# The toggle's tooltips: what each loop does, for someone who has not read the code.
LOOP_TIPS: dict[str, str] = {
    "nocache": (
        "No cache: the model forgets its work after every token and reads the whole "
        "conversation again for the next one, so each token is slower than the last. Shows "
        "what the KV cache saves."
    ),
    "naive": (
        "Naive: the model keeps its notes on the conversation so far (the KV cache), but hands "
        "them back to the program after every token and gets them again for the next. On a "
        "GPU that is a copy out of the GPU's memory and back, per token."
    ),
    "iobinding": (
        "IO-Binding: the KV cache stays where the model runs and is updated in place; only the "
        "new token and its scores travel. Faster on a GPU; about the same on the CPU."
    ),
}

CONTEXT_EXAMPLE = 1000  # tokens of context for the example before any answer


def device_name(device: str | None) -> str:
    if not device:
        return "unknown device"
    return DEVICE_NAMES.get(device, device)


def answer_caption(fig: AnswerFigures | None, writing: bool = False) -> str:
    """Whose figures the panel shows: "Last answer: IO-Binding · CPU", "remote · <model>"."""
    if fig is None:
        return "No answer yet"
    which = "This answer" if writing else "Last answer"
    if fig.mode == REMOTE or fig.device == REMOTE:
        return f"{which}: remote · {fig.model or 'server'}"
    parts = [fmt.mode_label(fig.mode) if fig.mode else "", device_name(fig.device)]
    return f"{which}: " + " · ".join(p for p in parts if p)


@dataclass(frozen=True)
class LoadedDevice:
    """What the panel knows of the model and device loaded now."""

    name: str = "cpu"
    label: str = "CPU"
    own_memory: bool = False
    kv_bytes_per_token: int = 0  # the model's KV cache, all layers, K and V (0: not known)
    model: str | None = None


def naive_bytes_per_token(kv_bytes_per_token: int, context_tokens: int) -> int:
    """What the naive loop sends between host and device per token on a device with memory
    of its own: the whole KV cache down to the host and back up (the token, mask and logits
    aside)."""
    return 2 * kv_bytes_per_token * max(0, context_tokens)


def transfer_note(
    fig: AnswerFigures | None, loaded: LoadedDevice, next_mode: str = "iobinding"
) -> str:
    """What the loop of the answer shown did and why its host↔device figure reads as it does,
    on its device; before any answer, what `next_mode` will do on the loaded device. One
    explanation per loop: No cache keeps no KV cache, and its note never speaks of one."""
    if fig is None:
        return _before_any_answer(loaded, next_mode)
    if fig.mode == REMOTE or fig.device == REMOTE:
        return "A server wrote this answer: its loop, device and transfers are its own."
    kv = loaded.kv_bytes_per_token if _same_model(fig, loaded) else 0
    read = fig.tokens_read
    on = fig.device or loaded.name
    label = device_name(on)  # the answer's own, whatever is loaded now
    moved = fmt_bytes(fig.transfer_bytes_per_token)
    if fig.mode == "nocache":
        return nocache_note(read, bool(fig.prompt_tokens), None if on == "cpu" else moved)
    if on == "cpu":
        return cpu_note(kv, read or CONTEXT_EXAMPLE, bool(read), fig.mode or "iobinding")
    naive = naive_bytes_per_token(kv, read)
    if fig.mode == "naive":
        return (
            f"On {label} the naive loop sent every layer's KV cache to the host and back for "
            f"each token: {moved} per token here. IO-Binding keeps it on the device and moves "
            "only the token, the mask and the scores."
        )
    if fig.mode == "iobinding":
        would = (
            f" The naive loop would move about {fmt_bytes(naive)} per token by the end of this "
            f"answer ({read} tokens in its KV cache)."
            if naive
            else ""
        )
        return (
            f"On {label} IO-Binding kept the KV cache on the device: only the token, the mask "
            f"and the scores crossed ({moved} per token).{would}"
        )
    return f"On {label} this loop moved {moved} per token."


def nocache_note(read: int, measured: bool = True, moved: str | None = None) -> str:
    """What No cache does: no KV cache at all, the whole conversation read for every token."""
    last = f" ({read} tokens for the last token of this answer)" if measured and read else ""
    crossed = f" It moved {moved} per token between host and device." if moved else ""
    return (
        "No cache keeps no notes between tokens (no KV cache): for every token it reads the "
        f"whole conversation again{last}, so each token takes longer than the last and the "
        "latency chart climbs. Naive and IO-Binding keep a KV cache and read only the new "
        f"token: compare them to see what the cache saves.{crossed}"
    )


def cpu_note(
    kv_bytes_per_token: int, context_tokens: int, measured: bool = True, mode: str = "iobinding"
) -> str:
    """What a cached loop did on the CPU, why Naive and IO-Binding are close there, and where
    IO-Binding matters."""
    moved = fmt_bytes(naive_bytes_per_token(kv_bytes_per_token, context_tokens))
    when = (
        f"by the end of this answer ({context_tokens} tokens in its KV cache)"
        if measured
        else f"with {context_tokens} tokens in its KV cache"
    )
    saved = f": for this model about {moved} per token {when}." if kv_bytes_per_token else "."
    if mode == "naive":
        return (
            "Naive keeps the KV cache but copies it out of the model and back in for every "
            "token. On the CPU that copy stays in the computer's memory, so Naive and "
            "IO-Binding come out close (a few percent either way is noise). On a GPU it would "
            f"cross to the host and back{saved}"
        )
    return (
        "IO-Binding keeps the KV cache where the model runs and updates it in place. On the "
        "CPU the KV cache stays in the computer's memory with either loop, so Naive comes out "
        "close (a few percent either way is noise). On a GPU, IO-Binding saves the naive "
        f"loop's round trip of the whole KV cache to the host{saved}"
    )


def prompt_note(fig: AnswerFigures | None) -> str:
    """Why a TTFT is short and the prompt's perplexity missing: the prompt came from the cache.
    Empty when there is nothing to say."""
    if fig is None or fig.mode == REMOTE or fig.device == REMOTE or not fig.prompt_tokens:
        return ""
    new, reused = fig.new_prompt_tokens, fig.reused_tokens or 0
    unscored = (
        " Too few new tokens to score the prompt's perplexity."
        if fig.prompt_perplexity is None
        else ""
    )
    if reused:
        plural = "token was" if new == 1 else "tokens were"
        # No TTFT is shown for an answer without a first token (millis: only above 0).
        short = ", so the TTFT is short" if fig.ttft_s is not None and fig.ttft_s > 0 else ""
        return (
            f"Prompt reused from the cache: only {new} new {plural} read ({reused} of "
            f"{fig.prompt_tokens} already in the cache from the previous answer){short}."
            f"{unscored}"
        )
    return unscored.strip()


def context_note(
    fig: AnswerFigures | None,
    used: int,
    writing: bool = False,
    dropped: int = 0,
    counted_for: str = "",
) -> str:
    """Why "Context used" differs from the answer's own count, when it does: after an answer it
    counts the conversation as the next question will send it (`dropped`: the oldest messages
    it leaves out; `counted_for`: the model that counted, never compared with another model's
    cache). Empty when they agree."""
    if fig is None or writing or fig.mode == REMOTE or fig.device == REMOTE or not used:
        return ""
    if counted_for and fig.model and fig.model != counted_for:
        return (
            f"{used}: the conversation as {counted_for} will read it for the next question; "
            f"the figures above are the last answer's, written by {fig.model}."
        )
    read = fig.tokens_read
    if not read or used == read:
        return ""
    had = (
        f"the {read} tokens in the last answer's KV cache"
        if fig.mode != "nocache"
        else f"the {read} tokens the last answer read for its last token"
    )
    if dropped:
        return (
            f"{used}: the conversation as the next question will send it, the oldest "
            f"{dropped} message{'s' if dropped != 1 else ''} left out (the last answer had "
            f"{read})."
        )
    if fig.finish_reason == "tool_calls":
        return (
            f"{used}: the conversation as the next question will send it, the tool call as "
            f"the chat shows it, not as the model wrote it ({had})."
        )
    if used < read:
        return (
            f"{used}: the conversation as the next question will send it, the last answer as "
            f"the chat keeps it: fewer tokens than {had}."
        )
    unread = (
        " and its last token, written but not yet read back"
        if fig.finish_reason != "eos" and fig.generated_tokens
        else ""
    )
    return (
        f"{used}: the conversation as the next question will send it, {had} plus the chat "
        f"template's marks around the turn{unread}."
    )


PERPLEXITY_TIP = (
    "How surprised the model was by the answer's tokens: 1 means it was certain of every one; "
    "10 means that on average it hesitated as if between 10 equally likely choices. Low means "
    "confident, not necessarily right. (The exponential of the mean negative log-likelihood.)"
)
PROMPT_PERPLEXITY_TIP = (
    "How surprised the model was by your prompt, measured the same way on a quarter (at most "
    "64) of its new tokens: high for unusual text, a language the model knows little, or a "
    "chat template that does not fit it."
)


def perplexity_meaning(value: float | None) -> str:
    """One sentence on a perplexity, for its tooltip; empty when unknown."""
    if value is None:
        return ""
    if value >= fmt.PERPLEXITY_CEILING:
        return (
            f"Over {fmt.PERPLEXITY_CEILING:,.0f} ({value:.3g}): the model found this text very "
            "unlikely."
        )
    choices = max(1, round(value))
    if choices == 1:
        return f"{value:.2f}: the model was nearly certain of each token."
    return (
        f"{value:.2f}: on average the model hesitated as if between about {choices} equally "
        "likely tokens."
    )


def _before_any_answer(loaded: LoadedDevice, next_mode: str = "iobinding") -> str:
    if loaded.name == REMOTE:
        return "A server writes the answers: its loop, device and transfers are its own."
    if next_mode == "nocache":
        return nocache_note(0, measured=False)
    if not loaded.own_memory:
        return cpu_note(loaded.kv_bytes_per_token, CONTEXT_EXAMPLE, measured=False, mode=next_mode)
    label = device_name(loaded.name) if loaded.name in DEVICE_NAMES else loaded.label
    if next_mode == "naive":
        return (
            f"On {label} the naive loop moves every layer's KV cache to the host and back for "
            "each token; IO-Binding would move only the token, the mask and the scores."
        )
    return (
        f"On {label} IO-Binding keeps the KV cache on the device and moves only the token, "
        "the mask and the scores; the naive loop moves every layer's KV cache to the host and "
        "back for each token."
    )


def _same_model(fig: AnswerFigures, loaded: LoadedDevice) -> bool:
    """An answer restored from the history may be another model's: its KV size is not known."""
    return fig.model is None or loaded.model is None or fig.model == loaded.model


# What each precision does and costs (docs/engine.md, "Precision"), shown on the choice.
PRECISION_TIP = (
    "How chatapp's GGUF kernels multiply (reloads the model; remembered for each model).\n"
    "Fast (8-bit): activations rounded to 8 bits per block, as llama.cpp does: the quickest "
    "prompts and answers; every answer may differ a little from the float model's.\n"
    "Exact: float32 prompts and int16 decode steps: closest to the float model, but about "
    "twice the arithmetic per weight, so slower where the CPU's arithmetic is the limit."
)
PRECISION_NAMES = {"fast": "Fast (8-bit)", "exact": "Exact"}
# Why the choice is greyed where no GGUF kernels run (a remote server says its own reason).
NO_PRECISION_CHOICE = (
    "This model runs on ONNX Runtime's own kernels (its stock graph, or a device other than "
    "the CPU): there is no precision to choose."
)
