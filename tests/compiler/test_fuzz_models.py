"""`aipu compile` on generated models: every model onnx.checker accepts compiles, or is refused in one line
naming the model with exit status 2 (never a traceback, a warning, a hang or unbounded memory).

The generator draws one to three nodes of the operators the compiler takes on a small 4-D float input, their
attributes and initializers mostly consistent but often a little off (channel counts, kernel sizes, pads,
ranks, bias lengths; zero, negative and huge values; inf, nan and denormals in the weights). Each model
compiles in a forked child under a time and a memory limit (tests/sandbox.py). The default suite runs a
seeded quick subset; ``-m slow`` runs many more examples.
"""
from __future__ import annotations

import math
import shutil

import numpy as np
import onnx
import onnx.printer
import pytest
from hypothesis import assume, note
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.app.cli import main
from tests.compiler.inconsistent_models import _model, _x
from tests.sandbox import Sandbox, accepted_or_one_line, fuzz, profiles, run_case, run_cli

PROFILES = profiles(quick=400, long=3000)
OPSETS = (17, 13, 11, 19, 21, 24)
_SPECIAL_VALUES = (np.inf, -np.inf, np.nan, 1e-40, 3e38, -3e38)
_HUGE = 1 << 20
_MAX_WEIGHTS = 1 << 18       # elements of one drawn initializer


class _Draft:
    """The model being drawn: its nodes and initializers, and the tensor the next node reads with its shape
    (from onnx's shape inference; None where that knows none)."""

    def __init__(self, draw, opset: int, shape: tuple[int, ...]):
        self.draw, self.opset, self.input_shape = draw, opset, shape
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.tensor, self.shape = "x", shape

    # --- drawing values: hypothesis shrinks each towards the consistent choice ---------------------------
    def flag(self) -> bool:
        return self.draw(st.booleans())

    def near(self, value: int, huge: int = _HUGE) -> int:
        """``value`` mostly; else one off, zero, negative or ``huge``."""
        choice = self.draw(st.integers(0, 12))
        return value if choice < 8 else (value + 1, value - 1, 0, -value - 1, huge)[choice - 8]

    def near_list(self, values, huge: int = _HUGE) -> list[int]:
        """Each of ``values`` near itself; sometimes one too few or one too many."""
        values, length = list(values), self.draw(st.integers(0, 9))
        values = values[:-1] if length == 8 else [*values, 1][:len(values) + 1] if length == 9 else values
        return [self.near(value, huge) for value in values]

    def near_float(self, value: float) -> float:
        choice = self.draw(st.integers(0, 12))
        return value if choice < 7 else (0.0, -value, 1e-40, 1e30, np.inf, np.nan)[choice - 7]

    def size(self, value: int) -> int:
        """An initializer's dimension near ``value`` (never negative, at most a few more)."""
        return max(0, self.near(value, huge=value + 5))

    def dim(self, axis: int) -> int:
        """The current tensor's size along ``axis`` (1 where unknown)."""
        return self.shape[axis] if self.shape is not None and -len(self.shape) <= axis < len(self.shape) else 1

    @property
    def rank(self) -> int:
        return len(self.shape) if self.shape is not None else len(self.input_shape)

    # --- building -------------------------------------------------------------------------------------
    def constant(self, value) -> str:
        name = f"c{len(self.initializers)}"
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weights(self, shape, positive: bool = False) -> str:
        """A float32 initializer of normal values (absolute where ``positive``); sometimes all zeros or with
        one inf, nan, denormal or near-overflow entry."""
        assume(math.prod(shape) <= _MAX_WEIGHTS)
        values = np.random.default_rng(self.draw(st.integers(0, 1 << 16))).normal(size=shape).astype(np.float32)
        values = np.abs(values) + 0.1 if positive else values
        special = self.draw(st.integers(0, 12))
        if special == 6:
            values[...] = 0
        elif special > 6 and values.size:
            values.flat[self.draw(st.integers(0, values.size - 1))] = _SPECIAL_VALUES[special - 7]
        return self.constant(values)

    def add(self, op: str, inputs, **attrs) -> None:
        """Append a node reading ``inputs`` ("" for an omitted one); the current tensor becomes its output."""
        output = f"t{len(self.nodes)}"
        node = helper.make_node(op, list(inputs), [output], name=f"{op}_{len(self.nodes)}",
                                **{key: value for key, value in attrs.items() if value != []})
        node.attribute.extend(helper.make_attribute(key, [], attr_type=onnx.AttributeProto.INTS)
                              for key, value in attrs.items() if value == [])
        self.nodes.append(node)
        self.tensor, self.shape = output, _inferred_shape(self.model(typed_output=False))

    def model(self, typed_output: bool = True) -> onnx.ModelProto:
        """The model so far, the current tensor its output (typed as inferred, else of unknown dimensions)."""
        output = helper.make_empty_tensor_value_info(self.tensor)
        if typed_output:
            shape = self.shape if self.shape is not None else [f"d{axis}" for axis in range(self.rank)]
            output = helper.make_tensor_value_info(self.tensor, TensorProto.FLOAT, list(shape))
        graph = helper.make_graph(self.nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                     list(self.input_shape))],
                                  [output], self.initializers)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


