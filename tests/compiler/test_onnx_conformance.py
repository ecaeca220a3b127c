"""The onnx package's own node conformance cases, run through the golden model.

Every case that involves a quantization operator, or an integer (int8/uint8) case of an operator the NPU
implements, is enumerated from `onnx.backend.test.case.node.collect_testcases()` at collection time, so
cases added by a newer onnx are picked up automatically. Each one either reproduces the expected output
exactly or is skipped with the reason it does not apply to the NPU (e.g. float8 types).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from aipu.compiler.onnx_ops import ONNX_OPS, NotApplicable, run_node
from tests.compiler.onnx_node_cases import onnx_node_cases

QUANTIZATION_OPS = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QuantizeLinear",
                    "DequantizeLinear", "DynamicQuantizeLinear"}
INTEGER_DTYPES = {np.dtype(np.int8), np.dtype(np.uint8)}


def _graph_dtypes(model: onnx.ModelProto) -> set[np.dtype]:
    dtypes = set()
    for value in list(model.graph.input) + list(model.graph.output):
        if value.type.HasField("tensor_type"):
            dtypes.add(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)))
    return dtypes


def _relevant_cases():
    selected = []
    for case in onnx_node_cases():
        ops = {node.op_type for node in case.model.graph.node}
        if ops & QUANTIZATION_OPS or (ops & set(ONNX_OPS) and _graph_dtypes(case.model) & INTEGER_DTYPES):
            selected.append(case)
    return selected


CASES = _relevant_cases()


def _as_array(data) -> np.ndarray:
    """Case data comes as arrays, or as TensorProtos for types numpy lacks (float8, int4, ...)."""
    return onnx.numpy_helper.to_array(data) if isinstance(data, onnx.TensorProto) else np.asarray(data)


def _run_graph(model: onnx.ModelProto, inputs: list) -> list[np.ndarray]:
    values = {value.name: _as_array(data) for value, data in zip(model.graph.input, inputs)}
    for init in model.graph.initializer:
        values[init.name] = onnx.numpy_helper.to_array(init)
    for node in model.graph.node:
        outputs = run_node(node, [values.get(name) if name else None for name in node.input])
        values.update(zip(node.output, outputs))
    return [values[value.name] for value in model.graph.output]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_onnx_node_case(case):
    for inputs, expected in case.data_sets:
        try:
            actual = _run_graph(case.model, list(inputs))
        except NotApplicable as reason:
            pytest.skip(f"not applicable to the NPU: {reason}")
        for got, want in zip(actual, expected):
            want = _as_array(want)
            assert got.dtype == want.dtype, f"{case.name}: dtype {got.dtype} != {want.dtype}"
            assert got.shape == want.shape, f"{case.name}: shape {got.shape} != {want.shape}"
            assert np.array_equal(got, want), f"{case.name}: {np.count_nonzero(got != want)} values differ"


def test_every_integer_quantization_operator_is_covered():
    """The cases the issue names must be applicable and present (a selection bug would skip them)."""
    by_op: dict[str, int] = {}
    for case in CASES:
        for node in case.model.graph.node:
            by_op[node.op_type] = by_op.get(node.op_type, 0) + 1
    for op in ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QuantizeLinear", "DequantizeLinear"):
        assert by_op.get(op, 0) >= 1, f"no onnx conformance case for {op}"
    applicable = 0
    for case in CASES:
        try:
            _run_graph(case.model, list(case.data_sets[0][0]))
            applicable += 1
        except NotApplicable:
            pass
    # onnx 1.23: ConvInteger 2, MatMulInteger 1, QLinearConv 1, QLinearMatMul 8, Quantize/Dequantize
    # integer cases 12, DynamicQuantizeLinear expanded none; plus integer Add/Sub/Mul/Max/Min/Clip/MaxPool.
    assert applicable >= 30, f"only {applicable} conformance cases applicable"
