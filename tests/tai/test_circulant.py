"""Block-circulant .tai records (DecompressStructuralMatric, D_Method 2, T/AI 115.1-2021 §8.4.2): the dense weights
C·diag(s) come back exactly, with or without a chapter-10 stream under the first rows; `aipu compile` keeps those
layers compressed (LOAD expands them); a mangled record is an InputError of one line, never a crash (forked
sandbox, as tests/tai/test_fuzz.py)."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.app.model_compression import CompressionPlan, compress
from aipu.compress.circulant import COPY_EXTENSION
from aipu.compress.structured_onnx import circulant_layers, with_circulant
from aipu.sim.machine.errors import InputError
from aipu.tai.file import TaiFile, dumps, loads
from aipu.tai.from_onnx import from_onnx
from aipu.tai.records import BASE_SIGNS, RECORDS, attribute_value, circulant_record
from aipu.tai.to_onnx import convert, to_onnx
from tests.sandbox import fuzz, profiles, run_case
from tests.strategies import mangled_bytes
from tests.tai.test_fuzz import _sealed, no_escape, read_each


def _model() -> onnx.ModelProto:
    """A 3x3 conv 4 -> 8 channels and a Gemm 8 -> 4 that stores its weight (inputs, outputs) (transB 0)."""
    rng = np.random.default_rng(1)
    conv = numpy_helper.from_array(rng.normal(size=(8, 4, 3, 3)).astype(np.float32), "conv.w")
    gemm = numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), "fc.w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "conv.w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
         helper.make_node("Flatten", ["p"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "fc.w"], ["y"], name="fc")],
        "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [conv, gemm])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _document(model: onnx.ModelProto, circ_size: int, extension: int, options=None):
    signs, chosen = circulant_layers(model, circ_size, np.random.default_rng(0), extension)
    records = []
    for index, entry in enumerate(chosen):
        def build(document, entry=entry, index=index):
            return circulant_record(document, entry.layer.node.input[1], entry.w_circ, circ_size, signs, index,
                                    extension, entry.layer.node.op_type == "Gemm", options)
        records.append(([entry.layer.node.input[1]], build))
    return with_circulant(model, chosen), chosen, from_onnx(with_circulant(model, chosen), records=records)


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}


@pytest.mark.parametrize("circ_size, extension", [(2, 1), (4, 1), (4, COPY_EXTENSION)])
def test_the_dense_weights_and_the_layouts_come_back_exactly(circ_size, extension):
    dense, chosen, document = _document(_model(), circ_size, extension)
    data = dumps(document)
    back, layouts = convert(loads(data))
    assert {name: value.tobytes() for name, value in _weights(back).items()} == \
        {name: value.tobytes() for name, value in _weights(dense).items()}
    assert sorted(layouts) == ["conv.w", "fc.w"]
    for entry in chosen:
        size, signs = layouts[entry.layer.node.input[1]]
        assert size == circ_size and np.array_equal(signs, entry.sign_vector)
    stored = sum(p.array.nbytes for p in document.parameters.values())
    assert stored < sum(w.nbytes for w in _weights(dense).values()) / circ_size + 64


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 3), st.integers(1, 3), st.sampled_from([1, 3]),
       st.sampled_from([1, COPY_EXTENSION]), st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_any_record_round_trips_to_its_dense_weight(circ_size, rows, columns, kernel, extension, transposed, seed):
    """A random layer's record expands to C·diag(s) of its first rows, whatever L, shape, extension and layout."""
    from aipu.compress.circulant import SignVectors, decompress_w_circ_to_weight, extend_base_to_sign, signed_weight
    from aipu.tai.schema import Model

    rng = np.random.default_rng(seed)
    first_rows = rng.normal(size=(rows, columns * circ_size, *((kernel, kernel) if kernel > 1 else ())))
    first_rows = first_rows.astype(np.float32)
    signs = SignVectors(np.where(rng.random(9) < 0.5, -1, 1).astype(np.int8), (int(rng.integers(1, 10)),))
    document = TaiFile(Model(Version="T/AI 115.1-2021"))
    nodes, variables = circulant_record(document, "w", first_rows, circ_size, signs, 0, extension, transposed)
    expanded = RECORDS["DecompressStructuralMatric"].expand(
        {"X": first_rows, "base_sign_vector_network": document.parameters[BASE_SIGNS].array},
        {a.name: attribute_value(a) for a in nodes[0].attribute}, {"Y": None}, "record")["Y"]
    sign = extend_base_to_sign(signs.base_sign_vector_network[:signs.len_list[0]], first_rows.shape[1], extension)
    dense = signed_weight(decompress_w_circ_to_weight(first_rows, circ_size), sign)
    assert np.array_equal(expanded, np.swapaxes(dense, 0, 1) if transposed else dense)
    assert [v.name for v in variables][-1] == "w" and expanded.dtype == np.float32


def test_first_rows_as_a_chapter_10_stream_decode_into_the_record():
    from aipu.codec.api import CodecOptions
    from aipu.codec.encoder import FAST_OPTIONS
    _, chosen, document = _document(_model(), 4, 1, CodecOptions(bitdepth=7, encoder=FAST_OPTIONS))
    kinds = [node.operator_type for node in document.model.graph[0].operator_node[:4]]
    assert kinds == ["Dequantization_tensor", "DecompressStructuralMatric"] * 2
    back, layouts = convert(loads(dumps(document)))
    conv = _weights(back)["conv.w"]
    step = np.max(np.abs(chosen[0].w_circ)) / 127
    assert np.max(np.abs(conv - chosen[0].dense())) <= step and sorted(layouts) == ["conv.w", "fc.w"]


