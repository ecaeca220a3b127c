"""The Verilog co-simulation harness against Amaranth's simulator: the same programs, the same RtlResult (every
buffer and DRAM byte, every command's cycles, errors, token and DRAM faults, the cycle bound). Verilog runs on
Verilator, or on the simulators named in $AIPU_SIM (``icarus``, ``verilator,icarus``)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from aipu.sim.cosim.cocotb_run import run_on, run_verilog, run_words_on, verilog_backends
from aipu.sim.cosim.result import first_difference
from aipu.sim.cosim.verilog import (MIN_DRAM_BYTES, MIN_PROGRAM_DEPTH, build_shape, compact_zero_init, get_build,
                                   settle_at_time_zero, whole_word_writes)
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from tests.rtl.configs import CONFIGS, SMALL
from tests.sim.cosim.toy_units import CopyWordLoad, copy_command, expected_copies, timed_unit

UNITS = [CopyWordLoad, timed_unit(Unit.STORE)]
DRAM_BYTES = 2048
VERILOG = pytest.mark.parametrize("simulator", verilog_backends())
SLOW_CONFIGS = pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))


def random_image(config, rng) -> Memory:
    memory = Memory.create(config, rng.integers(0, 256, DRAM_BYTES, dtype=np.uint8).tobytes())
    for buffer in Buffer:
        memory.buffers[buffer][:] = rng.integers(0, 256, memory.buffers[buffer].size, dtype=np.uint8)
    return memory


def copy_program(config, rng, copies: int) -> Program:
    """``copies`` word copies, each handing a token to a STORE that waits for it, then FINISH."""
    program = Program(config)
    act_bytes = config.buffer(Buffer.ACT).bytes
    for _ in range(copies):
        program.append(copy_command(int(rng.integers(0, DRAM_BYTES)), int(rng.integers(0, act_bytes)),
                                    push={Unit.STORE}))
        program.append(Command.make(Opcode.STORE, pop={Unit.LOAD}))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    return program


def assert_same_run(reference, got) -> None:
    """Every field of two RtlResults; a memory difference is reported by space, byte address and both values."""
    assert first_difference(reference.memory, got.memory) is None, first_difference(reference.memory, got.memory)
    assert got.cycles == reference.cycles
    assert (got.total_cycles, got.done, got.errors, got.token_error, got.dram_faults) == (
        reference.total_cycles, reference.done, reference.errors, reference.token_error, reference.dram_faults)


def check_copies(config, simulator, seed: int, copies: int) -> None:
    rng = np.random.default_rng(seed)
    memory, program = random_image(config, rng), copy_program(config, rng, copies)
    reference = run_on("amaranth", program, memory, UNITS, max_cycles=20_000)
    got = run_on(simulator, program, memory, UNITS, max_cycles=20_000)
    assert reference.done and not reference.errors
    assert first_difference(expected_copies(program, memory), got.memory) is None
    assert_same_run(reference, got)


@VERILOG
def test_copies_match_amaranth_byte_for_byte_and_cycle_for_cycle(simulator):
    check_copies(SMALL, simulator, seed=1, copies=7)


@pytest.mark.slow
@VERILOG
@SLOW_CONFIGS
def test_copies_match_on_every_configuration(config, simulator):
    for seed in range(3):
        check_copies(config, simulator, seed, copies=7)


@VERILOG
def test_an_illegal_word_stops_its_unit_by_field_name_on_both(simulator):
    program = copy_program(SMALL, np.random.default_rng(2), copies=2)
    queues = {unit: [command.encode(SMALL) for command in queue] for unit, queue in program.queues.items()}
    queues[Unit.STORE][1] = Command.make(Opcode.CONV).encode(SMALL)      # another unit's opcode
    memory = random_image(SMALL, np.random.default_rng(3))
    reference = run_words_on("amaranth", queues, memory, UNITS, max_cycles=2_000)
    got = run_words_on(simulator, queues, memory, UNITS, max_cycles=2_000)
    assert [(e.unit, e.index) for e in reference.errors] == [(Unit.STORE, 1)]
    assert_same_run(reference, got)


@VERILOG
def test_a_missing_token_runs_into_max_cycles_on_both(simulator):
    program = Program(SMALL)
    program.append(Command.make(Opcode.STORE, pop={Unit.LOAD}))           # no LOAD ever pushes it
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    memory = random_image(SMALL, np.random.default_rng(4))
    reference = run_on("amaranth", program, memory, UNITS, max_cycles=123)
    got = run_on(simulator, program, memory, UNITS, max_cycles=123)
    assert (reference.total_cycles, reference.done) == (123, False)
    assert_same_run(reference, got)


@VERILOG
def test_a_dram_address_beyond_the_image_faults_on_both(simulator):
    """The build's DRAM is rounded up to a power of two; the fault still fires at the image's end."""
    program = Program(SMALL)
    program.append(copy_command(DRAM_BYTES + 64, 0))
    program.append(Command.make(Opcode.FINISH, unit=Unit.LOAD))
    memory = random_image(SMALL, np.random.default_rng(5))
    assert build_shape(2, DRAM_BYTES)[1] > DRAM_BYTES + 64
    reference = run_on("amaranth", program, memory, UNITS, max_cycles=2_000)
    got = run_on(simulator, program, memory, UNITS, max_cycles=2_000)
    assert reference.dram_faults == [Unit.LOAD]
    assert_same_run(reference, got)


def test_builds_are_shared_by_programs_up_to_a_power_of_two():
    assert build_shape(1, 100) == build_shape(MIN_PROGRAM_DEPTH, MIN_DRAM_BYTES) == (MIN_PROGRAM_DEPTH, MIN_DRAM_BYTES)
    assert build_shape(MIN_PROGRAM_DEPTH + 1, MIN_DRAM_BYTES + 1) == (2 * MIN_PROGRAM_DEPTH, 2 * MIN_DRAM_BYTES)


@VERILOG
def test_a_build_is_cached(simulator):
    first = get_build(SMALL, UNITS, program_depth=3, dram_bytes=DRAM_BYTES, simulator=simulator)
    again = get_build(SMALL, UNITS, program_depth=9, dram_bytes=100, simulator=simulator)
    assert first == again and first.directory.is_dir()


def test_verilog_rewrites_keep_the_design():
    """Zero initialisation as a loop, and Icarus's time-0 trigger and bare connections, on the text Yosys writes."""
    text = ("  reg [7:0] mem [2:0];\n  initial begin\n    mem[0] = 8'h00;\n    mem[1] = 8'h00;\n    mem[2] = 8'h00;\n"
            "  end\n  reg \\$auto$verilog_backend.cc:2355:dump_module$1  = 0;\n")
    compact = compact_zero_init(text)
    assert "for (i = 0; i <= 2; i = i + 1) mem[i] = 0;" in compact and "8'h00" not in compact
    assert "initial #0 \\$auto$verilog_backend.cc:2355:dump_module$1  = 1;" in settle_at_time_zero(compact)
    bare = "  always @*\n    \\$225 [41:7] = retired[41:7];\n"        # a connection into part of a reg
    assert settle_at_time_zero(bare) == bare + "  initial #0 \\$225 [41:7] = retired[41:7];\n"
    initialised = "  reg [7:0] mem [1:0];\n  initial begin\n    mem[0] = 8'h05;\n    mem[1] = 8'h00;\n  end\n"
    assert compact_zero_init(initialised) == initialised
    preloaded = compact_zero_init(text, preload=["mem"])
    assert '$value$plusargs("aipu_preload_mem=%s", path)) $readmemh(path, mem);' in preloaded
    assert compact_zero_init(text, preload=["other"]) == compact


