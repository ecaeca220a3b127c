"""`aipu prune`: the per-layer table, a model `aipu compile` takes, and one-line errors (exit 2) for bad
arguments and for damaged or edited models, which never crash, hang or run away (tests/sandbox.py)."""
import numpy as np
import onnx
import pytest
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from aipu.app.models.train_digits import MODEL_PATH
from tests.sandbox import accepted_or_one_line, assert_one_line_error, fuzz, profiles, run_case, run_cli


def test_prune_prints_each_layer_and_writes_a_smaller_model(tmp_path):
    out = tmp_path / "pruned.onnx"
    code, stdout, err = run_cli(["prune", str(MODEL_PATH), "--filters", "0.25", "--criterion", "l2", "-o", str(out)])
    assert code == 0, err
    lines = {line.split()[0]: line.split()[1:] for line in stdout.splitlines()[2:]}
    assert lines["conv1"] == ["Conv", "12/16", "144", "108"] and lines["fc"] == ["Gemm", "320", "240"]
    assert lines["total"] == ["14,288", "8,124"]
    pruned = onnx.load(out)
    onnx.checker.check_model(pruned)
    shapes = {t.name: tuple(t.dims) for t in pruned.graph.initializer}
    assert shapes["conv2.weight"] == (24, 12, 3, 3) and shapes["fc.weight"] == (10, 24)


def test_prune_of_named_layers(tmp_path):
    out = tmp_path / "pruned.onnx"
    code, stdout, err = run_cli(["prune", str(MODEL_PATH), "--filters", "0.5", "--layers", "conv2", "-o", str(out)])
    assert code == 0, err
    shapes = {t.name: tuple(t.dims) for t in onnx.load(out).graph.initializer}
    assert shapes["conv1.weight"] == (16, 1, 3, 3) and shapes["conv2.weight"] == (16, 16, 3, 3)
    assert shapes["conv3.weight"] == (32, 16, 3, 3)


@pytest.mark.parametrize("arguments, field", [
    (["--filters", "1"], "--filters = '1'"), (["--filters", "x"], "--filters = 'x'"),
    (["--filters", "nan"], "--filters = 'nan'"), (["--filters", "0.5", "--criterion", "max"], "--criterion"),
])
def test_bad_arguments_are_one_line(tmp_path, arguments, field):
    code, _, err = run_cli(["prune", str(MODEL_PATH), *arguments, "-o", str(tmp_path / "o.onnx")])
    assert code == 2 and err.startswith(f"aipu prune: error: {field}") and err.count("\n") == 1, err


def test_a_layer_that_is_not_a_conv_is_named(tmp_path):
    code, _, err = run_cli(["prune", str(MODEL_PATH), "--filters", "0.5", "--layers", "fc", "-o",
                            str(tmp_path / "o.onnx")])
    assert_one_line_error(code, err, "prune", str(MODEL_PATH))
    assert "layer = 'fc'" in err


def _edit(draw, model: onnx.ModelProto) -> onnx.ModelProto:
    """One structural edit of the demo model: an operator swapped, a group set, an initializer dropped or
    reshaped, an input renamed."""
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    graph = edited.graph
    kind = draw(st.sampled_from(["op", "group", "drop", "dims", "rename"]))
    node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
    if kind == "op":
        node.op_type = draw(st.sampled_from(["Concat", "Add", "Reshape", "Gemm", "Conv", "Flatten", "Relu",
                                             "BatchNormalization", "MatMul", "Mul"]))
    elif kind == "group":
        node.attribute.append(helper.make_attribute("group", draw(st.integers(-2, 40))))
    elif kind == "drop":
        del graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
    elif kind == "dims":
        tensor = graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
        array = numpy_helper.to_array(tensor).ravel()
        size = draw(st.integers(1, array.size))
        dims = draw(st.lists(st.integers(1, 4), min_size=0, max_size=4))
        tensor.CopyFrom(numpy_helper.from_array(np.resize(array[:size], dims), tensor.name))
    elif node.input:
        node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(
            [name for n in graph.node for name in n.output] + ["nowhere"]))
    return edited


@pytest.mark.parametrize("profile", profiles(quick=20, long=1000))
def test_a_damaged_or_edited_model_is_pruned_or_refused_by_name(sandbox, tmp_path, profile):
    model = onnx.load(MODEL_PATH)
    data = model.SerializeToString()

    @st.composite
    def cases(draw):
        if draw(st.booleans()):
            return _edit(draw, model).SerializeToString()
        changed = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            changed[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(changed[:draw(st.integers(1, len(data)))])

    def check(blob):
        path = tmp_path / "model.onnx"
        path.write_bytes(blob)
        code, _, err = run_case(sandbox, run_cli, ["prune", str(path), "--filters", "0.5", "-o", str(tmp_path / "o.onnx")])
        accepted_or_one_line(code, err, "prune", str(path))

    fuzz(profile, cases(), check)
