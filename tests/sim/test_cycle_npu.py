"""The cycle model's ``dram="npu"`` mode against the NPU top (rtl/npu.py): every command's (start, retire) equal,
on random LOAD/STORE programs, on random weight streams beside LOADs and on conv layers
with compressed weights, on SMALL and on configurations with other DRAM words and latencies (DEFAULT's
100-cycle DRAM in the slow suite). SMALL's programs run on the Verilog NPU under Verilator (one build, shared
with tests/rtl/test_npu.py, then seconds a run), the other configurations in Amaranth's simulator (no build). The bridge's write side as one count
(never refused, ``write_hold``) against its rules stepped cycle by cycle."""
from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np
import pytest

from aipu.sim.cosim.npu_verilog import run_npu_on
from aipu.sim.cosim.result import first_mismatch
from aipu.sim.cosim.stimulus import dma, wdec
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict
from aipu.sim.machine.isa import Opcode, Unit, dram_run_bytes
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.rtl.dram_bridge import W_QUEUE
from aipu.sim.timing import dram_bridge
from tests.rtl.configs import SMALL, wdec_cascade

MAX_CYCLES = 50_000
# Two commands a fetch chunk (64-byte words) with a longer latency; 8-byte words with the shortest latency the
# bridge and the testbench DRAM give (3 cycles from grant to data).
WIDE_WORD = hardware_config_from_dict({**SMALL.to_dict(), "dram": {"bytes_per_cycle": 64, "latency_cycles": 9}})
FAST_DRAM = hardware_config_from_dict({**SMALL.to_dict(), "dram": {"bytes_per_cycle": 8, "latency_cycles": 3}})
PARTS = wdec_cascade(SMALL, 2, 3)        # three part decoders of two bins a cycle: streams of up to 3 parts


def _assert_same(program, memory, *, ordered: bool = True):
    """The program on the NPU: done, every command on the model's cycles, and (an ``ordered`` program, whose
    accesses its tokens order so that the interpreter runs it) every byte the interpreter's."""
    backend = "verilator" if program.config == SMALL else "amaranth"
    got = run_npu_on(backend, program, memory, max_cycles=MAX_CYCLES)
    assert got.done and not got.errors
    if ordered:
        assert first_mismatch(program, run(program, memory), got) is None
    model = simulate(program, memory, dram="npu")
    for unit in Unit:
        assert model.cycles[unit] == got.cycles[unit], unit.name
    return model


@pytest.mark.parametrize("config, seed", [(SMALL, 1), (SMALL, 2), (WIDE_WORD, 1), (FAST_DRAM, 3),
                                          pytest.param(DEFAULT, 1, marks=pytest.mark.slow)],
                         ids=["small-1", "small-2", "wide_word-1", "fast_dram-3", "default-1"])
def test_random_dma_programs_follow_the_npu(config, seed):
    """Random LOAD and STORE patterns (the buffers start empty: nothing reaches them but through LOAD)."""
    stimulus = dma.random_stimulus(config, np.random.default_rng(seed), 8)
    _assert_same(stimulus.program, Memory.create(config, stimulus.memory.dram))


@pytest.mark.parametrize("config, seed", [(WIDE_WORD, 5), (FAST_DRAM, 6),
                                          pytest.param(SMALL, 7, marks=pytest.mark.slow)],
                         ids=["wide_word-5", "fast_dram-6", "small-7"])
def test_random_codebook_programs_follow_the_npu(config, seed):
    """Random LOADs of codebook indices among LOADs and STOREs: the codebook's reads before the probe, the slots
    of expanded steps and the packed DRAM bytes."""
    stimulus = dma.random_stimulus(config, np.random.default_rng(seed), 10, codebook=True)
    model = _assert_same(stimulus.program, Memory.create(config, stimulus.memory.dram))
    loads = stimulus.program.queues[Unit.LOAD]
    assert any(command.opcode == Opcode.LOAD and command.index_bits for command in loads)
    assert model.dram_bytes[Unit.LOAD] == sum(command.y_size * command.x_size * dram_run_bytes(command)
                                              for command in loads if command.opcode == Opcode.LOAD)


def test_short_unchained_loads_and_stores_follow_the_npu():
    """LOADs and STOREs without tokens, many of one DRAM word or a few: they run faster than the fetcher brings
    their commands (eight DRAM words each on SMALL), so units wait on empty FIFOs while LOAD and the fetcher
    contend, and STOREs write beside them."""
    rng = np.random.default_rng(1)
    program = Program(SMALL)
    for _ in range(int(rng.integers(10, 25))):
        program.append(dma.random_load(SMALL, rng, int(rng.choice([1, 1, 2, 4]))))
    for _ in range(int(rng.integers(3, 10))):
        program.append(dma.random_store(SMALL, rng, int(rng.choice([1, 2, 4]))))
    program.append(Command.make(Opcode.FINISH, unit=Unit.LOAD))
    model = _assert_same(program, Memory.create(SMALL, dma.random_memory(SMALL, rng).dram), ordered=False)
    assert any(timing.waited_on == "fetch" for timings in model.timings.values() for timing in timings[1:])


@pytest.mark.parametrize("config, seed", [(SMALL, 3), (PARTS, 8), pytest.param(FAST_DRAM, 4, marks=pytest.mark.slow)],
                         ids=["small-3", "parts-8", "fast_dram-4"])