def _byte_lane_memory(write_ports: int) -> str:
    """The Verilog Amaranth writes for a 4 x 32-bit memory with byte-enabled write ports."""
    from amaranth.back import verilog as amaranth_verilog
    from amaranth.hdl import Module
    from amaranth.lib.memory import Memory

    m = Module()
    m.submodules.mem = mem = Memory(shape=32, depth=4, init=[])
    read = mem.read_port()
    ports = [mem.write_port(granularity=8) for _ in range(write_ports)]
    return amaranth_verilog.convert(m, ports=[read.addr, read.data] + [signal for port in ports for signal in
                                                                       (port.addr, port.data, port.en)])


def test_a_memory_of_one_byte_lane_port_is_written_a_word_at_a_time():
    text = _byte_lane_memory(1)
    merged = whole_word_writes(text)
    assert text.count("if (") - merged.count("if (") == 3         # four lane tests became one
    assert "<= (mem[" in merged and "& ~{{8{" in merged and "[31:24]" not in merged.split("initial")[-1]
    two_writers = _byte_lane_memory(2)            # another port's lanes would be lost: left as it is
    assert whole_word_writes(two_writers) == two_writers


@pytest.mark.slow
@VERILOG
def test_waves_are_written_on_request(simulator, tmp_path):
    rng = np.random.default_rng(6)
    program = copy_program(SMALL, rng, copies=1)
    run_verilog(program, random_image(SMALL, rng), UNITS, simulator=simulator, max_cycles=500, waves=True,
                run_dir=tmp_path)
    assert [path for path in tmp_path.iterdir() if path.suffix in (".vcd", ".fst") and path.stat().st_size]


