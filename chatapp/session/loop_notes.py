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


def transfer_note(fig: AnswerFigures | None, loaded: LoadedDevice) -> str:
    """Why the host↔device figure of the answer shown reads as it does, on its device."""
    if fig is None:
        return _before_any_answer(loaded)
    if fig.mode == REMOTE or fig.device == REMOTE:
        return "A server wrote this answer: its loop, device and transfers are its own."
    kv = loaded.kv_bytes_per_token if _same_model(fig, loaded) else 0
    context = fig.tokens_in_context
    on = fig.device or loaded.name
    if on == "cpu":
        return cpu_note(kv, context or CONTEXT_EXAMPLE, measured=bool(context))
    label = device_name(on)  # the answer's own, whatever is loaded now
    moved = fmt_bytes(fig.transfer_bytes_per_token)
    naive = naive_bytes_per_token(kv, context)
    if fig.mode == "naive":
        return (
            f"On {label} the naive loop sent every layer's KV cache to the host and back for "
            f"each token: {moved} per token here. IO-Binding keeps it on the device and moves "
            "only the token, the mask and the scores."
        )
    if fig.mode == "iobinding":
        would = (
            f" The naive loop would move about {fmt_bytes(naive)} per token by the end of this "
            f"answer ({context} tokens in its KV cache)."
            if naive
            else ""
        )
        return (
            f"On {label} IO-Binding kept the KV cache on the device: only the token, the mask "
            f"and the scores crossed ({moved} per token).{would}"
        )
    return (
        f"On {label} this loop moved {moved} per token; the KV cache is what IO-Binding keeps "
        "on the device."
    )


def cpu_note(kv_bytes_per_token: int, context_tokens: int, measured: bool = True) -> str:
    """Why Naive and IO-Binding are close on the CPU, and where IO-Binding matters."""
    moved = fmt_bytes(naive_bytes_per_token(kv_bytes_per_token, context_tokens))
    when = (
        f"by the end of this answer ({context_tokens} tokens in its KV cache)"
        if measured
        else f"with {context_tokens} tokens in its KV cache"
    )
    saved = f": for this model about {moved} per token {when}." if kv_bytes_per_token else "."
    return (
        "On the CPU the KV cache stays in the computer's memory with either loop, so "
        "IO-Binding saves only copies within RAM: the two come out close, and a few percent "
        "either way is noise. IO-Binding matters on a GPU or other accelerator, where the "
        f"naive loop sends the whole KV cache to the host and back for every token{saved}"
    )


def _before_any_answer(loaded: LoadedDevice) -> str:
    if loaded.name == REMOTE:
        return "A server writes the answers: its loop, device and transfers are its own."
    if not loaded.own_memory:
        return cpu_note(loaded.kv_bytes_per_token, CONTEXT_EXAMPLE, measured=False)
    label = device_name(loaded.name) if loaded.name in DEVICE_NAMES else loaded.label
    return (
        f"On {label} the naive loop moves every layer's KV cache to the host and back "
        "for each token; IO-Binding moves only the token, the mask and the scores."
    )


def _same_model(fig: AnswerFigures, loaded: LoadedDevice) -> bool:
    """An answer restored from the history may be another model's: its KV size is not known."""
    return fig.model is None or loaded.model is None or fig.model == loaded.model