def test_weight_streams_beside_loads_follow_the_npu(config, seed):
    """Random WDEC streams (longer than the word fetcher's FIFO: its requests follow the engine's consumption)
    while random LOADs contend with them and with the fetcher for the bridge."""
    rng = np.random.default_rng(seed)
    stimulus = wdec.random_stimulus(config, rng, 3)
    program = Program(config)
    for command in stimulus.program.queues[Unit.WDEC][:-1]:
        program.append(command)
    for _ in range(8):
        program.append(dma.random_load(config, rng, 4))
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    image = np.zeros(max(dma.DRAM_BYTES, stimulus.memory.dram.size), np.uint8)    # the LOADs' addresses too
    image[:stimulus.memory.dram.size] = stimulus.memory.dram
    model = _assert_same(program, Memory.create(config, image), ordered=False)
    assert any(timing.dram_stall for unit in (Unit.LOAD, Unit.WDEC) for timing in model.timings[unit])


@pytest.mark.parametrize("seed", [5, 6])
def test_a_layer_with_compressed_weights_follows_the_npu(seed):
    """A random conv layer with 70 % of its weights zero, lowered with compressed weights: WDEC decodes a tile
    into WEIGHT while LOAD, CONV, REQUANT and STORE run the layer."""
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, max_channels=8, max_size=6)
    layer = replace(layer, w=np.where(rng.random(layer.w.shape) < 0.7, 0, layer.w).astype(layer.w.dtype))
    lowered = lower_conv_layer(layer, SMALL, compress="all")
    assert lowered.program.queues[Unit.WDEC]
    _assert_same(lowered.program, lowered.memory(None))


def _write_rules(offered: list[int], config) -> tuple[int, int]:
    """The bridge's write side over the testbench DRAM stepped cycle by cycle (rtl/dram_bridge.py,
    sim/cosim/dram/model.py): (cycle the last word is taken, first cycle after it with ``write_idle``)."""
    latency, limit = dram_bridge.testbench_latency(config), dram_bridge.default_max_writes(config)
    awvalid = wready = bvalid = False
    awready, queue, answers, lacking_w, unanswered, open_writes = True, 0, deque(), 0, 0, 0
    index, delay, last, t = 0, 0, None, 0
    while last is None or t <= last or unanswered:
        room = (not awvalid or awready) and queue < W_QUEUE and unanswered < limit
        issue = index < len(offered) and t >= offered[index] + delay and room
        if index < len(offered) and t >= offered[index] + delay and not room:
            delay += 1
        w_moved = wready and queue > 0          # edge t
        open_writes -= bvalid
        if awvalid and awready:
            lacking_w, open_writes = lacking_w + 1, open_writes + 1
        if w_moved:
            queue, lacking_w = queue - 1, lacking_w - 1
            answers.append(t + latency)
        unanswered += issue - bvalid
        awvalid = issue or (awvalid and not awready)
        if issue:
            queue += 1
            index += 1
            last = t if index == len(offered) else None
        awready, wready = open_writes < latency + 2, lacking_w > 0
        bvalid = bool(answers) and answers[0] <= t + 1
        if bvalid:
            answers.popleft()
        t += 1
    return last, t


@pytest.mark.parametrize("config", [SMALL, WIDE_WORD, FAST_DRAM], ids=["small", "wide_word", "fast_dram"])
def test_a_lone_writer_is_never_refused_and_waits_write_hold(config):
    """The bridge's write rules stepped cycle by cycle take every word when it is offered, under the default
    ``max_writes``; ``write_idle`` rises ``write_hold`` cycles after the last."""
    rng = np.random.default_rng(config.dram.latency_cycles)
    for _ in range(300):
        slots = rng.choice([1, 1, 1, 2, 3], int(rng.integers(1, 40)))
        offered = int(rng.integers(0, 5)) + np.cumsum(slots)
        last = int(offered[-1])
        assert (last, last + dram_bridge.write_hold(config)) == _write_rules(offered.tolist(), config)


@pytest.mark.parametrize("wdec_config, parts", [({"engines": 2}, 1), ({"bins_per_cycle": 2}, 1),
                                                ({"engines": 4, "bins_per_cycle": 4}, 3)])
def test_the_npu_mode_times_wdecs_of_any_lanes_bins_and_parts(wdec_config, parts):
    """The NPU top's WDEC of E lanes of B bins a cycle on a stream of K parts: timed in every mode, the Npu no
    faster than the port of its own (the fetcher shares the bridge)."""
    from aipu.codec.npu_profile import encode_parts_stream

    config = hardware_config_from_dict({**SMALL.to_dict(), "wdec": wdec_config})
    weights = np.arange(-32, 32, dtype=np.int8).reshape(4, 4, 2, 2)
    stream = np.frombuffer(encode_parts_stream(weights, parts), np.uint8)
    program = Program(config)
    program.append(Command.make(Opcode.WDEC, dram_addr=0, length=stream.size, out_c=4, in_c=4, k_h=2, k_w=2,
                                parts=parts))
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    memory = Memory.create(config, stream)
    npu, ports = (np.subtract(*simulate(program, memory, dram=dram).cycles[Unit.WDEC][0][::-1])
                  for dram in ("npu", "ports"))
    assert npu >= ports > 0