def test_aipu_rtl_verilog_writes_every_unit_and_a_resettable_top(tmp_path):
    """The exported System keeps its reset port (the co-simulation builds drop it) and its preload hook."""
    from aipu.app.cli import main
    from aipu.sim.cosim.verilog import available_units

    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL.to_dict()))
    assert main(["rtl", "verilog", "--config", str(config), "--dram-bytes", "4096", "-o", str(tmp_path / "v")]) == 0
    for unit in available_units():
        name = unit.name.lower()
        assert f"module aipu_{name}(" in (tmp_path / "v" / f"{name}.v").read_text()
    top = (tmp_path / "v" / "aipu_system.v").read_text()
    assert "input rst;" in top and '$value$plusargs("aipu_preload_dram=%s", path)) $readmemh(path, dram);' in top
    npu = (tmp_path / "v" / "aipu_npu.v").read_text()
    assert "module aipu_npu(" in npu and "input rst;" in npu
    assert all(f" {port};" in npu for port in ("s_axil_awaddr", "m_axi_araddr", "m_axi_rdata", "irq"))
    build = get_build(SMALL, UNITS, program_depth=1, dram_bytes=DRAM_BYTES)       # Verilator's
    assert "input rst;" not in (build.directory / "aipu_system.v").read_text()


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog (apt-get install iverilog)")
def test_an_output_left_x_is_an_error_not_a_zero(monkeypatch, tmp_path):
    """Without the bare-connection rewrite Icarus leaves the toy System's dram_fault bits of absent units X; the
    testbench reads outputs strictly at the end, so the run fails naming them instead of reading 0."""
    from aipu.sim.cosim import verilog

    trigger_only = verilog._TIME_ZERO_TRIGGER
    monkeypatch.setattr(verilog, "settle_at_time_zero",
                        lambda text: trigger_only.sub(r"\g<0>\n\1initial #0 \2 = 1;", text))
    monkeypatch.setenv("AIPU_RTL_CACHE", str(tmp_path))        # the broken build must not enter the shared cache
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError, match="outputs .*dram_fault.* hold X or Z bits"):
        run_on("icarus", copy_program(SMALL, rng, 2), random_image(SMALL, rng), UNITS, max_cycles=200)
