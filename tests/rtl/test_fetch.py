"""CommandFetcher under Amaranth's simulator: served by a model of DRAM (random ready, random latency, answers
in order) holding a program image, with every unit's stream under random backpressure, each unit receives
exactly its queue in order, the requests taken are those the schedule of sim/timing/fetch.py gives cycle for
cycle, and a bad PROGRAM_BASE or header field stops the run naming it. The fetcher also converts to Verilog
that Verilator's lint accepts."""
from __future__ import annotations

import gc
import warnings
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from aipu.rtl.fetch import CommandFetcher
from aipu.sim.cosim.verilog import flat_ports
from aipu.sim.machine.arch import DEFAULT, PORT_BYTES_MAX, hardware_config_from_dict
from aipu.sim.machine.isa import COMMAND_BYTES, Unit
from aipu.sim.machine.program_image import (BY_NAME, FETCH_ERRORS, HEADER_BYTES, alignment, build_image,
                                            pack_image, read_header, with_image)
from aipu.sim.timing.fetch import FetchGeometry, request_schedule
from tests.rtl.configs import SMALL
from tests.rtl.lint import assert_lint_clean
from tests.rtl.test_host_verilog import ACCEPTED_LINT
from tests.sim.machine.test_program_image import compiled_program

BYTE_WIDE = hardware_config_from_dict({"dram": {"bytes_per_cycle": 1, "latency_cycles": 3}})
COMMAND_WIDE = hardware_config_from_dict({"dram": {"bytes_per_cycle": 32}})
FOUR_COMMANDS = hardware_config_from_dict({"dram": {"bytes_per_cycle": 128}})
WIDEST_WORD = hardware_config_from_dict({"dram": {"bytes_per_cycle": PORT_BYTES_MAX}})
# The host block's accepted lint, and the file name: Amaranth writes the FIFOs' modules into the top's file.
FETCH_LINT = (*ACCEPTED_LINT, "DECLFILENAME")


@dataclass
class Traffic:
    """Random per-cycle inputs, the same for the RTL and the schedule model."""

    dram_ready: np.ndarray       # [cycle]
    latency: np.ndarray          # [request], >= 1
    unit_ready: np.ndarray       # [unit, cycle]

    @classmethod
    def random(cls, seed: int, cycles: int, *, ready: float = 0.7, latency: int = 8, unit_ready: float = 0.4):
        rng = np.random.default_rng(seed)
        return cls(rng.random(cycles) < ready, rng.integers(1, latency + 1, cycles),
                   rng.random((len(Unit), cycles)) < unit_ready)


@dataclass
class Outcome:
    taken: list[tuple[int, int]]
    received: dict[Unit, list[bytes]]
    queue_lengths: list[int]
    error_field: str | None
    cycles: int
    finished: bool = False       # every command delivered and the fetcher idle before the traffic ran out


def simulate(config, dram: np.ndarray, base: int, traffic: Traffic, *, dram_bytes: int | None = None,
             fifo_depth: int = 4, expected: int = 0) -> Outcome:
    """Start the fetcher on ``dram`` at ``base`` and serve it until ``expected`` commands are delivered and it is
    idle, it refuses the run, or the traffic runs out."""
    dut = CommandFetcher(config, fifo_depth)
    word = config.dram.bytes_per_cycle
    port, outcome = dut.dram_read, Outcome([], {unit: [] for unit in Unit}, [], None, 0)

    async def testbench(ctx):
        ctx.set(dut.program_base, base)
        ctx.set(dut.dram_bytes, dram.size if dram_bytes is None else dram_bytes)
        ctx.set(dut.start, 1)
        answers = deque()
        for cycle in range(len(traffic.dram_ready)):
            ctx.set(port.ready, bool(traffic.dram_ready[cycle]))
            answer = answers[0] if answers and answers[0][0] == cycle else None
            ctx.set(port.data_valid, answer is not None)
            ctx.set(port.data, answer[1] if answer else 0)
            if answer:
                answers.popleft()
            if ctx.get(port.valid) and traffic.dram_ready[cycle]:
                address = ctx.get(port.addr)
                due = max(cycle + int(traffic.latency[len(outcome.taken)]), answers[-1][0] + 1 if answers else 0)
                answers.append((due, int.from_bytes(dram[address * word:(address + 1) * word].tobytes(), "little")))
                outcome.taken.append((cycle, address))
            for unit in Unit:
                stream = dut.command(unit)
                ctx.set(stream.ready, bool(traffic.unit_ready[unit, cycle]))
                if ctx.get(stream.valid) and traffic.unit_ready[unit, cycle]:
                    outcome.received[unit].append(ctx.get(stream.payload).to_bytes(COMMAND_BYTES, "little"))
            if ctx.get(dut.error):
                outcome.error_field = FETCH_ERRORS[ctx.get(dut.error_field)]
                break
            delivered = sum(len(words) for words in outcome.received.values())
            if cycle and not ctx.get(dut.busy) and delivered == expected:
                outcome.finished = True
                break
            await ctx.tick()
            ctx.set(dut.start, 0)
        outcome.queue_lengths = [ctx.get(dut.queue_lengths[unit]) for unit in Unit]
        outcome.cycles = cycle

    simulator = Simulator(dut)
    simulator.add_clock(1e-6)
    simulator.add_testbench(testbench)
    simulator.run()
    return outcome


