"""A small ONNX graph writer: nodes, constants and unique names, nothing model-specific."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from chatapp.convert.external_data import ExternalData

MS_DOMAIN = "com.microsoft"
ONNX_OPSET = 21


class OnnxGraph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()
        self._consts: dict[tuple[str, bytes], str] = {}
        self.external: ExternalData | None = None

    def stream_to(self, external: ExternalData) -> None:
        """Write each initializer's bytes to `external` as it is made (from now on; those
        made already are handed over first, in order)."""
        for tensor in self.initializers:
            external.adopt(tensor)
        self.external = external

    def unique(self, base: str) -> str:
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def const(self, base: str, array: np.ndarray) -> str:
        """An initializer; constants with equal values are shared (two branches of an If
        built from the same weights store them once)."""
        array = np.asarray(array)
        # Not np.ascontiguousarray: it turns a 0-d scalar into shape [1].
        contiguous = array if array.flags.c_contiguous else array.copy(order="C")
        data = (
            contiguous.tobytes() if array.size <= 16 else hashlib.sha256(contiguous.data).digest()
        )
        key = (str(array.dtype) + str(array.shape), data)
        if key in self._consts:
            return self._consts[key]
        name = self.unique(base)
        if self.external is None:
            self.initializers.append(numpy_helper.from_array(contiguous, name))
        else:
            self.initializers.append(self.external.tensor(contiguous, name))
        self._consts[key] = name
        return name

    @contextmanager
    def collecting(self, nodes: list[onnx.NodeProto]) -> Iterator[None]:
        """Append the nodes made inside to `nodes` (a subgraph's body) instead of this graph;
        names stay unique across both and initializers stay here, in the outer scope."""
        mine, self.nodes = self.nodes, nodes
        try:
            yield
        finally:
            self.nodes = mine

    def op(
        self,
        op_type: str,
        inputs: list[str],
        outputs: int | list[str] = 1,
        domain: str = "",
        name: str | None = None,
        **attrs: Any,
    ) -> list[str]:
        node_name = self.unique(name or op_type)
        if isinstance(outputs, int):
            outputs = [self.unique(f"{node_name}/out{i}") for i in range(outputs)]
        else:
            for out in outputs:
                if out:
                    self._names.add(out)
        node = helper.make_node(op_type, inputs, outputs, name=node_name, domain=domain, **attrs)
        self.nodes.append(node)
        return list(outputs)

    def op1(self, op_type: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        return self.op(op_type, inputs, 1, domain, **attrs)[0]

    def add_input(self, name: str, elem_type: int, shape: list[int | str]) -> str:
        self._names.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def add_output(self, name: str, elem_type: int, shape: list[int | str]) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def model(self, graph_name: str, metadata: dict[str, str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, graph_name, self.inputs, self.outputs, self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[
                helper.make_opsetid("", ONNX_OPSET),
                helper.make_opsetid(MS_DOMAIN, 1),
            ],
            producer_name="chatapp-convert",
        )
        model.ir_version = 10
        for key, value in metadata.items():
            model.metadata_props.add(key=key, value=value)
        return model
