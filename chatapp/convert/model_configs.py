"""The JSON files beside model.onnx: Hugging Face config, generation config, genai config."""

from __future__ import annotations

from typing import Any

from chatapp.convert.gguf_file import DecoderSpec
from chatapp.convert.tokenizer_families import END_OF_TURN_TEXTS

MODEL_FILE = "model.onnx"
EXTERNAL_DATA_FILE = "model.onnx.data"


def eos_token_ids(meta: dict[str, Any]) -> list[int]:
    """Every id that ends an answer: eos, and the end-of-turn tokens chat models emit."""
    ids: list[int] = []
    for key in (
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ):
        # llama.cpp writes -1 for "none".
        if key in meta and int(meta[key]) >= 0 and int(meta[key]) not in ids:
            ids.append(int(meta[key]))
    tokens = meta.get("tokenizer.ggml.tokens") or []
    # A template ends each turn with its own token (<|im_end|>, <end_of_turn>, <|end|>,
    # <|eot_id|>) even when the file's eos is another one; llama.cpp stops on them too.
    template = str(meta.get("tokenizer.chat_template", ""))
    for text in END_OF_TURN_TEXTS:
        if text in template and text in tokens and tokens.index(text) not in ids:
            ids.append(tokens.index(text))
    return ids


def _special(meta: dict[str, Any], kind: str, fallback: int | None) -> int | None:
    value = meta.get(f"tokenizer.ggml.{kind}_token_id")
    return fallback if value is None else int(value)


def hf_config(spec: DecoderSpec, meta: dict[str, Any], context_length: int) -> dict[str, Any]:
    eos = eos_token_ids(meta)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "max_position_embeddings": context_length,
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": (
            {"rope_type": "linear", "factor": spec.rope_scaling_factor}
            if spec.rope_scaling_type == "linear"
            else None
        ),
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tied_embeddings,
        "bos_token_id": _special(meta, "bos", None),
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "pad_token_id": _special(meta, "padding", eos[0] if eos else None),
        "torch_dtype": "float32",
    }


def generation_config(meta: dict[str, Any], context_length: int) -> dict[str, Any]:
    eos = eos_token_ids(meta)
    return {
        "bos_token_id": _special(meta, "bos", None),
        "eos_token_id": eos,
        "pad_token_id": _special(meta, "padding", eos[0] if eos else None),
        "max_length": context_length,
        "do_sample": False,
    }


def genai_config(
    spec: DecoderSpec, meta: dict[str, Any], context_length: int, shared_buffer: bool = True
) -> dict[str, Any]:
    """onnxruntime-genai's description of the same folder (its builder's format)."""
    eos = eos_token_ids(meta)
    inputs = {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    if not shared_buffer:
        inputs["position_ids"] = "position_ids"
    return {
        "model": {
            "bos_token_id": _special(meta, "bos", 0),
            "context_length": context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": MODEL_FILE,
                "head_size": spec.head_dim,
                "hidden_size": spec.hidden_size,
                "inputs": inputs,
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": spec.n_heads,
                "num_hidden_layers": spec.n_layers,
                "num_key_value_heads": spec.n_kv_heads,
            },
            "eos_token_id": eos if len(eos) > 1 else eos[0],
            "pad_token_id": _special(meta, "padding", eos[0] if eos else 0),
            "type": "llama",
            "vocab_size": spec.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context_length,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": shared_buffer,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }
