"""What a model folder's graph is: its KV layout and tensors, the names its loops feed and read,
its tokens and context (ModelInfo), and what one read of the folder gave (FolderRead). Data
only: model_description.read_model_folder reads a folder into them (read.py opens the files
and describes the graph)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx

from chatapp.engine.tensor_types import NAMES

# Where a tensor stored outside its graph lies: its file (inside the folder, links resolved),
# offset and length (None: the rest of the file).
Span = tuple[Path, int, int | None]


@dataclass(frozen=True)
class TokenizerFiles:
    """A folder's tokenizer files, checked and read once (`read_tokenizer_files`): a tokenizer
    is built from these (engine/text/chat.py) without opening the folder's small files again or
    checking them a second time."""

    folder: Path
    tokenizer_json: Path | None  # resolved inside the folder; None: a tokenizer.model alone
    json_bytes: int  # tokenizer.json's size (0 without one)
    config: dict[str, Any] | None  # tokenizer_config.json
    # special_tokens_map.json, where it counts (the config has no added_tokens_decoder)
    special_tokens_map: dict[str, Any] | None
    chat_template: str | None  # chat_template.jinja's text
    # added_tokens.json or additional_chat_templates: transformers reads more than tokenizer.json
    other_sources: bool


@dataclass(frozen=True)
class ModelIO:
    """The names the loops feed and read for one graph."""

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str | None = None  # None: the graph computes positions itself
    logits: str = "logits"
    use_cache_branch: str | None = None  # legacy merged decoders: False for the first run
    # chatapp's graphs: which new positions get logits (an overridable initializer, default
    # every position); None for other tools' graphs, which return every position's logits
    logits_positions: str | None = None


@dataclass(frozen=True)
class KVTensor:
    layer: int
    kind: str  # "key" | "value"
    past_name: str
    present_name: str


class KVLayout(Enum):
    SHARED_BUFFER = "shared-buffer"  # GroupQueryAttention: past and present may be one buffer
    CONCAT = "concat"  # present = past + new, dynamic length (Optimum / onnx-community)
    STATIC_WINDOW = "static-window"  # fixed shapes: past [.., C-1, ..], present [.., C, ..]


@dataclass(frozen=True)
class ModelInfo:
    folder: Path
    onnx_path: Path  # links resolved: the regular file inside the folder that is run
    name: str
    layout: KVLayout
    kv: tuple[KVTensor, ...]
    n_layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: np.dtype  # float32, float16 or bfloat16 (ml_dtypes): the KV is kept in it
    vocab_size: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    input_names: tuple[str, ...]
    io: ModelIO  # the input / output names the loops use
    logits_dtype: np.dtype  # what the graph returns; sampled as float32
    window: int | None = None  # static-window models: tokens per run
    op_types: frozenset[str] = frozenset()  # every node's op type, subgraphs included

    @property
    def has_position_ids(self) -> bool:
        return self.io.position_ids is not None

    @property
    def onnx_file(self) -> str:
        """The graph's path inside the folder, with "/" (what --onnx-file takes)."""
        return self.onnx_path.relative_to(self.folder.resolve()).as_posix()

    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_heads * self.head_dim * np.dtype(self.kv_dtype).itemsize

    def describe(self, allocated: int | None = None) -> str:
        """One line; `allocated`: the context an engine set aside, said beside the model's own
        when smaller (the window's "/ 8192" then matches the status bar's words)."""
        context = (
            f"context {allocated} tokens (the model allows {self.context_length})"
            if allocated and allocated < self.context_length
            else f"context {self.context_length} tokens"
        )
        return (
            f"{self.name}: {self.n_layers} layers, {self.kv_heads} KV heads x {self.head_dim}, "
            f"{context}, KV layout {self.layout.value}"
            + ("" if self.kv_dtype == np.float32 else f", {NAMES[self.kv_dtype]} KV")
        )


class FolderRead(NamedTuple):
    """What `read_model_folder` read: the description, and what it was read from."""

    info: ModelInfo
    graph: onnx.ModelProto  # the graph chosen, without its weights
    nodes: tuple[onnx.NodeProto, ...]  # its nodes, subgraphs included (graph.all_nodes)
    native: bool  # it runs on chatapp's GGUF kernels (its opset names their domain)
    weight_files: tuple[Path, ...]  # the external data files it names
    config: dict[str, Any]  # config.json ({} without one)
    generation: dict[str, Any]  # generation_config.json ({} without one)
    made_by_chatapp: bool  # its manifest names chatapp's converter
    tokenizer: TokenizerFiles  # its tokenizer files, checked and read once
    spans: dict[str, Span]  # where each tensor stored outside the graph lies (checked)
    # Read for a device: the CPU would try the same graphs (no native graph preferred there).
    cpu_same: bool = True
    # Read for a device: the graph its session runs, where it differs from the file
    # (folder_format/graph.float_kernel_graph).
    device_graph: bytes | None = None
