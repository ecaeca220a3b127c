"""Models onnx.checker accepts that no operator could run: `aipu compile` refuses each in one line naming the
node or input, before onnxruntime sees it; what only onnxruntime finds is one line naming the model."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from aipu.app.cli import main
from tests.compiler.inconsistent_models import CASES

WHAT_EACH_NAMES = {
    "group 0": "node 'Conv_0' (Conv) group = 0: an integer 1 .. 2 dividing",
    "group negative": "group = -2",
    "group not dividing the channels": "group = 2: an integer 1 .. 3 dividing the 3 input and 4 output channels",
    "kernel_shape against the weights": "kernel_shape = [5, 5]: the weights' spatial shape [3, 3]",
    "weight channels against the input": "weight shape = [4, 3, 3, 3]: 2 input channels per group",
    "bias of the wrong length": "bias shape = [5]: [4], one per output channel",
    "duplicate node names": "node name = 'n': a name of one node only",
    "Resize scale 0": "node 'Resize_0' (Resize) scales = [1.0, 1.0, 0.0, 0.0]: finite positive numbers",
    "Reshape to the wrong count": "shape = [1, 7]: a shape of the input's 32 elements",
    "reflect Pad wider than the input": "pads = [0, 0, 5, 5, 0, 0, 5, 5]: at most 3 on axis 2 for reflect",
    "MaxPool pads larger than the kernel": "pads = [3, 3, 3, 3]: each smaller than the kernel [2, 2]",
    "11x11 kernel on a padded 8x8 input": "kernel = [11, 11]: at most the padded input 10 on axis 2",
    "rank-0 input": "input 'x' shape = []: a tensor of rank 1 or more",
    "infinite weight": "initializer 'w' = '-inf at [1, 0, 2, 2]': finite values",
    "BatchNormalization dividing by zero": "(BatchNormalization) variance + epsilon = 0.0: above 0 for every channel",
    "Unsqueeze of an empty axes list": "node 'Unsqueeze_0' (Unsqueeze) axes = []: a non-empty list",
    "Squeeze of an empty axes input": "(Squeeze) axes = []: at least one axis (onnx reads an empty list as none",
    "Add of an empty constant": "node 'Add_0' (Add) output 'y' shape = [1, 1, 4, 0]: at least 1 on every axis",
    "Pad to 2^24 elements": "output 'y' shape = [1, 1, 4194308, 4]: at least 1 on every axis and at most 16777216 "
                            "elements",
    "Pad with six pads for four axes": "pads = [0, 0, 1, 0, 0, 1]: 8 values, a start and an end for each of the 4 "
                                       "axes",
    "Resize scale 1e-40": "an output of at least 1 on every axis and at most 16777216 elements (these give "
                          "[1, 1, 0, 0])",
    "Resize scale 3000": "(these give [1, 1, 12000, 12000])",
    "Div by zero": "node 'Div_0' (Div) divisor 'd' = '0 at [1]': non-zero values",
    "MaxPool strides for three axes": "strides = [1, 1, 1]: 2 values, one per spatial axis of the input",
    "PRelu slope of an empty shape": "slope shape = [0, 1, 1]: broadcastable to the input [1, 1, 1, 3]",
    "Squeeze of axis 4 of four": "node 'Squeeze_0' (Squeeze) axes = [4]: within -4 .. 3, the input's rank 4",
    "BatchNormalization of three scales for two channels": "scale shape = [3]: [2], one per channel of the input "
                                                           "[1, 2, 4, 4]",
    "Gemm of four rows for six features": "node 'Gemm_0' (Gemm) B shape = [4, 3]: 6 rows, one per feature of the "
                                          "input [1, 6]",
    "Transpose by perm [0, 2, 2, 1]": "perm = [0, 2, 2, 1]: a permutation of 0 .. 3, the input's axes",
}


def _compile(tmp_path, model, capsys) -> tuple[int, str]:
    onnx.save(model, tmp_path / "m.onnx")
    shape = [dim.dim_value for dim in model.graph.input[0].type.tensor_type.shape.dim]
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).normal(size=[2, *shape[1:]]).astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # what a terminal would show before the error line
        status = main(["compile", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "c.npz"), "-o",
                       str(tmp_path / "out"), "--quiet"])
    return status, capsys.readouterr().err.strip()


@pytest.mark.parametrize("case", sorted(WHAT_EACH_NAMES))
def test_an_inconsistent_model_is_one_line_naming_what_breaks_which_rule(case, tmp_path, capsys):
    status, error = _compile(tmp_path, CASES[case](), capsys)
    assert status == 2 and "\n" not in error and "Traceback" not in error
    assert f"{tmp_path / 'm.onnx'}: " in error and WHAT_EACH_NAMES[case] in error, error
    assert not (tmp_path / "out").exists()


def test_what_onnxruntime_refuses_is_one_line_naming_the_model(tmp_path):
    """The calibration run on a graph that skipped the compiler's checks: onnxruntime's own failure, named."""
    from aipu.compiler.calibrate import collect
    from aipu.compiler.graph import load_graph
    from aipu.sim.machine.errors import InputError

    onnx.save(CASES["bias of the wrong length"](), tmp_path / "m.onnx")
    graph = load_graph(tmp_path / "m.onnx")
    with pytest.raises(InputError) as caught:
        collect(graph, {"x": np.zeros((2, 2, 8, 8), np.float32)})
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'm.onnx'}: onnxruntime = ") and "\n" not in message
    assert "a float model onnxruntime runs" in message and "bias" in message


def test_an_unknown_auto_pad_and_a_graph_without_outputs_are_named(tmp_path, capsys):
    from tests.compiler.inconsistent_models import _conv, _model, _x
    from onnx import helper

    status, error = _compile(tmp_path, _conv(auto_pad="WHATEVER"), capsys)
    assert status == 2 and "node 'Conv_0' (Conv) auto_pad = b'WHATEVER': one of NOTSET, SAME_UPPER" in error, error
    model = _model([helper.make_node("Relu", ["x"], ["y"])], _x([1, 1, 4, 4]))
    del model.graph.output[:]
    status, error = _compile(tmp_path, model, capsys)
    assert status == 2 and "\n" not in error and ("graph outputs = 'none'" in error or "onnx.checker" in error), error


@pytest.mark.parametrize("option, value", [("--n-std", "-3"), ("--n-std", "nan"), ("--n-std", "inf"),
                                           ("--percentile", "0"), ("--percentile", "101"), ("--momentum", "2")])
def test_calibration_options_outside_their_range_are_named(option, value, tmp_path, capsys):
    onnx.save(CASES["group 0"](), tmp_path / "m.onnx")
    assert main(["compile", str(tmp_path / "m.onnx"), "--calib", "x.npz", "-o", str(tmp_path / "out"),
                 option, value]) == 2
    error = capsys.readouterr().err.strip()
    assert f"{option} = {float(value)}: a " in error and "\n" not in error, error
