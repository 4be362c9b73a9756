"""Which llama.cpp architecture names convert, and what to tell the user about the others.

Kept apart from the families so that reading a file's header can refuse early without
importing the graph code.
"""

from __future__ import annotations

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3")

# Names people meet in LM Studio / Ollama folders, with the reason they do not convert.
NOT_SUPPORTED = {
    "mistral": "no llama.cpp file uses this name (Mistral 7B and Nemo files say 'llama')",
    "mistral3": (
        "Mistral Small 3.x, Ministral 3 and Devstral use YaRN RoPE and attention temperature "
        "scaling, which this converter does not build yet"
    ),
    "gemma": "Gemma 1 is not supported (Gemma 2 and 3 are)",
    "gemma3n": "Gemma 3n's per-layer embeddings and AltUp blocks are not supported",
    "phi2": "Phi-2 (LayerNorm, parallel blocks) is not supported (Phi-3 and Phi-4-mini are)",
    "qwen2moe": "mixture-of-experts models are not supported",
    "qwen3moe": "mixture-of-experts models are not supported",
    "llama4": "Llama 4 (mixture of experts, chunked attention) is not supported",
    "qwen2vl": "vision-language models are not supported",
}


def unsupported_message(file_name: str, arch: str) -> str:
    reason = NOT_SUPPORTED.get(arch, "this converter does not know it")
    return (
        f"{file_name} is a '{arch}' model: {reason}. Supported architectures: "
        f"{', '.join(SUPPORTED_ARCHITECTURES)}."
    )
