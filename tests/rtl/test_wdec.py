"""WDEC in the System against the interpreter (every WEIGHT byte, every command's cycles) and against the
codec's profile decoder bin by bin (valid streams, corrupted streams, random bytes), at 1, 2 and 4 bins a
cycle; its faults by name."""
from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from aipu.app.bench.rtl import demo_model_streams
from aipu.codec import CodecError
from aipu.codec.npu_profile import decode_profile_stream, encode_parts_stream, encoder_options
from aipu.rtl.system import System
from aipu.rtl.wdec import Wdec
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.synth import memory_ports, over_two_ports
from aipu.sim.cosim.stimulus.wdec import layer_stream, random_stimulus, random_weights, streams_stimulus
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import DEFAULT, Buffer, hardware_config_from_dict
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from tests.rtl.checks import assert_matches
from tests.rtl.configs import CONFIGS, NON_SQUARE, SMALL, wdec_cascade
from tests.rtl.lint import assert_lint_clean
from tests.rtl.test_npu import ACCEPTED_LINT

CASCADES = (1, 2, 4)
# Every configuration at every cascade: B = 1 as it is, B = 2 and 4 with the DRAM word widened where it must be
WDEC_CONFIGS = {f"{name}-b{bins}": wdec_cascade(config, bins) for bins in CASCADES for name, config in CONFIGS.items()}
EVERY_WDEC_CONFIG = pytest.mark.parametrize("config", list(WDEC_CONFIGS.values()), ids=list(WDEC_CONFIGS))
EVERY_CASCADE = pytest.mark.parametrize("config", [wdec_cascade(SMALL, bins) for bins in CASCADES],
                                        ids=[f"small-b{bins}" for bins in CASCADES])


@EVERY_WDEC_CONFIG
def test_random_layers_decode_byte_exact_with_the_interpreter_in_the_predicted_cycles(config):
    assert_matches(random_stimulus(config, np.random.default_rng(list(WDEC_CONFIGS.values()).index(config)), 4))


@pytest.mark.slow
def test_a_thousand_random_layers():
    rng = np.random.default_rng(1000)
    for _ in range(1000 // 20):
        config = wdec_cascade(SMALL if rng.random() < 0.5 else DEFAULT, int(rng.choice(CASCADES)))
        assert_matches(random_stimulus(config, rng, 20))


@pytest.mark.slow
@pytest.mark.parametrize("bins", CASCADES)
def test_the_demo_models_conv_layers(bins):
    assert_matches(streams_stimulus(wdec_cascade(DEFAULT, bins), demo_model_streams(), np.random.default_rng(7)))


# --- bin by bin ------------------------------------------------------------------------------------------------
def rtl_bins(config, stream: bytes, shape) -> tuple[list[tuple[int, int]], str | None]:
    """Every (ctxIdx, bin) the hardware decodes for one WDEC command, and the error field it stops on."""
    case = streams_stimulus(config, [(stream, shape)], np.random.default_rng(0))
    queues = {unit: [command.encode(config) for command in queue] for unit, queue in case.program.queues.items()}
    system = System(config, [Wdec], program_depth=2, dram_bytes=case.memory.dram.size, image=case.memory,
                    queues=queues)
    unit = system.units[Unit.WDEC]
    bins: list[tuple[int, int]] = []
    outcome = {}

    async def testbench(ctx):
        ctx.set(system.queue_lengths[Unit.WDEC], len(queues[Unit.WDEC]))
        ctx.set(system.run, 1)
        for _ in range(200 * len(stream) + 2000):
            for valid, context, bin_ in zip(unit.debug_bin_valid, unit.debug_bin_ctx, unit.debug_bin):
                if ctx.get(valid):
                    bins.append((ctx.get(context), ctx.get(bin_)))
            await ctx.tick()
            if ctx.get(system.done) or ctx.get(system.failed):
                break
        outcome["error"] = unit.error_names[ctx.get(unit.error_field)] if ctx.get(unit.error) else None
        outcome["done"] = ctx.get(system.done)

    sim = Simulator(system)
    sim.add_clock(1e-9)
    sim.add_testbench(testbench)
    sim.run()
    assert outcome["done"] or outcome["error"], "WDEC neither finished nor stopped"
    return bins, outcome["error"]


def software_bins(stream: bytes, shape) -> tuple[list[tuple[int, int]], bool]:
    trace: list[tuple[int, int]] = []
    try:
        decode_profile_stream(stream, shape, trace)
    except CodecError:
        return trace, False
    return trace, True


def _agree_bin_by_bin(config, stream: bytes, shape) -> str | None:
    """The hardware decodes the software's bins; it stops where the software refuses (a bin or an element
    earlier where it refuses a level outside int8 or a profile element before the software has read it all)."""
    hardware, error = rtl_bins(config, stream, shape)
    software, decodes = software_bins(stream, shape)
    if decodes:
        assert error is None and hardware == software
    else:
        assert error is not None and hardware == software[:len(hardware)]
        if error not in ("levels", "profile"):
            assert hardware == software
    return error


@EVERY_WDEC_CONFIG
def test_bins_equal_the_softwares_trace(config):
    rng = np.random.default_rng(5)
    shape = (3, 2, 3, 3)
    assert _agree_bin_by_bin(config, layer_stream(random_weights(rng, shape)), shape) is None


@EVERY_CASCADE
def test_corrupted_and_random_streams_stop_where_the_software_stops(config):
    rng = np.random.default_rng(11)
    errors = set()
    for index in range(12):
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 5)), 3, 1)
        stream = bytearray(layer_stream(random_weights(rng, shape)))
        if index % 3 == 0:
            stream = bytearray(rng.integers(0, 256, size=int(rng.integers(1, 40)), dtype=np.uint8).tobytes())
        else:       # keep the header, corrupt the CTUs: the context-coded paths run on garbage
            start = int(rng.integers(18, len(stream)))
            stream[start:] = rng.integers(0, 256, size=len(stream) - start, dtype=np.uint8).tobytes()
        errors.add(_agree_bin_by_bin(config, bytes(stream), shape))
    assert {"stream", "profile"} <= errors


