"""Softmax through the compiler (docs/arithmetic.md §6.4, docs/compiler.md §3): quantized per the Zhouyi
whitepaper §4.66, within half an output step of onnxruntime's float Softmax of the same dequantized input,
bit-exact when lowered."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.app.models.synthetic import GraphBuilder
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.qir import QSoftmax
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile, float_node_alone


def _classifier(opset: int = 17):
    b = GraphBuilder(2, 3, 8, opset=opset)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [b.node("Relu", [b.conv("image", 3, 16)])])])
    logits = b.fc(x, 16, 10)
    return b, logits, b.node("Softmax", [logits], **({"axis": -1} if opset >= 13 else {}))


def _segmenter(opset: int = 17, axis: int | None = 1, size: int = 8):
    b = GraphBuilder(3, 3, size, opset=opset)
    scores = b.conv(b.node("Relu", [b.conv("image", 3, 8)]), 8, 5, kernel=1, bn=False)
    return b, scores, b.node("Softmax", [scores], **({} if axis is None else {"axis": axis}))


CASES = {"classifier": lambda: _classifier(), "per_pixel_channels": lambda: _segmenter(),
         # a whole 5x6x6 map is one row: it must fit half of the tiny configuration's output buffer
         "opset11_flattened": lambda: _segmenter(opset=11, axis=None, size=6),
         "opset11_classifier": lambda: _classifier(11),
         # rows that are not consecutive channels-last: gathered along the channels and back
         "over_width": lambda: _segmenter(axis=3), "over_height": lambda: _segmenter(axis=-2),
         "opset11_over_the_plane": lambda: _segmenter(opset=11, axis=2, size=6)}


GATHERED = {"over_width", "over_height", "opset11_over_the_plane"}


@pytest.mark.parametrize("name", CASES)
def test_softmax_is_within_half_a_step_of_onnxruntime_and_lowers_bit_exact(tmp_path, name):
    b, x, y = CASES[name]()
    size = b.input.type.tensor_type.shape.dim[2].dim_value
    samples = np.random.default_rng(4).normal(0, 1, (16, 3, size, size)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    softmax = next(op for op in qmodel.ops if isinstance(op, QSoftmax))
    assert (softmax.x != x) == (name in GATHERED)
    values = qmodel.run(qmodel.quantize_inputs({"image": samples[:1]}), keep=True)
    want = float_node_alone(graph, qmodel, values, "Softmax")
    got = qmodel.tensors[y].dequantize(values[y])
    assert np.abs(got - want).max() <= qmodel.tensors[y].scale * (0.5 + 1e-3)
    for config in (DEFAULT, TINY):
        network, _ = _check_every_tensor(qmodel, config, samples[1:2], seed=5)
        commands = [c for c in network.program.queues[Unit.LUT] if c.opcode == Opcode.SOFTMAX]
        assert sum(c.rows for c in commands) * softmax.length(qmodel.tensors[softmax.x].shape) == \
            int(np.prod(qmodel.tensors[x].shape))


def test_classifier_softmax_keeps_the_float_top1(tmp_path):
    b, _, y = _classifier()
    samples = np.random.default_rng(5).normal(0, 1, (32, 3, 8, 8)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    session = single_thread_session(graph.to_onnx())
    agree = sum(int(np.argmax(session.run(None, {"image": s[None]})[0]) ==
                    np.argmax(qmodel.run_float({"image": s[None]})[y])) for s in samples)
    assert agree >= 30


def test_a_row_larger_than_half_a_buffer_is_refused_by_name(tmp_path):
    b, _, y = _segmenter(opset=11, axis=None)                       # 5 x 8 x 8 = 320 bytes in one row
    _, qmodel = _compile(tmp_path, b.model(y), np.random.default_rng(0).normal(0, 1, (4, 3, 8, 8)).astype(
        np.float32))
    with pytest.raises(InputError, match="softmax row = '320 bytes': fits half the activation and output buffers"):
        _check_every_tensor(qmodel, TINY, np.zeros((1, 3, 8, 8), np.float32))
