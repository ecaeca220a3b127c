"""`aipu codec encode` takes hostile input: .npz files of random arrays (also as quantization members
NAME:scale, NAME:zero_point, NAME:axis) or damaged bytes, ONNX models (float, or quantized with
DequantizeLinear) whose weight, scale or zero point initializer has a random type, shape, data or storage,
damaged serialized models, all under random options. Each case runs in a forked child under a time and a
memory limit (tests/sandbox.py) and either encodes (and the container decodes to the tensors' names and
shapes) or ends in one line naming the file or the option, with status 2.
The default suite runs a seeded quick subset; ``-m slow`` runs many more examples.
"""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.sandbox import assert_one_line_error, fuzz, profiles, run_case, run_cli
from tests.strategies import mangled_bytes, random_array

_RNG = np.random.default_rng(5)
VALID_ARRAYS = {"conv.weight": _RNG.normal(0, 0.2, (8, 3, 3, 3)).astype(np.float32),
                "conv.bias": _RNG.normal(0, 0.1, 8).astype(np.float32)}


def _npz_bytes(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _valid_model() -> onnx.ModelProto:
    """One Conv with weight and bias initializers on a 1x3x8x8 input."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(VALID_ARRAYS["conv.weight"], "w"), numpy_helper.from_array(VALID_ARRAYS["conv.bias"],
                                                                                             "b")])
    return helper.make_model(graph)


def _valid_quantized_model() -> onnx.ModelProto:
    """The same Conv with its weight and bias stored as integers behind DequantizeLinear, per output channel."""
    inits = {"w": _RNG.integers(0, 256, (8, 3, 3, 3)).astype(np.uint8), "w_scale": np.full(8, 0.01, np.float32),
             "w_zp": np.full(8, 128, np.uint8), "b": np.arange(-4, 4, dtype=np.int32), "b_scale": np.float32(0.001),
             "b_zp": np.int32(0)}
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wf"], axis=0),
         helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["bf"]),
         helper.make_node("Conv", ["x", "wf", "bf"], ["y"], pads=[1, 1, 1, 1])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(value, name) for name, value in inits.items()])
    return helper.make_model(graph)


VALID_NPZ, VALID_MODEL, VALID_QUANTIZED_MODEL = _npz_bytes(VALID_ARRAYS), _valid_model(), _valid_quantized_model()


@st.composite
def _options(draw) -> list[str]:
    """Options in combinations argparse accepts, with values mostly valid and now and then not."""
    options = []
    quantizer = draw(st.sampled_from(["", "--bits", "--step", "--clusters"]))
    wrong = draw(st.sampled_from([False, False, False, True]))
    if quantizer == "--step":
        steps = ["inf", "nan", "-1", "0", "1e300"] if wrong else ["1e-30", "1e-4", "0.01", "0.5", "1e30"]
        options += [quantizer, draw(st.sampled_from(steps))]
    elif quantizer:
        top = 70000 if quantizer == "--clusters" else 40
        options += [quantizer, str(draw(st.integers(-2, top) if wrong else st.integers(1, min(top, 300))))]
    if draw(st.integers(0, 3)) == 0:
        options += ["--bias-bitdepth", str(draw(st.integers(-1, 40) if wrong else st.integers(1, 31)))]
    if draw(st.booleans()):
        options += ["--ctu", draw(st.sampled_from(["64", "32", "16", "8"]))]
    options += draw(st.sampled_from([[], ["--fast"], ["--profile", "npu"]]))
    return options


@st.composite
def _npz_file(draw) -> bytes:
    """The valid tensors with some replaced by random arrays or added, or the file's bytes damaged."""
    if draw(st.booleans()):
        return draw(mangled_bytes(VALID_NPZ))
    arrays = dict(VALID_ARRAYS)
    for _ in range(draw(st.integers(1, 3))):
        names = [*VALID_ARRAYS, "fc.weight", "a/b", "", "conv.weight:scale", "q:zero_point", "conv.weight:zero_point",
                 "conv.weight:axis", "q", "x:axis"]
        arrays[draw(st.sampled_from(names))] = draw(random_array())
    return _npz_bytes(arrays)


_TYPES = st.sampled_from([*TensorProto.DataType.values(), 999, -1])


@st.composite
def _model_file(draw, valid: onnx.ModelProto) -> bytes:
    """The valid model with an initializer's type, dims, data or storage changed, or its bytes damaged."""
    if draw(st.integers(0, 3)) == 0:
        return draw(mangled_bytes(valid.SerializeToString()))
    model = onnx.ModelProto()
    model.CopyFrom(valid)
    weight = model.graph.initializer[draw(st.integers(0, len(model.graph.initializer) - 1))]
    for change in draw(st.lists(st.sampled_from(["type", "dims", "raw", "typed", "external", "name"]), min_size=1,
                                max_size=3)):
        if change == "type":
            weight.data_type = draw(_TYPES)
        elif change == "dims":
            del weight.dims[:]
            weight.dims.extend(draw(st.lists(st.integers(-2, 2 ** 40), max_size=5)))
        elif change == "raw":
            weight.raw_data = draw(st.binary(max_size=1200))
        elif change == "typed":
            weight.ClearField("raw_data")
            weight.float_data.extend(draw(st.lists(st.floats(width=32), max_size=300)))
        elif change == "external":
            weight.data_location = TensorProto.EXTERNAL
            entry = weight.external_data.add()
            entry.key, entry.value = draw(st.sampled_from(["location", "offset", "length"])), draw(st.text(max_size=8))
        else:
            weight.name = draw(st.sampled_from(["", "b", "x", "y"]))
    return model.SerializeToString()


def _check_encode(box, tmp_path, name: str, content: bytes, options: list[str]) -> None:
    """Encoded, and decoding gives every tensor's name and shape back; or one line naming the file or option."""
    path, output = tmp_path / name, tmp_path / "out.nnr"
    path.write_bytes(content)
    output.unlink(missing_ok=True)
    code, _, err = run_case(box, run_cli, ["codec", "encode", str(path), "-o", str(output), *options])
    if code != 0:
        if err.startswith("aipu codec: error: --"):
            assert err.count("\n") == 1 and code == 2, err
        else:
            assert_one_line_error(code, err, "codec", str(path))
        return
    decoded = tmp_path / "decoded.npz"
    code, _, err = run_case(box, run_cli, ["codec", "decode", str(output), "-o", str(decoded)])
    assert code == 0, err
    if name.endswith(".npz"):           # the tensors come back; quantization members may gain a default zero point
        with np.load(path) as given, np.load(decoded) as back:
            assert {key: back[key].shape for key in back.files if ":" not in key} == \
                {key: given[key].shape for key in given.files if ":" not in key}


@pytest.mark.parametrize("profile", profiles(quick=60, long=3000))
def test_fuzz_codec_encode_npz(profile, tmp_path, sandbox):
    fuzz(profile, st.tuples(_npz_file(), _options()),
         lambda case: _check_encode(sandbox, tmp_path, "tensors.npz", *case))


@pytest.mark.parametrize("profile", profiles(quick=60, long=3000))
def test_fuzz_codec_encode_onnx(profile, tmp_path, sandbox):
    fuzz(profile, st.tuples(_model_file(VALID_MODEL), _options()),
         lambda case: _check_encode(sandbox, tmp_path, "model.onnx", *case))


@pytest.mark.parametrize("profile", profiles(quick=60, long=3000))
def test_fuzz_codec_encode_quantized_onnx(profile, tmp_path, sandbox):
    fuzz(profile, st.tuples(_model_file(VALID_QUANTIZED_MODEL), _options()),
         lambda case: _check_encode(sandbox, tmp_path, "model.onnx", *case))