@EVERY_CASCADE
def test_a_stream_of_ones_and_long_zero_runs(config):
    shape = (1, 1, 1, 1)
    for stream in (b"\xff" * 12, b"\xff\x80" + bytes(30), bytes(40), b"\x00\x01" * 20):
        _agree_bin_by_bin(config, stream, shape)


@pytest.mark.parametrize("bins", CASCADES[1:])
def test_leaves_cut_by_zero_run_steps(bins):
    """A near-empty layer whose zero runs fall inside leaves: a lane that needs a zero-run step ends the
    cycle's cascade, lane 0 takes the step next cycle; bin by bin and cycle by cycle as the formula."""
    rng = np.random.default_rng(12)
    shape = (16, 4, 3, 3)
    while True:
        weights = np.where(rng.random(shape) < 0.01, rng.integers(-30, 31, shape), 0).astype(np.int8)
        stream = layer_stream(weights)
        if decode_profile_stream(stream, shape).leaf_runs.sum() > weights.size:
            break
    config = wdec_cascade(SMALL, bins)
    assert _agree_bin_by_bin(config, stream, shape) is None
    assert_matches(streams_stimulus(config, [(stream, shape)], rng))


# --- faults ----------------------------------------------------------------------------------------------------
def _fault(config, stream: bytes, **fields) -> tuple[str, np.ndarray]:
    command = Command.make(Opcode.WDEC, dram_addr=8, length=len(stream), **fields)
    program = Program(config)
    program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    memory = Memory.create(config, len(stream) + 64)
    memory.dram[8:8 + len(stream)] = np.frombuffer(stream, np.uint8)
    with pytest.raises(ExecutionError):
        run(program, memory)
    result = run_amaranth(program, memory, [Wdec], max_cycles=100 * len(stream) + 2000)
    (error,) = result.errors
    return error.field, result.memory.buffers[Buffer.WEIGHT]


@EVERY_CASCADE
def test_faults_name_the_field(config):
    rng = np.random.default_rng(3)
    weights = random_weights(rng, (4, 3, 2, 2))
    stream = layer_stream(weights)
    shape = dict(out_c=4, in_c=3, k_h=2, k_w=2)
    weight_bytes = config.buffer(Buffer.WEIGHT).bytes
    field, buffer = _fault(config, stream, wgt_addr=weight_bytes - 47, **shape)
    assert field == "wgt_addr" and not buffer.any()      # refused before anything is written
    assert _fault(config, stream, wgt_addr=0, **{**shape, "k_w": 1})[0] == "k_w"
    assert _fault(config, stream, wgt_addr=0, **{**shape, "out_c": 5})[0] == "out_c"
    assert _fault(config, stream[:-1], wgt_addr=0, **shape)[0] == "stream"
    assert _fault(config, stream + b"\0", wgt_addr=0, **shape)[0] == "stream"
    wide = random_weights(rng, (16, 3, 2, 2)).astype(np.int16)
    wide[14, 2, 1, 0] = 200                   # in the second cube of kernels: the first has been written
    field, buffer = _fault(config, layer_stream(wide), wgt_addr=0, **{**shape, "out_c": 16})
    assert field == "levels"
    assert buffer[:8 * 3 * 2 * 2].any() and not buffer[8 * 3 * 2 * 2:].any()      # docs/rtl-wdec.md, "Faults"


# Several part decoders: a configuration each, every B among them
PARTS_CONFIGS = {"small-e3-b1": wdec_cascade(SMALL, 1, 3), "default-e4-b4": wdec_cascade(DEFAULT, 4, 4),
                 "mac8x16-e2-b2": wdec_cascade(NON_SQUARE, 2, 2)}
