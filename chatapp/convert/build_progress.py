"""The graph build's progress as a fraction of its work, so that the time left is honest.

Layers count by their weights; the output projection counts more per weight when it becomes a
float32 matrix (decoded, then transposed: about 8x a quantized layer's cost per weight, measured
on the 1B and 8B shapes), and the token embedding less (its blocks are copied, not decoded).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.needs import FLOAT_HEAD_TYPES

FLOAT_HEAD_COST = 8.0
QUANTIZED_HEAD_COST = 1.5
EMBEDDING_COST = 0.3


class BuildProgress:
    def __init__(
        self,
        model: GGUFModel,
        start: float,
        end: float,
        report: Callable[[float, str], None],
        int8_head: bool = False,
    ) -> None:
        self.start, self.end, self.report = start, end, report
        self.layers = model.spec.n_layers
        head = "token_embd.weight" if model.spec.tied_embeddings else "output.weight"
        per_layer = [0.0] * self.layers
        for name, tensor in model.tensors.items():
            parts = name.split(".")
            if parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < self.layers:
                per_layer[int(parts[1])] += math.prod(tensor.shape)
        head_tensor = model.tensors.get(head)
        head_elements = math.prod(head_tensor.shape) if head_tensor is not None else 0
        float_head = head_tensor is not None and head_tensor.qtype in FLOAT_HEAD_TYPES
        head_cost = FLOAT_HEAD_COST if float_head and not int8_head else QUANTIZED_HEAD_COST
        embedding = model.tensors.get("token_embd.weight")
        embed_units = EMBEDDING_COST * (math.prod(embedding.shape) if embedding else 0)
        # Work done before layer i starts, and in all.
        self.before_layer = [embed_units]
        for units in per_layer:
            self.before_layer.append(self.before_layer[-1] + units)
        self.total = max(1.0, self.before_layer[-1] + head_cost * head_elements)

    def _at(self, units: float, message: str) -> None:
        self.report(self.start + (self.end - self.start) * units / self.total, message)

    def embedding(self) -> None:
        self._at(0.0, "embedding")

    def layer(self, i: int) -> None:
        self._at(self.before_layer[min(i, self.layers)], f"layer {i + 1}/{self.layers}")

    def head(self) -> None:
        self._at(self.before_layer[-1], "output projection")
