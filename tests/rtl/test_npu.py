"""The NPU top (rtl/npu.py) driven as a host drives it: the program image in the testbench DRAM, PROGRAM_BASE,
DRAM_BYTES and START over AXI4-Lite, ``irq`` at the end. Compiled networks (a conv, a MobileNet-like block) and
real networks' layer shapes run bit-exact with the interpreter, on the cycle model's cycles (random programs:
tests/sim/test_cycle_npu.py); no unit touches a banked word its command does not use; every error, a bank
conflict included, stops the run with ERROR naming it and raises the interrupt."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from aipu.sim.cosim.cocotb_run import verilog_backends
from aipu.sim.cosim.dram.model import ErrorRange, Resp
from aipu.sim.cosim.npu_amaranth import run_words_npu_amaranth
from aipu.sim.cosim.npu_verilog import run_npu_on
from aipu.sim.cosim.result import first_mismatch
from aipu.sim.cosim.verilog import NPU_TOPLEVEL, npu_verilog
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, Buffer, DType
from aipu.sim.machine.isa import EltwiseOp, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from aipu.sim.machine.program_image import FETCH_ERRORS
from aipu.sim.machine.registers import BY_NAME, FETCHER, ErrorCause, field_value
from tests.rtl.configs import SMALL
from tests.rtl.lint import assert_lint_clean
from tests.sim.cosim.test_layers import NETWORK_SHAPES

MAX_CYCLES = 20_000
# Verilator -Wall warnings that Amaranth's Verilog has in every design, none a defect: registers declared with
# their reset value and assigned in processes (PROCASSINIT), operands Yosys writes narrower or wider than the
# value they meet (WIDTHEXPAND, WIDTHTRUNC), names kept for intermediate values and port aliases
# (UNUSEDSIGNAL), one file holding every module (DECLFILENAME), and its case statements on the states a
# switch names, without a default that could never be taken (CASEINCOMPLETE).
ACCEPTED_LINT = ("PROCASSINIT", "WIDTHEXPAND", "WIDTHTRUNC", "UNUSEDSIGNAL", "DECLFILENAME", "CASEINCOMPLETE")


@pytest.mark.parametrize("config", [SMALL, pytest.param(DEFAULT, marks=pytest.mark.slow)], ids=["small", "default"])
def test_verilator_lint_finds_nothing_else_in_the_npu(config, tmp_path):
    """`aipu rtl verilog`'s aipu_npu.v, what a chip team reads into its flow, under Verilator's -Wall."""
    source = tmp_path / f"{NPU_TOPLEVEL}.v"
    source.write_text(npu_verilog(config))
    assert_lint_clean(source, NPU_TOPLEVEL, ACCEPTED_LINT)


def _compile(root, model, size: int, *flags: str):
    """``model`` compiled for SMALL by `aipu compile` (and ``flags``), calibrated on random images of ``size``."""
    from aipu.app.cli import main
    from aipu.compiler.program_dir import read_program_dir

    onnx.save(model, root / "model.onnx")
    np.savez(root / "calib.npz", image=np.random.default_rng(0).normal(0, 1, (8, 3, size, size)).astype(np.float32))
    (root / "small.json").write_text(json.dumps(SMALL.to_dict()))
    assert main(["compile", str(root / "model.onnx"), "--calib", str(root / "calib.npz"), "--config",
                 str(root / "small.json"), "-o", str(root / "out"), "--quiet", *flags]) == 0
    return read_program_dir(root / "out")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A 3->6 channel 3x3 conv with ReLU on 8x8 images."""
    from aipu.app.models.synthetic import GraphBuilder

    builder = GraphBuilder(3, 3, 8)
    return _compile(tmp_path_factory.mktemp("npu"), builder.model(builder.node("Relu", [builder.conv("image", 3, 6)])),
                    8)


def _status(result) -> dict[str, int]:
    return {name: field_value("STATUS", name, result.registers["STATUS"]) for name in ("BUSY", "DONE", "ERROR")}


def _error(result) -> tuple[int, int, int]:
    return tuple(field_value("ERROR", name, result.registers["ERROR"]) for name in ("CAUSE", "UNIT", "FIELD"))


