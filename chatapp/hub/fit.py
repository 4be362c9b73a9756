"""Whether this computer can run a hub file, before downloading it: the converter's families
(an unsupported architecture is shown greyed with the reason) and the engine's own memory
estimate (engine.model_description.MemoryEstimate and check_memory, as at load) for the
weights and the KV cache at the context the engine would allocate."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.convert.architectures import SUPPORTED_ARCHITECTURES, unsupported_message
from chatapp.engine.model_description import (
    DEFAULT_MAX_CONTEXT,
    MemoryEstimate,
    MemoryRefusal,
    check_memory,
)
from chatapp.hub.catalog import HubFile
from chatapp.hub.probe import Shape
from chatapp.units import fmt_bytes

# The engine keeps the KV cache in float32 at most (4 bytes a value): an upper bound for a
# folder the converter will make.
KV_VALUE_BYTES = 4


@dataclass(frozen=True)
class Fit:
    usable: bool  # converts here and fits the memory free now (as far as is known)
    mark: str  # a few words for the list: "fits", "too big", "unsupported", ...
    why: str  # one line: the estimate, or why not
    estimate: MemoryEstimate | None = None


def estimate_for(file: HubFile, shape: Shape | None, context: int | None = None) -> MemoryEstimate:
    """What the converted file would hold while answering: the native graph multiplies the
    GGUF's own blocks (weights about the file's size, no packed copies), plus the KV cache for
    the context the engine allocates (the model's, capped as the engine caps it)."""
    wanted = context or DEFAULT_MAX_CONTEXT
    allocated = min(shape.context_length, wanted) if shape and shape.context_length else wanted
    per_token = (
        2 * shape.n_layers * shape.kv_heads * shape.head_dim * KV_VALUE_BYTES
        if shape is not None and shape.complete
        else 0
    )
    return MemoryEstimate(
        weights=file.size or 0,
        packed=0,
        packed_one_kernel=0,
        kv=per_token * allocated,
        context=allocated,
    )


def fit(
    file: HubFile,
    architecture: str | None,
    shape: Shape | None = None,
    context: int | None = None,
) -> Fit:
    """`architecture`: the hub's for the repository; a probed `shape` (its header) wins."""
    if file.not_a_model:
        return Fit(False, "not a model", f"{file.name} is {file.not_a_model}.")
    arch = shape.architecture if shape is not None and shape.architecture else architecture
    if arch is not None and arch not in SUPPORTED_ARCHITECTURES:
        return Fit(False, "unsupported", unsupported_message(file.local_name, arch))
    estimate = estimate_for(file, shape, context)
    try:
        check_memory(estimate, file.local_name)
    except MemoryRefusal as exc:
        return Fit(False, "too big", str(exc), estimate)
    kv = (
        f" + KV for {estimate.context} tokens {fmt_bytes(estimate.kv)}"
        if estimate.kv
        else " (KV cache not known before the header is read)"
    )
    known = "" if arch is not None else " The architecture is known only once downloaded."
    return Fit(
        True,
        "fits" if arch is not None else "fits?",
        f"Needs about {fmt_bytes(estimate.total)}: weights {fmt_bytes(estimate.weights)}{kv}."
        + known,
        estimate,
    )
