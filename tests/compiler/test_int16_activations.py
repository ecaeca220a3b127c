"""int16 activations for chosen tensors (`aipu compile --int16 NAME`): symmetric over [-32767, 32767], read by
interpolated tables, pooling, element-wise operators and the outputs; the program equals the quantized IR bit
for bit, and a MAC operator reading one is refused by name (the MAC array multiplies 8-bit operands)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from aipu.app.cli import main
from aipu.app.models.synthetic import GraphBuilder
from aipu.compiler.quant_options import QuantOptions
from aipu.sim.machine.errors import InputError
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile


def _network() -> tuple[onnx.ModelProto, dict[str, str]]:
    """conv -> Sigmoid -> conv -> MaxPool -> Tanh, + the Sigmoid's output -> HardSigmoid, global pooling, fc;
    returns the model and the names of the tensors the tests make int16."""
    b = GraphBuilder(3, 3, 12)
    wide = b.conv("image", 3, 8, bn=False)                     # read by a table: interpolated
    gated = b.node("Sigmoid", [wide])
    second = b.conv(gated, 8, 8, bn=False)                     # read by pooling, whose output stays int16
    pooled = b.node("MaxPool", [second], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    squashed = b.node("Tanh", [pooled])
    summed = b.node("Add", [squashed, gated])                  # 8-bit operands, an int16 result
    features = b.node("Flatten", [b.node("GlobalAveragePool", [b.node("HardSigmoid", [summed])])])
    logits = b.fc(features, 8, 5)                               # an int16 output
    return b.model(logits), {"wide": wide, "second": second, "summed": summed, "logits": logits,
                             "squashed": squashed, "image": "image"}


def _quantized(tmp_path, int16):
    rng = np.random.default_rng(0)
    model, names = _network()
    return _compile(tmp_path, model, rng.normal(0, 1, (8, 3, 12, 12)).astype(np.float32),
                    QuantOptions(int16=tuple(names[key] for key in int16))), names


@pytest.mark.parametrize("config", [None, TINY], ids=["default", "tiny"])
def test_chosen_tensors_are_int16_and_the_program_is_bit_exact(tmp_path, config):
    (graph, qmodel), names = _quantized(tmp_path, ("wide", "second", "summed", "logits"))
    for key in ("wide", "second", "summed", "logits"):
        tensor = qmodel.tensors[names[key]]
        assert tensor.dtype == np.int16 and tensor.zero_point == 0, key
    from aipu.sim.machine.arch import DEFAULT
    image = np.random.default_rng(1).normal(0, 1, (1, 3, 12, 12)).astype(np.float32)
    _check_every_tensor(qmodel, config or DEFAULT, image, seed=2)


def test_int16_tensors_are_closer_to_float(tmp_path):
    from aipu.compiler.driver import layer_report

    samples = {"image": np.random.default_rng(4).normal(0, 1, (8, 3, 12, 12)).astype(np.float32)}
    (graph, narrow), names = _quantized(tmp_path, ())
    (_, wide), _ = _quantized(tmp_path, ("wide", "logits"))
    sqnr = {label: {row["output"]: row["sqnr_db"] for row in layer_report(graph, qmodel, samples)}
            for label, qmodel in (("int8", narrow), ("int16", wide))}
    for key in ("wide", "logits"):     # their own rounding is gone; the 8-bit inputs' error remains
        assert sqnr["int16"][names[key]] > sqnr["int8"][names[key]] + 1, (key, sqnr)


def test_8_bit_readers_of_int16_and_an_unknown_name_are_refused(tmp_path):
    with pytest.raises(InputError, match="MAC array multiplies 8-bit operands"):
        _quantized(tmp_path, ("wide", "image"))
    with pytest.raises(InputError, match="element-wise unit reads 8-bit operands"):
        _quantized(tmp_path, ("squashed",))
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="--int16.*nope"):
        _compile(tmp_path, _network()[0], rng.normal(0, 1, (8, 3, 12, 12)).astype(np.float32),
                 QuantOptions(int16=("nope",)))


def test_cli_takes_int16_tensors(tmp_path, capsys):
    model, names = _network()
    onnx.save(model, tmp_path / "model.onnx")
    np.save(tmp_path / "calib.npy", np.random.default_rng(2).normal(0, 1, (8, 3, 12, 12)).astype(np.float32))
    assert main(["compile", str(tmp_path / "model.onnx"), "--calib", str(tmp_path / "calib.npy"), "--quiet",
                 "--int16", names["wide"], "--int16", names["logits"], "-o", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out
    assert any(names["wide"] in line and "int16" in line for line in table.splitlines())
    assert main(["run", str(tmp_path / "out"), "--input", str(tmp_path / "calib.npy"), "--compare-onnx"]) == 0


def test_an_int16_conv_takes_its_interpolated_table_before_store(tmp_path):
    from aipu.sim.machine.arch import DEFAULT
    from aipu.sim.machine.isa import LutMode, Opcode, Unit

    b = GraphBuilder(5, 3, 10)
    wide = b.conv("image", 3, 6, bn=False)
    squashed = b.node("Tanh", [wide])
    model = b.model(b.node("Flatten", [b.node("GlobalAveragePool", [squashed])]))
    rng = np.random.default_rng(3)
    _, qmodel = _compile(tmp_path, model, rng.normal(0, 1, (8, 3, 10, 10)).astype(np.float32),
                         QuantOptions(int16=(wide, squashed)))
    network, _ = _check_every_tensor(qmodel, DEFAULT, rng.normal(0, 1, (1, 3, 10, 10)).astype(np.float32), seed=1)
    tables = [command for command in network.program.queues[Unit.LUT] if command.opcode == Opcode.LUT]
    assert tables and all(command.mode == LutMode.INTERP16 for command in tables)
    assert wide not in network.plan.regions, "the conv's int16 output never reaches DRAM: the table is fused"