def _inferred_shape(model: onnx.ModelProto) -> tuple[int, ...] | None:
    """The graph output's shape by onnx's lenient shape inference, None where it gives no full shape."""
    try:
        output = onnx.shape_inference.infer_shapes(model).graph.output[0]
    except Exception:       # onnx raises several types on models its inference refuses
        return None
    tensor_type = output.type.tensor_type
    dims = tensor_type.shape.dim
    if not tensor_type.HasField("shape") or not all(dim.HasField("dim_value") for dim in dims):
        return None
    return tuple(dim.dim_value for dim in dims)


# --- one node each ------------------------------------------------------------------------------------
def _divisors(count: int) -> list[int]:
    return [group for group in range(1, max(count, 1) + 1) if count % group == 0] or [1]


def _window(d: _Draft, kernel: tuple[int, int], dilations: bool = True) -> dict:
    """Optional strides, pads, dilations and auto_pad of a sliding window."""
    attrs = {}
    if d.flag():
        attrs["strides"] = d.near_list([d.draw(st.integers(1, 3)) for _ in kernel])
    if d.flag():
        attrs["pads"] = d.near_list([d.draw(st.integers(0, 2)) for _ in range(2 * len(kernel))])
    if dilations and d.flag():
        attrs["dilations"] = d.near_list([d.draw(st.integers(1, 2)) for _ in kernel])
    if d.flag():
        attrs["auto_pad"] = d.draw(st.sampled_from(["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"]))
    return attrs