def test_a_record_of_another_method_or_length_is_refused_by_name():
    _, _, document = _document(_model(), 4, 1)
    node = document.model.graph[0].operator_node[0]
    next(a for a in node.attribute if a.name == "D_Method").val.i = 3
    with pytest.raises(InputError, match=r"D_Method, granularity = \(3, 3\).*block circulant"):
        to_onnx(loads(dumps(document)))
    _, _, document = _document(_model(), 4, 1)
    node = document.model.graph[0].operator_node[0]
    next(a for a in node.attribute if a.name == "kwarg.len_list").val.i = 10 ** 6
    with pytest.raises(InputError, match="kwarg.len_list, kwarg.extend_list"):
        to_onnx(loads(dumps(document)))


def test_compile_keeps_the_tai_s_circulant_layers_compressed(tmp_path):
    """The digits CNN made block-circulant by `aipu compress`: compiled from the .tai, its circulant layers are
    LOADed from first rows (a quarter of their bytes in DRAM), and the interpreter equals the golden model."""
    from aipu.app.bench.pruning import program_figures
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
    from aipu.compiler.driver import compile_model
    from aipu.compiler.qir import QConv

    model, document, _ = compress(onnx.load(MODEL_PATH), CompressionPlan(circulant=4, layers=("conv2", "conv3")))
    path, dense, calib = tmp_path / "digits.tai", tmp_path / "dense.onnx", tmp_path / "calib.npz"
    path.write_bytes(dumps(document))
    onnx.save(model, dense)
    images = np.load(DATA_PATH)["calibration_images"][:32]
    np.savez(calib, image=images)
    compiled, plain = compile_model(path, calib), compile_model(dense, calib)
    circulant = {op.name: op.circulant[0] for op in compiled.qmodel.ops if isinstance(op, QConv) and op.circulant}
    assert circulant == {"conv2": 4, "conv3": 4}
    assert program_figures(compiled, images[:1])["interpreter_equals_golden"]
    assert compiled.network.dram.size < plain.network.dram.size
    for image in images[:4]:
        outputs = [qmodel.run(qmodel.quantize_inputs({"image": image[None]}))[qmodel.outputs[0]]
                   for qmodel in (compiled.qmodel, plain.qmodel)]
        assert np.array_equal(*outputs)


def _compiled(tmp_path, model: onnx.ModelProto, plan: CompressionPlan, samples: np.ndarray):
    from aipu.compiler.driver import compile_model

    _, document, _ = compress(model, plan)
    path, calib = tmp_path / "model.tai", tmp_path / "calib.npz"
    path.write_bytes(dumps(document))
    np.savez(calib, **{model.graph.input[0].name: samples})
    return compile_model(path, calib)


def test_a_batch_normalization_after_a_layer_is_folded_before_the_fit(tmp_path):
    """`aipu compress --circulant` fits the weights the NPU multiplies with: BN folded first, so the compiler
    still finds the layer circulant and keeps it compressed."""
    from aipu.compiler.qir import QConv

    model = _model()
    rng = np.random.default_rng(2)
    norms = [numpy_helper.from_array(value.astype(np.float32), name) for name, value in
             (("g", rng.uniform(0.5, 2, 8)), ("b", rng.normal(size=8)), ("m", rng.normal(size=8)),
              ("v", rng.uniform(0.5, 2, 8)))]
    model.graph.initializer.extend(norms)
    model.graph.node.insert(1, helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], name="bn"))
    model.graph.node[2].input[0] = "n"
    compiled = _compiled(tmp_path, model, CompressionPlan(circulant=4, layers=("conv",)),
                         rng.normal(size=(8, 4, 5, 5)).astype(np.float32))
    assert [op.circulant[0] for op in compiled.qmodel.ops if isinstance(op, QConv) and op.circulant] == [4]


def test_a_layer_load_cannot_expand_compiles_dense_with_a_note(tmp_path):
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
    from aipu.compiler.qir import QConv

    compiled = _compiled(tmp_path, onnx.load(MODEL_PATH), CompressionPlan(circulant=16),
                         np.load(DATA_PATH)["calibration_images"][:16])
    assert not any(op.circulant for op in compiled.qmodel.ops if isinstance(op, QConv))
    notes = [note for note in compiled.qmodel.notes if "block-circulant in" in note]
    assert len(notes) == 2 and "compiled dense: circ_size = 16: one of (2, 4, 8)" in notes[0]


SMALL = dumps(_document(_model(), 4, 1)[2])


def _read(data: bytes) -> str:
    try:
        convert(loads(data))
    except InputError as error:
        assert "\n" not in str(error)
        return str(error)
    return "ok"


def test_every_byte_changed_with_the_crc_made_right(sandbox):
    cases = [_sealed(SMALL[:p] + bytes((SMALL[p] ^ 0xFF,)) + SMALL[p + 1:]) for p in range(0, len(SMALL), 2)]
    no_escape(run_case(sandbox, functools.partial(read_each, _read), cases))


@pytest.mark.parametrize("profile", profiles(40, 2000))
def test_mangled_circulant_files(sandbox, profile):
    def check(data: bytes) -> None:
        run_case(sandbox, _read, data)

    fuzz(profile, mangled_bytes(SMALL).map(_sealed), check)