def placed(config, queues: dict[Unit, list[bytes]], dram_bytes: int = 200) -> tuple[np.ndarray, int]:
    """A DRAM of ``dram_bytes`` random bytes with the image of ``queues`` after it, and the image's base."""
    rng = np.random.default_rng(0)
    return with_image(config, rng.integers(0, 256, dram_bytes, dtype=np.uint8), pack_image(config, queues))


def random_queues(seed: int, most: int = 5) -> dict[Unit, list[bytes]]:
    """Raw words (the fetcher never looks inside one), some queues empty."""
    rng = np.random.default_rng(seed)
    return {unit: [rng.bytes(COMMAND_BYTES) for _ in range(int(rng.integers(0, most + 1)))] for unit in Unit}


def expected_schedule(config, dram: np.ndarray, base: int, traffic: Traffic, fifo_depth: int):
    geometry, word = FetchGeometry.of(config, fifo_depth), config.dram.bytes_per_cycle
    header = read_header(dram[base:base + HEADER_BYTES].tobytes())
    queues = {unit: ((base + header[f"{unit.name.lower()}_offset"]) // word, header[f"{unit.name.lower()}_count"])
              for unit in Unit}
    return request_schedule(geometry, base // word, queues, dram_ready=lambda c: bool(traffic.dram_ready[c]),
                            latency=lambda i: int(traffic.latency[i]),
                            unit_ready=lambda unit, c: bool(traffic.unit_ready[unit, c]),
                            max_cycles=len(traffic.dram_ready))


def check_run(config, dram, base, queues, traffic, fifo_depth: int = 4) -> Outcome:
    expected = sum(len(words) for words in queues.values())
    got = simulate(config, dram, base, traffic, fifo_depth=fifo_depth, expected=expected)
    assert got.error_field is None and got.finished, f"{got.error_field} after {got.cycles} cycles"
    assert got.received == {unit: list(queues.get(unit, ())) for unit in Unit}
    assert got.queue_lengths == [len(queues.get(unit, ())) for unit in Unit]
    assert got.taken == expected_schedule(config, dram, base, traffic, fifo_depth)
    return got


CONFIGS = pytest.mark.parametrize("config", [DEFAULT, SMALL, COMMAND_WIDE, FOUR_COMMANDS],
                                  ids=["default", "small", "word-32", "word-128"])


@CONFIGS
def test_a_compiled_program_reaches_every_unit_in_order_on_the_model_s_schedule(config):
    lowered = compiled_program(config)
    dram, base = with_image(config, lowered.dram, build_image(lowered.program))
    queues = {unit: [c.encode(config) for c in lowered.program.queues[unit]] for unit in Unit}
    check_run(config, dram, base, queues, Traffic.random(1, 6000))


@pytest.mark.parametrize("config", [BYTE_WIDE, DEFAULT, FOUR_COMMANDS], ids=["word-1", "default", "word-128"])
@pytest.mark.parametrize("fifo_depth", [1, 3])
def test_raw_queues_under_heavy_backpressure(config, fifo_depth):
    queues = random_queues(fifo_depth)
    dram, base = placed(config, queues)
    check_run(config, dram, base, queues, Traffic.random(fifo_depth, 8000, ready=0.5, unit_ready=0.2),
              fifo_depth)


def test_an_always_ready_dram_and_units_take_one_request_per_cycle():
    queues = {unit: [bytes([unit]) * COMMAND_BYTES] * 6 for unit in Unit}
    dram, base = placed(DEFAULT, queues)
    traffic = Traffic(np.ones(400, bool), np.ones(400, int), np.ones((len(Unit), 400), bool))
    got = check_run(DEFAULT, dram, base, queues, traffic)
    cycles = [cycle for cycle, _ in got.taken]
    header = FetchGeometry.of(DEFAULT, 4).header_words
    assert cycles[:header] == list(range(2, 2 + header))
    fetch = cycles[header:]
    assert fetch == list(range(fetch[0], fetch[0] + len(fetch)))     # back to back once FETCH starts


def _refused(config, dram, base, dram_bytes=None) -> Outcome:
    return simulate(config, dram, base, Traffic.random(2, 300), dram_bytes=dram_bytes, expected=-1)


def _with_field(dram: np.ndarray, base: int, name: str, value: int) -> np.ndarray:
    field, changed = BY_NAME[name], dram.copy()
    changed[base + field.offset:base + field.offset + field.size] = np.frombuffer(
        value.to_bytes(field.size, "little"), np.uint8)
    return changed


@pytest.mark.parametrize("name, value", [("magic", 0), ("version", 2), ("isa_hash", 1), ("config_hash", 1 << 63),
                                         ("conv_offset", 100), ("pool_offset", 1 << 30), ("store_count", 1 << 20)])
def test_a_bad_header_field_stops_the_run_naming_it(name, value):
    queues = random_queues(3)
    dram, base = placed(DEFAULT, queues)
    got = _refused(DEFAULT, _with_field(dram, base, name, value), base)
    assert got.error_field == name and not any(got.received.values())
    assert len(got.taken) == FetchGeometry.of(DEFAULT, 4).header_words      # the header, nothing after it


def test_the_first_refused_field_is_named():
    dram, base = placed(DEFAULT, random_queues(3))
    dram = _with_field(_with_field(dram, base, "lut_count", 1 << 24), base, "version", 9)
    assert _refused(DEFAULT, dram, base).error_field == "version"


def test_a_queue_ending_past_dram_bytes_is_refused_by_its_count():
    queues = {Unit.STORE: [bytes(COMMAND_BYTES)] * 3}
    dram, base = placed(DEFAULT, queues)
    assert _refused(DEFAULT, dram, base, dram_bytes=dram.size - 1).error_field == "store_count"
    assert _refused(DEFAULT, dram, base, dram_bytes=dram.size).error_field is None


@pytest.mark.parametrize("config", [DEFAULT, FOUR_COMMANDS], ids=["default", "word-128"])
def test_a_misaligned_base_or_a_header_past_dram_bytes_requests_nothing(config):
    dram, base = placed(config, random_queues(4))
    for shifted, limit in ((base + alignment(config) // 2, None), (base, base + HEADER_BYTES - 1)):
        got = _refused(config, dram, shifted, dram_bytes=limit)
        assert got.error_field == "program_base" and got.taken == []


def test_fifo_depth_must_be_positive():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)      # the refused fetcher is never elaborated
        with pytest.raises(ValueError, match="fifo_depth = 0") as refused:
            CommandFetcher(DEFAULT, 0)
        del refused                     # its traceback holds the half-built fetcher: collected here, not later
        gc.collect()


@pytest.mark.slow
@pytest.mark.parametrize("config", [BYTE_WIDE, DEFAULT, SMALL, COMMAND_WIDE, FOUR_COMMANDS],
                         ids=["word-1", "default", "small", "word-32", "word-128"])
def test_long_random_runs(config):
    for seed in range(6):
        queues = random_queues(seed, most=40)
        dram, base = placed(config, queues, dram_bytes=64 * seed)
        rng = np.random.default_rng(seed)
        traffic = Traffic.random(seed, 60000, ready=0.2 + 0.8 * rng.random(), latency=int(rng.integers(1, 40)),
                                 unit_ready=0.05 + 0.95 * rng.random())
        check_run(config, dram, base, queues, traffic, fifo_depth=int(rng.integers(1, 9)))


@pytest.mark.parametrize("config", [DEFAULT, FOUR_COMMANDS, pytest.param(BYTE_WIDE, marks=pytest.mark.slow),
                                    pytest.param(WIDEST_WORD, marks=pytest.mark.slow)],
                         ids=["default", "word-128", "word-1", "word-4096"])
def test_verilator_lint_finds_nothing_else(config, tmp_path):
    fetcher = CommandFetcher(config)
    source = tmp_path / "aipu_fetch.v"
    source.write_text(amaranth_verilog.convert(fetcher, name="aipu_fetch", ports=flat_ports(fetcher, "_")))
    assert_lint_clean(source, "aipu_fetch", FETCH_LINT)