def _conv(d: _Draft, op: str) -> None:
    """Conv (weights [K, C/group, kh, kw]) or ConvTranspose (weights [C, K/group, kh, kw]), bias optional."""
    channels = d.dim(1)
    group = d.draw(st.sampled_from(_divisors(channels)))
    outputs = d.draw(st.integers(1, 3)) * group
    kernel = (d.draw(st.integers(1, 3)), d.draw(st.integers(1, 3)))
    shape = (channels, outputs // group) if op == "ConvTranspose" else (outputs, channels // group)
    inputs = [d.tensor, d.weights([d.size(value) for value in (*shape, *kernel)])]
    if d.flag():
        inputs.append(d.weights([d.size(outputs)]))
    attrs = _window(d, kernel)
    if group != 1 or d.flag():
        attrs["group"] = d.near(group)
    if d.flag():
        attrs["kernel_shape"] = d.near_list(kernel)
    if op == "ConvTranspose" and d.flag():
        attrs["output_padding"] = d.near_list([d.draw(st.integers(0, 1)) for _ in kernel])
    if op == "ConvTranspose" and d.flag():
        attrs["output_shape"] = d.near_list([d.dim(2) * 2, d.dim(3) * 2])
    d.add(op, inputs, **attrs)


def _pool(d: _Draft, op: str) -> None:
    kernel = (d.draw(st.integers(1, 3)), d.draw(st.integers(1, 3)))
    attrs = _window(d, kernel, dilations=op == "MaxPool" or d.opset >= 19)
    attrs["kernel_shape"] = d.near_list(kernel)
    if d.flag():
        attrs["ceil_mode"] = d.near(1)
    if op == "AveragePool" and d.flag():
        attrs["count_include_pad"] = d.near(1)
    d.add(op, [d.tensor], **attrs)


def _activation(d: _Draft, op: str) -> None:
    attrs = {}
    if op in ("LeakyRelu", "HardSigmoid", "Swish") and d.flag():
        attrs["alpha"] = d.near_float({"LeakyRelu": 0.01, "HardSigmoid": 0.2, "Swish": 1.0}[op])
    if op == "HardSigmoid" and d.flag():
        attrs["beta"] = d.near_float(0.5)
    if op == "Gelu" and d.flag():
        attrs["approximate"] = d.draw(st.sampled_from(["tanh", "none"]))
    d.add(op, [d.tensor], **attrs)


def _clip(d: _Draft, op: str) -> None:
    bounds = [d.constant(np.float32(d.near_float(value))) if d.flag() else "" for value in (-1.0, 1.0)]
    while bounds and not bounds[-1]:
        bounds.pop()
    d.add(op, [d.tensor, *bounds])


def _prelu(d: _Draft, op: str) -> None:
    shape = d.draw(st.sampled_from([(d.size(d.dim(1)), 1, 1), (1,), (d.size(d.dim(1)),)]))
    d.add(op, [d.tensor, d.weights(shape, positive=d.flag())])


def _operand_shape(d: _Draft) -> list[int]:
    """A constant's shape that broadcasts against the current tensor (often), or nearly."""
    full = list(d.shape or d.input_shape)
    choices = [[1], [], full, [d.dim(1), *[1] * (len(full) - 2)], full[-2:], [1, *full[1:]]]
    return [d.size(value) for value in d.draw(st.sampled_from(choices))]


def _binary(d: _Draft, op: str) -> None:
    """Add/Sub/Mul/Div of the current tensor with a constant, itself or the model's input."""
    other = d.draw(st.sampled_from(["constant", "itself", "input"]))
    operand = d.weights(_operand_shape(d)) if other == "constant" else d.tensor if other == "itself" else "x"
    d.add(op, [operand, d.tensor] if d.flag() and op != "Div" else [d.tensor, operand])


def _concat(d: _Draft, op: str) -> None:
    other = d.draw(st.sampled_from([d.tensor, "x"]))
    d.add(op, [d.tensor, other], axis=d.near(1, huge=d.rank))


def _softmax(d: _Draft, op: str) -> None:
    d.add(op, [d.tensor], **({"axis": d.near(d.draw(st.sampled_from([1, -1])), huge=d.rank)} if d.flag() else {}))


def _reshape(d: _Draft, op: str) -> None:
    full = list(d.shape or d.input_shape)
    count = min(math.prod(full), 1 << 40)
    target = d.draw(st.sampled_from([[1, -1], [1, count], [0, -1], [-1], [1, d.dim(1), -1, 1], full]))
    attrs = {"allowzero": d.near(0)} if d.opset >= 14 and d.flag() else {}
    d.add(op, [d.tensor, d.constant(np.array(d.near_list(target, huge=count + 1), np.int64))], **attrs)


def _layout(d: _Draft, op: str) -> None:
    """Flatten, Transpose, Squeeze or Unsqueeze (axes an attribute before opset 13, an input after)."""
    if op == "Flatten":
        d.add(op, [d.tensor], **({"axis": d.near(1, huge=d.rank + 1)} if d.flag() else {}))
    elif op == "Transpose":
        d.add(op, [d.tensor], perm=d.near_list(d.draw(st.permutations(range(d.rank))), huge=d.rank))
    else:
        axes = d.near_list([d.draw(st.integers(0, max(d.rank - 1, 0)))], huge=d.rank + 1)
        if d.opset < 13:
            d.add(op, [d.tensor], axes=axes)
        else:
            d.add(op, [d.tensor, d.constant(np.array(axes, np.int64))])


def _pad(d: _Draft, op: str) -> None:
    modes = ["constant", "reflect", "edge", *(["wrap"] if d.opset >= 19 else [])]
    spatial = [d.draw(st.integers(0, 2)) for _ in range(4)]
    pads = d.near_list([0, 0, *spatial[:2], 0, 0, *spatial[2:]])
    inputs = [d.tensor, d.constant(np.array(pads, np.int64))]
    if d.flag():
        inputs.append(d.constant(np.float32(d.near_float(0.5))))
    d.add(op, inputs, mode=d.draw(st.sampled_from(modes)))


def _resize(d: _Draft, op: str) -> None:
    """Resize by scales [1, 1, s, s] or to sizes; the empty roi an input before opset 13."""
    attrs = {"mode": d.draw(st.sampled_from(["nearest", "linear"]))}
    if d.flag():
        attrs["coordinate_transformation_mode"] = d.draw(st.sampled_from(
            ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]))
    if d.flag():
        attrs["nearest_mode"] = d.draw(st.sampled_from(["round_prefer_floor", "floor", "ceil"]))
    roi = d.constant(np.zeros(0, np.float32)) if d.opset < 13 else ""
    if d.flag():
        scale = d.near_float(d.draw(st.sampled_from([2.0, 0.5, 1.5, 3.0])))
        scales = np.array([1, 1, *[scale] * (d.rank - 2)][:max(d.rank, 1)], np.float32)
        d.add(op, [d.tensor, roi, d.constant(scales)], **attrs)
    else:
        sizes = d.near_list([d.dim(0), d.dim(1), d.dim(2) * 2, d.dim(3) + 1], huge=1 << 16)
        d.add(op, [d.tensor, roi, d.constant(np.zeros(0, np.float32)), d.constant(np.array(sizes, np.int64))],
              **attrs)


def _batch_norm(d: _Draft, op: str) -> None:
    channels = d.dim(1)
    parameters = [d.weights([d.size(channels)], positive=position == 3) for position in range(4)]
    attrs = {"epsilon": d.near_float(1e-5)} if d.flag() else {}
    d.add(op, [d.tensor, *parameters], **attrs)