@pytest.mark.parametrize("backend", verilog_backends())
def test_a_compiled_network_runs_from_the_host_interface_bit_exact_on_the_model_s_cycles(compiled, backend):
    """The bench (NPU + testbench DRAM in logic) under cocotb: cocotbext-axi's AXI4-Lite master is the host. The
    run ends DONE with the DONE interrupt, every byte the interpreter's, every command on the cycle model's
    (dram="npu") start and retire."""
    from aipu.sim.cycle import simulate

    program, memory = compiled.program, Memory.create(compiled.program.config, compiled.dram)
    got = run_npu_on(backend, program, memory, max_cycles=MAX_CYCLES)
    assert _status(got) == {"BUSY": 0, "DONE": 1, "ERROR": 0} and got.registers["IRQ_STATUS"] == 1
    assert first_mismatch(program, run(program, memory), got) is None
    model = simulate(program, memory, dram="npu")
    assert got.cycles == model.cycles and got.total_cycles == model.total_cycles
    assert got.cycles[Unit.LOAD][0] == (48, 105)     # the fetcher's start-up, then the bridge shared with it


@pytest.mark.parametrize("backend", verilog_backends())
@pytest.mark.parametrize("weights", ["int8", "int4", "int4-dual", "codebook:16"])
def test_a_mobilenet_like_network_runs_bit_exact_on_verilog_on_the_model_s_cycles(tmp_path, backend, weights):
    """Depthwise conv, squeeze-excite (hard-sigmoid gate, Mul), hard-swish, a residual Add, global pooling and a
    softmax head: about 800 commands on SMALL, every one on the cycle model's (dram="npu") start and retire;
    with INT4, dual INT4 or codebook weights in every layer that can take them (the stem and the depthwise conv
    keep int8; LOAD expands the codebook indices; REQUANT adds the dual planes)."""
    from aipu.app.models.synthetic import mobilenet_block_net
    from aipu.sim.cycle import simulate

    directory = _compile(tmp_path, mobilenet_block_net(size=16), 16, "--weights", weights)
    w_types = {command.w_type for command in directory.program.queues[Unit.CONV] if command.opcode == Opcode.CONV}
    assert w_types == ({DType.INT8, DType.INT4} if weights.startswith("int4") else {DType.INT8})
    dual = {command.dual for command in directory.program.queues[Unit.REQUANT] if command.opcode == Opcode.REQUANT}
    assert dual == ({0, 1} if weights == "int4-dual" else {0})
    expanding = [command for command in directory.program.queues[Unit.LOAD] if command.args.get("index_bits")]
    assert bool(expanding) == (weights == "codebook:16")
    program, memory = directory.program, Memory.create(directory.program.config, directory.dram)
    got = run_npu_on(backend, program, memory, max_cycles=200_000)
    assert got.done and not got.errors
    assert first_mismatch(program, run(program, memory), got) is None
    model = simulate(program, memory, dram="npu")
    assert got.cycles == model.cycles and got.total_cycles == model.total_cycles


@pytest.mark.parametrize("backend", verilog_backends())
def test_a_w4a4_chain_runs_bit_exact_on_verilog_on_the_model_s_cycles(tmp_path, backend):
    """INT4 weights and INT4 activations between them (docs/compiler.md §3.3): REQUANT writes packed INT4, STORE
    and LOAD move the packed bytes, CONV reads them with in_type INT4; SMALL splits the wide tensor into chunks."""
    from aipu.sim.cycle import simulate
    from tests.compiler.onnx_models import w4a4_chain

    directory = _compile(tmp_path, w4a4_chain(), 16, "--weights", "int4", "--activations", "int4")
    program, memory = directory.program, Memory.create(directory.program.config, directory.dram)
    assert DType.INT4 in {command.in_type for command in program.queues[Unit.CONV] if command.opcode == Opcode.CONV}
    got = run_npu_on(backend, program, memory, max_cycles=400_000)
    assert got.done and not got.errors
    assert first_mismatch(program, run(program, memory), got) is None
    model = simulate(program, memory, dram="npu")
    assert got.cycles == model.cycles and got.total_cycles == model.total_cycles


def _finish(unit: Unit) -> bytes:
    return Command.make(Opcode.FINISH, unit=unit).encode(SMALL)


def _memory() -> Memory:
    return Memory.create(SMALL, np.arange(256, dtype=np.uint8))


def _load(dram_addr: int) -> bytes:
    return Command.make(Opcode.LOAD, buffer=0, sram_addr=0, dram_addr=dram_addr, elem_type=0, y_size=1, x_size=1,
                        run=16).encode(SMALL)


