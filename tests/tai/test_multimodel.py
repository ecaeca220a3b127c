"""Multi-model .tai files (DecompressMultimodel, T/AI 115.1-2021 Table 217): each model rebuilt exactly from the
shared and specific slices (M_Method 2) or as base + its looked-up difference (M_Method 3), and a mangled file is
an InputError of one line, never a crash (forked sandbox, as tests/tai/test_fuzz.py)."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.app.cli_multimodel import multimodel_document
from aipu.compress.multi_model import residual_decompress
from aipu.compress.multi_model_onnx import residual, share
from aipu.sim.machine.errors import InputError
from aipu.tai.file import dumps, loads
from aipu.tai.records import pack_indices, unpack_indices
from aipu.tai.to_onnx import to_onnx
from tests.sandbox import assert_one_line_error, fuzz, profiles, run_case, run_cli
from tests.strategies import mangled_bytes
from tests.tai.test_fuzz import _sealed, no_escape, read_each


def _model(seed: int, shared_from: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """A 4-filter conv (2 filters shared with ``shared_from``) and a Gemm, about 400 bytes of weights."""
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=(4, 1, 2, 2)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    fc = rng.normal(size=(3, 16)).astype(np.float32)
    if shared_from is not None:
        first = {t.name: numpy_helper.to_array(t) for t in shared_from.graph.initializer}
        w[:2], b[:2] = first["w"][:2], first["b"][:2]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[2, 2]),
         helper.make_node("Flatten", ["c"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc", transB=1)],
        "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(fc, "fc")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BASE = _model(0)
MODELS = [BASE, _model(1, BASE), _model(2, BASE)]
SHARED = dumps(multimodel_document(MODELS[0], shared=share(MODELS, {"conv": 2})))
RESIDUAL_RECORDS = residual(BASE, MODELS[1:], 2)
RESIDUAL = dumps(multimodel_document(BASE, residual=(MODELS[1:], RESIDUAL_RECORDS)))


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_every_shared_model_comes_back_exactly():
    for index, model in enumerate(MODELS):
        back = _weights(to_onnx(loads(SHARED), index))
        assert back.keys() == _weights(model).keys()
        assert all(np.array_equal(back[name], value) for name, value in _weights(model).items())
    assert len(SHARED) < sum(len(dumps(multimodel_document(m, shared=share([m], {})))) for m in MODELS)


def test_every_residual_model_is_base_plus_its_looked_up_difference():
    base = [_weights(BASE)["w"], _weights(BASE)["fc"]]
    for index, (model, record) in enumerate(zip(MODELS[1:], RESIDUAL_RECORDS)):
        back = _weights(to_onnx(loads(RESIDUAL), index))
        expected, _ = residual_decompress(record.w_share, record.w_specific, base)
        assert np.array_equal(back["w"], expected[0]) and np.array_equal(back["fc"], expected[1])
        assert np.array_equal(back["b"], _weights(model)["b"])          # biases are not quantized (§7.1.4)


@pytest.mark.parametrize("n", range(1, 9))
def test_indices_pack_to_n_bits(n):
    indices = np.random.default_rng(n).integers(0, 1 << n, 37)
    packed = pack_indices(indices, n)
    assert packed.size == -(-37 * n // 8) and np.array_equal(unpack_indices(packed, n, 37), indices)


def test_a_model_the_file_does_not_hold_is_refused():
    with pytest.raises(InputError, match="--model = 3: a model of the file, 0 .. 2"):
        to_onnx(loads(SHARED), 3)
    single = dumps(multimodel_document(BASE, shared=share([BASE], {})))
    assert to_onnx(loads(single), 0)
    from aipu.tai.from_onnx import from_onnx
    with pytest.raises(InputError, match="--model = 1: 0: the file holds one model"):
        to_onnx(from_onnx(BASE), 1)


def _read(data: bytes) -> str:
    try:
        for model in (0, 2):
            to_onnx(loads(data), model)
    except InputError as error:
        assert "\n" not in str(error)
        return str(error)
    return "ok"


_read_many = functools.partial(read_each, _read)


@pytest.mark.parametrize("data", [SHARED, RESIDUAL], ids=["shared", "residual"])
def test_every_byte_changed_with_the_crc_made_right(sandbox, data):
    cases = [_sealed(data[:p] + bytes((data[p] ^ 0xFF,)) + data[p + 1:]) for p in range(0, len(data), 3)]
    cases += [_sealed(data[:n]) for n in range(40, len(data), 7)]
    no_escape(run_case(sandbox, _read_many, cases))


@pytest.mark.parametrize("profile", profiles(40, 2000))
def test_mangled_multimodel_files(sandbox, profile):
    def check(data: bytes) -> None:
        run_case(sandbox, _read, data)

    fuzz(profile, st.one_of(mangled_bytes(SHARED).map(_sealed), mangled_bytes(RESIDUAL).map(_sealed)), check)


def test_the_cli_round_trip_and_its_errors(tmp_path):
    paths = []
    for index, model in enumerate(MODELS):
        paths.append(str(tmp_path / f"m{index}.onnx"))
        onnx.save(model, paths[-1])
    code, out, err = run_cli(["multimodel", "tai", *paths, "--slice", "conv=2", "-o", str(tmp_path / "s.tai")])
    assert code == 0, err
    code, out, err = run_cli(["tai", "import", str(tmp_path / "s.tai"), "--model", "2", "-o", str(tmp_path / "b.onnx")])
    assert code == 0, err
    back = _weights(onnx.load(tmp_path / "b.onnx"))
    assert all(np.array_equal(back[name], value) for name, value in _weights(MODELS[2]).items())
    code, _, err = run_cli(["multimodel", "tai", *paths[1:], "--base", paths[0], "--bits", "3",
                            "-o", str(tmp_path / "r.tai")])
    assert code == 0, err
    other = _model(3)
    other.graph.node[0].attribute[0].ints[:] = [1, 1]
    onnx.save(other, tmp_path / "other.onnx")
    code, _, err = run_cli(["multimodel", "tai", paths[0], str(tmp_path / "other.onnx"), "-o", str(tmp_path / "x")])
    assert_one_line_error(code, err, "multimodel", str(tmp_path / "other.onnx"))
    code, _, err = run_cli(["multimodel", "tai", *paths, "--slice", "conv=9", "-o", str(tmp_path / "x")])
    assert code == 2 and "Error 2" in err and err.count("\n") == 1
    code, _, err = run_cli(["tai", "import", str(tmp_path / "s.tai"), "--model", "7", "-o", str(tmp_path / "x")])
    assert_one_line_error(code, err, "tai", str(tmp_path / "s.tai"))