def _dense(d: _Draft, op: str) -> None:
    """Gemm or MatMul on a [1, features] tensor (a Flatten first where the current one is not 2-D)."""
    if d.rank != 2 and d.draw(st.integers(0, 4)):
        d.add("Flatten", [d.tensor])
    features, outputs = d.dim(-1), d.draw(st.integers(1, 8))
    attrs = {}
    if op == "Gemm" and d.flag():
        attrs["transB"] = 1
    shape = [d.size(outputs), d.size(features)] if attrs else [d.size(features), d.size(outputs)]
    inputs = [d.tensor, d.weights(shape)]
    if op == "Gemm" and d.flag():
        inputs.append(d.weights([d.size(value) for value in d.draw(st.sampled_from([[outputs], [1, outputs],
                                                                                      [1]]))]))
    if op == "Gemm" and d.flag():
        attrs.update(alpha=d.near_float(1.0), beta=d.near_float(1.0), transA=d.near(0))
    d.add(op, inputs, **attrs)


_BUILDERS = {
    "Conv": _conv, "ConvTranspose": _conv, "MaxPool": _pool, "AveragePool": _pool,
    "GlobalAveragePool": lambda d, op: d.add(op, [d.tensor]),
    **{op: _activation for op in ("Relu", "Sigmoid", "Tanh", "Exp", "LeakyRelu", "HardSigmoid", "HardSwish",
                                  "Gelu", "Swish")},
    "Clip": _clip, "PRelu": _prelu, "Softmax": _softmax, "BatchNormalization": _batch_norm,
    **{op: _binary for op in ("Add", "Sub", "Mul", "Div")}, "Concat": _concat,
    "Reshape": _reshape, **{op: _layout for op in ("Flatten", "Transpose", "Squeeze", "Unsqueeze")},
    "Pad": _pad, "Resize": _resize, "Gemm": _dense, "MatMul": _dense,
}
_SINCE = {"HardSwish": 14, "Gelu": 20, "Swish": 24}         # opset each operator first appears in
_IMAGE_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
              "Resize", "Pad", "PRelu")


@st.composite
def _models(draw) -> onnx.ModelProto:
    """One to three nodes on a [1, C, H, W] input, the later ones reading the earlier's output; the image
    operators mostly only where the tensor is still 4-D."""
    opset = draw(st.sampled_from(OPSETS))
    d = _Draft(draw, opset, (1, draw(st.integers(1, 8)), draw(st.integers(1, 12)), draw(st.integers(1, 12))))
    known = [op for op in _BUILDERS if _SINCE.get(op, 0) <= opset]
    for _ in range(draw(st.integers(1, 3))):
        ops = known if d.rank == 4 or not draw(st.integers(0, 5)) else [
            op for op in known if op not in _IMAGE_OPS]
        op = draw(st.sampled_from(ops))
        _BUILDERS[op](d, op)
    model = d.model()
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        assume(False)
    return model


def _compile_argv(model: onnx.ModelProto, directory) -> list[str]:
    """``aipu compile`` of ``model`` saved in ``directory``, with two normal samples of its input shape."""
    onnx.save(model, directory / "m.onnx")
    shape = [dim.dim_value for dim in model.graph.input[0].type.tensor_type.shape.dim]
    np.savez(directory / "c.npz", x=np.random.default_rng(0).normal(size=[2, *shape[1:]]).astype(np.float32))
    shutil.rmtree(directory / "out", ignore_errors=True)
    return ["compile", str(directory / "m.onnx"), "--calib", str(directory / "c.npz"), "-o", str(directory / "out"),
            "--quiet"]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A sandbox forked after a consistent model compiled in this process: every child starts with onnxruntime
    loaded and the numba kernels compiled (a cold cache takes seconds per kernel)."""
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], _x([1, 2, 8, 8]),
                   initializers=[("w", np.ones((2, 2, 3, 3), np.float32))])
    assert main(_compile_argv(model, tmp_path_factory.mktemp("warm"))) == 0
    box = Sandbox()
    yield box
    box.close()


@pytest.mark.parametrize("profile", PROFILES)
def test_fuzz_generated_models(profile, tmp_path, sandbox):
    def check(model):
        note(onnx.printer.to_text(model))
        code, _, err = run_case(sandbox, run_cli, _compile_argv(model, tmp_path))
        assert "Traceback" not in err and "Warning" not in err, err
        if code == 2 and err.splitlines()[0].endswith(("operator type:", "operator types:")):
            # unsupported nodes: a header line naming the model, then a line per operator type
            assert err.startswith(f"aipu compile: error: {tmp_path / 'm.onnx'}: "), err
            return
        accepted_or_one_line(code, err, "compile", str(tmp_path / "m.onnx"))

    fuzz(profile, _models(), check)