def test_an_illegal_command_word_stops_the_npu_naming_unit_and_field():
    illegal = bytearray(_finish(Unit.CONV))
    illegal[0] = 0x7F                       # no such opcode
    got = run_words_npu_amaranth({Unit.CONV: [bytes(illegal)], Unit.STORE: [_finish(Unit.STORE)]}, _memory(),
                                 max_cycles=MAX_CYCLES)
    assert _status(got)["ERROR"] and got.registers["IRQ_STATUS"] == 2
    cause, unit, _ = _error(got)
    assert (cause, unit) == (ErrorCause.ILLEGAL_COMMAND, Unit.CONV)
    assert [str(error) for error in got.errors] == ["CONV[0] stopped on field opcode"]


def test_a_dram_address_beyond_dram_bytes_stops_the_npu():
    got = run_words_npu_amaranth({Unit.LOAD: [_load(1 << 20), _finish(Unit.LOAD)]}, _memory(),
                                 max_cycles=MAX_CYCLES)
    assert _status(got)["ERROR"] and got.registers["IRQ_STATUS"] == 2
    assert _error(got)[:2] in {(ErrorCause.DRAM_RANGE, Unit.LOAD), (ErrorCause.ENGINE_FAULT, Unit.LOAD)}


def test_an_axi_error_response_stops_the_npu_naming_the_requester():
    got = run_words_npu_amaranth({Unit.LOAD: [_load(0x40), _finish(Unit.LOAD)]}, _memory(),
                                 max_cycles=MAX_CYCLES, errors=[ErrorRange(0x40, 0x50, Resp.SLVERR)])
    assert _status(got)["ERROR"]
    assert _error(got) == (ErrorCause.AXI_RESPONSE, Unit.LOAD, Resp.SLVERR)


def test_a_program_base_the_fetcher_refuses_stops_the_npu():
    got = run_words_npu_amaranth({Unit.LOAD: [_finish(Unit.LOAD)]}, _memory(), max_cycles=MAX_CYCLES, base_offset=4)
    assert _status(got)["ERROR"]
    assert _error(got) == (ErrorCause.PROGRAM_IMAGE, FETCHER, FETCH_ERRORS.index("program_base"))


def test_a_register_written_while_running_stops_the_npu():
    async def rewrite_base(ctx, npu):
        from aipu.sim.cosim.axil import write
        await write(ctx, npu, BY_NAME["PROGRAM_BASE_LO"].offset, 0)

    queues = {Unit.LOAD: [_load(0), _finish(Unit.LOAD)]}
    got = run_words_npu_amaranth(queues, _memory(), max_cycles=MAX_CYCLES, while_running=rewrite_base)
    assert _status(got)["ERROR"]
    assert _error(got) == (ErrorCause.REGISTER_WRITE_WHILE_BUSY, 0, BY_NAME["PROGRAM_BASE_LO"].offset)


def test_finish_with_a_token_left_stops_the_npu():
    push = Command.make(Opcode.LOAD, buffer=0, sram_addr=0, dram_addr=0, elem_type=0, y_size=1, x_size=1, run=16,
                        push=[Unit.CONV]).encode(SMALL)
    got = run_words_npu_amaranth({Unit.LOAD: [push, _finish(Unit.LOAD)]}, _memory(), max_cycles=MAX_CYCLES)
    assert _status(got)["ERROR"] and _error(got)[0] == ErrorCause.TOKEN_ERROR


def test_two_units_in_one_bank_at_once_stop_the_npu_on_a_bank_conflict():
    """A program that breaks the bank rule (the interpreter refuses it, a host may still start it): ELTWISE reads
    both operands from OUT's bank 0 (both ports of a sub-bank) while STORE, unordered, reads the same bank. The
    third read of a sub-bank finds its ports taken: the run stops, naming STORE and OUT."""
    eltwise = Command.make(Opcode.ELTWISE, op=EltwiseOp.ADD, a_buf=Buffer.OUT, a_addr=0, b_buf=Buffer.OUT, b_addr=0,
                           dst_addr=SMALL.bank_bytes(Buffer.OUT), count=256, a_multiplier=1 << 14,
                           b_multiplier=1 << 14, a_shift=15, b_shift=15, qmin=-128, qmax=127).encode(SMALL)
    store = Command.make(Opcode.STORE, sram_addr=0, dram_addr=0, elem_type=0, y_size=1, x_size=16, run=16,
                         dram_x_stride=16).encode(SMALL)
    got = run_words_npu_amaranth({Unit.POOL: [eltwise], Unit.STORE: [store, _finish(Unit.STORE)]}, _memory(),
                                 max_cycles=MAX_CYCLES)
    assert _status(got)["ERROR"] and got.registers["IRQ_STATUS"] == 2
    assert _error(got) == (ErrorCause.BANK_CONFLICT, Unit.STORE, Buffer.OUT)
    assert [str(error) for error in got.errors] == ["STORE[0] stopped on a bank conflict in OUT"]