EVERY_PARTS_CONFIG = pytest.mark.parametrize("config", list(PARTS_CONFIGS.values()), ids=list(PARTS_CONFIGS))


@EVERY_PARTS_CONFIG
def test_streams_of_several_parts_decode_on_as_many_decoders_in_the_predicted_cycles(config):
    assert_matches(random_stimulus(config, np.random.default_rng(list(PARTS_CONFIGS.values()).index(config)), 4))


def test_decoders_finishing_levels_every_cycle_take_turns_at_the_weight_port():
    """Zero weights end a level every cycle on every decoder: the write arbiter serves one a cycle, the others
    hold (their engines wait), in the cycles the model predicts."""
    config = wdec_cascade(SMALL, 1, 3)
    weights = np.zeros((6, 4, 3, 3), dtype=np.int8)
    weights[1, 2, 0, 1] = 5
    assert_matches(streams_stimulus(config, [(encode_parts_stream(weights, 3), weights.shape, 3)],
                                    np.random.default_rng(2)))


def test_parts_beyond_the_decoders_are_refused_by_both():
    """K parts need K part decoders (and K <= out_c): the interpreter and the RTL refuse more on ``parts``,
    before anything is written; a header whose lengths are not the stream's stops both on ``stream``."""
    config = wdec_cascade(SMALL, 1, 2)
    weights = random_weights(np.random.default_rng(6), (4, 3, 2, 2))
    shape = dict(out_c=4, in_c=3, k_h=2, k_w=2)
    field, buffer = _fault(config, encode_parts_stream(weights, 3), wgt_addr=0, parts=3, **shape)
    assert field == "parts" and not buffer.any()
    stream = bytearray(encode_parts_stream(weights, 2))
    assert _fault(config, bytes(stream[:7]), wgt_addr=0, parts=2, **shape)[0] == "stream"
    for index, length in ((0, 0), (1, 1)):
        corrupted = bytearray(stream)
        corrupted[4 * index:4 * index + 4] = length.to_bytes(4, "little")
        assert _fault(config, bytes(corrupted), wgt_addr=0, parts=2, **shape)[0] == "stream"


def test_a_cascade_needs_its_bits_in_a_dram_word():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)      # the refused unit is never elaborated
        with pytest.raises(ValueError, match="at least 52 bits to decode 2 bins a cycle") as refused:
            Wdec(hardware_config_from_dict({**SMALL.to_dict(), "wdec": {"bins_per_cycle": 2}}))
        del refused                     # its traceback holds the half-built unit: collected here, not later
        gc.collect()


def test_dram_addr_beyond_the_address_space_is_refused():
    config = SMALL
    command = Command.make(Opcode.WDEC, dram_addr=(1 << config.dram.address_bits) - 4, length=8, wgt_addr=0,
                           out_c=1, in_c=1, k_h=1, k_w=1)
    program = Program(config)
    program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    result = run_amaranth(program, Memory.create(config, 64), [Wdec], max_cycles=100)
    assert [error.field for error in result.errors] == ["dram_addr"]


def test_a_stream_outside_the_profile_is_refused_by_both_decoders():
    rng = np.random.default_rng(4)
    weights = random_weights(rng, (6, 5, 3, 3))
    stream = layer_stream(weights, options=encoder_options().__class__())      # the full syntax's defaults
    with pytest.raises(CodecError, match="npu profile"):
        decode_profile_stream(stream, weights.shape)
    assert _agree_bin_by_bin(SMALL, stream, weights.shape) == "profile"


@pytest.mark.parametrize("bins", CASCADES)
def test_converts_to_verilog(bins):
    assert "module wdec" in verilog.convert(Wdec(wdec_cascade(DEFAULT, bins)), name="wdec")


@pytest.mark.parametrize("bins,engines", [(2, 1), (4, 1), (2, 3)])
def test_every_memory_has_two_ports_at_any_cascade(bins, engines):
    """Each part decoder's context memory is ``bins`` banks of one read and one write port
    (tests/rtl/test_memories.py checks the configurations' own B = 1)."""
    memories = memory_ports(Wdec(wdec_cascade(DEFAULT, bins, engines)))
    assert over_two_ports(memories) == []
    for index in range(engines):
        assert sum(memory["name"].startswith(f"part{index}.contexts.bank") for memory in memories) == bins


@pytest.mark.parametrize("bins,engines", [(2, 1), (4, 1), (2, 3)])
def test_verilator_lint_finds_nothing_else_at_any_cascade(bins, engines, tmp_path):
    """The NPU's lint (tests/rtl/test_npu.py, the configurations' own B = 1 and one part decoder) on WDEC alone
    at B = 2 and 4, and with three part decoders."""
    source = tmp_path / "wdec.v"
    source.write_text(verilog.convert(Wdec(wdec_cascade(SMALL, bins, engines)), name="wdec"))
    assert_lint_clean(source, "wdec", ACCEPTED_LINT)