def _footprints(program, memory, monkeypatch) -> dict:
    """Per (unit, command index): the (buffer name, first byte, end byte) spans the interpreter's command
    touches, as it declares them to its race check."""
    from aipu.sim.interpreter import preparer

    spans, record = {}, preparer.Preparer._record

    def recording(self, space, low, high, written, pattern=None):
        spans.setdefault((self.unit, self.index), []).append((preparer.space_name(space), low, high))
        return record(self, space, low, high, written, pattern)

    monkeypatch.setattr(preparer.Preparer, "_record", recording)
    run(program, memory)
    return spans


def _words_outside_footprints(program, memory, footprints) -> list[tuple]:
    """Run ``program`` on the NPU (Amaranth) and list every read or write of a banked buffer word that the
    command its unit runs does not touch: (unit, port, command index, word)."""
    from aipu.rtl.ports import port_space
    from aipu.sim.machine.arch import BANKED_BUFFERS

    outside = []

    async def watch(ctx, npu):
        ports = [(unit, name, port_space(name)[0], getattr(component, name)) for unit, component in npu.units.items()
                 for name in component.signature.members
                 if port_space(name) is not None and port_space(name)[0] in BANKED_BUFFERS]
        started = {unit: -1 for unit in npu.units}
        while not ctx.get(npu.irq):
            for unit, component in npu.units.items():
                started[unit] += ctx.get(component.start)
            for unit, name, buffer, port in ports:
                if ctx.get(port.en) and ctx.get(getattr(port, "mask", 1)):
                    word = ctx.get(port.addr) * program.config.buffer(buffer).port_bytes
                    spans = footprints.get((unit, started[unit]), [])
                    if not any(space == buffer.name and low < word + program.config.buffer(buffer).port_bytes
                               and word < high for space, low, high in spans):
                        outside.append((unit.name, name, started[unit], word))
            await ctx.tick()

    queues = {unit: [command.encode(program.config) for command in queue] for unit, queue in program.queues.items()}
    got = run_words_npu_amaranth(queues, memory, max_cycles=1, while_running=watch)
    assert got.done and not got.errors
    return outside


def test_units_touch_only_the_words_their_commands_use(compiled, monkeypatch):
    """The bank rule holds only if no unit reads or writes a word outside its command's footprint (a next-word
    read past a run's end would reach into a bank another unit may own): every banked port access of the
    compiled conv (CONV, REQUANT, LOAD, STORE), checked against the interpreter's spans of the command the unit
    runs in that cycle."""
    program, memory = compiled.program, Memory.create(compiled.program.config, compiled.dram)
    assert _words_outside_footprints(program, memory, _footprints(program, memory, monkeypatch)) == []


def _check_shaped_layer(config, name: str, shape) -> None:
    """A real network's layer shape lowered by the compiler, on the Verilog NPU: every byte the interpreter's,
    the output the layer's reference, every command on the cycle model's (dram="npu") cycles."""
    from aipu.app.sample_layers import shaped_layer
    from aipu.compiler.lowering.conv_layers import lower_conv_layer
    from aipu.sim.cycle import simulate

    channels, size, out_channels, kernel, stride, groups = shape
    layer = shaped_layer(np.random.default_rng(size), channels, size, out_channels, kernel, stride=stride,
                         groups=groups)
    lowered = lower_conv_layer(layer, config)
    program, memory = lowered.program, lowered.memory()
    for backend in verilog_backends():
        got = run_npu_on(backend, program, memory, max_cycles=5_000_000)
        assert got.done and not got.errors, name
        assert first_mismatch(program, run(program, memory), got) is None, name
        assert np.array_equal(lowered.read_output(got.memory), layer.reference()), name
        assert got.cycles == simulate(program, memory, dram="npu").cycles, name


@pytest.mark.parametrize("name", list(NETWORK_SHAPES))
def test_network_layer_shapes_run_on_the_npu_on_the_model_s_cycles(name):
    _check_shaped_layer(SMALL, name, NETWORK_SHAPES[name][0])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NETWORK_SHAPES))
def test_network_layers_at_their_real_size_run_on_the_npu(name):
    _check_shaped_layer(DEFAULT, name, NETWORK_SHAPES[name][1])
