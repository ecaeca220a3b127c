"""The testbench DRAM's three forms agree cycle for cycle, and follow the stated rules: a random master
(tests/sim/cosim/dram_bench.py: bursts of 0..15 and 255 beats, backpressure, reads and writes over the same
bytes, error ranges and addresses beyond the DRAM) against the timing core in Amaranth's simulator, the Amaranth
DRAM in Amaranth's simulator, the core through cocotb on Icarus, the Amaranth DRAM on Verilator and Icarus: one
trace, one memory. cocotbext-axi's AxiRam follows the core's read and write timing with latency 2; slow."""
from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from aipu.sim.cosim.dram.model import DramParams, ErrorRange, Resp
from aipu.sim.cosim.dram.trace import check_trace
from aipu.sim.cosim.verilog import compact_zero_init, compile_verilog, quiet_runner
from tests.sim.cosim.dram_bench import MasterWithDram, TrafficMaster, run_amaranth, verilog

def top_ports(text: str, name: str) -> list[str]:
    header = text[text.index(f"module {name}("):]
    return [port.strip() for port in header[header.index("(") + 1:header.index(")")].split(",")]


REPO = Path(__file__).resolve().parents[3]
SIZE = 1 << 14
PARAMS = DramParams(size=SIZE, read_latency=5, write_latency=3, write_depth=3,
                    errors=(ErrorRange(0x1100, 0x1110, Resp.SLVERR), ErrorRange(0x2800, 0x2900, Resp.DECERR)))
TRAFFIC = dict(reads=24, writes=24, region=SIZE + 4096, seed=5)      # the last page lies beyond the DRAM
PRELOAD = bytes((index * 37 + 11) & 0xFF for index in range(SIZE))
PRELOAD_PLUSARG = "aipu_preload_dram_words"
_BUILDS: dict = {}


def build(tmp_path_factory, simulator: str, with_dram: bool, params: DramParams, traffic: dict,
          ports_only: bool = False) -> Path:
    """The master alone (a cocotb slave drives its bus) or with the Amaranth DRAM, once per session. With
    ``ports_only`` Verilator makes only the top's ports visible to cocotb, as the System's builds do."""
    key = (simulator, with_dram, params, tuple(sorted(traffic.items())), ports_only)
    if key not in _BUILDS:
        master = TrafficMaster(params, **traffic)
        name = "dram_bench" if with_dram else "dram_master"
        text = verilog(MasterWithDram(master) if with_dram else master, master, name)
        directory = tmp_path_factory.mktemp(f"{name}-{simulator}")
        verilator = ("-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT") if simulator == "verilator" else ()
        control = None
        if ports_only:
            verilator += ("--no-public-flat-rw",)
            control = "`verilator_config\n" + "".join(f'public_flat_rw -module "{name}" -var "{port}"\n'
                                                       for port in top_ports(text, name))
        compile_verilog(directory, name, compact_zero_init(text, ("dram_words",)), simulator, build_args=verilator,
                        control=control)
        _BUILDS[key] = (directory, name)
    return _BUILDS[key]


def run_cocotb(built, simulator: str, slave: str, params: DramParams, *, trace: bool = True,
               max_cycles: int = 100_000, preload: bytes = PRELOAD) -> dict:
    """One run of tests/sim/cosim/dram_cocotb.py: the outcome it writes."""
    from cocotb_tools.runner import get_results

    directory, name = built
    run = directory / f"run-{slave}"
    run.mkdir(exist_ok=True)
    outcome = run / "outcome.json"
    image = run / "memory.hex"
    width = params.data_bytes
    image.write_text("".join(f"{preload[i:i + width][::-1].hex()}\n" for i in range(0, len(preload), width)))
    plain = {field.name: getattr(params, field.name) for field in fields(params) if field.name != "errors"}
    errors = [[error.start, error.end, int(error.resp)] for error in params.errors]
    case = {"slave": slave, "params": {**plain, "errors": errors},
            "preload": preload.hex(), "trace": trace, "max_cycles": max_cycles, "outcome": str(outcome)}
    quiet_runner(simulator).test(
        test_module="tests.sim.cosim.dram_cocotb", hdl_toplevel=name, hdl_toplevel_lang="verilog",
        build_dir=directory, test_dir=run, results_xml=str(run / "results.xml"), log_file=run / "simulation.log",
        plusargs=[f"+{PRELOAD_PLUSARG}={image}"],
        extra_env={"PYTHONPATH": str(REPO), "COCOTB_LOG_LEVEL": "WARNING", "DRAM_CASE": json.dumps(case),
                   "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    tests, failed = get_results(run / "results.xml")
    log = (run / "simulation.log").read_text(errors="replace")
    assert (tests, failed) == (1, 0), log[-4000:]
    result = json.loads(outcome.read_text())
    result["memory"] = bytes.fromhex(result["memory"])
    return result


@pytest.fixture(scope="module")
def reference():
    """The timing core under Amaranth's simulator: the trace every other form must give."""
    events, memory, _ = run_amaranth(TrafficMaster(PARAMS, **TRAFFIC), python_model=True, max_cycles=20_000,
                                     preload=PRELOAD)
    return events, memory


def test_the_core_follows_its_rules_and_the_master_reaches_every_case(reference):
    events, _ = reference
    assert check_trace(events, PARAMS) == []
    kinds = {event.split()[1] for event in events}
    assert kinds >= {"AR", "ARS", "R", "RS", "AW", "AWS", "W", "WS", "B", "BS"}, kinds
    ar_lengths = {event.split()[4] for event in events if event.split()[1] == "AR"}
    assert "ff" in ar_lengths and "0" in ar_lengths
    responses = {event.split()[3] for event in events if event.split()[1] == "R"}
    assert responses == {"0", "2", "3"}


def test_a_wrong_latency_breaks_the_rules(reference):
    events, _ = reference
    assert check_trace(events, replace(PARAMS, read_latency=6)) != []
    assert check_trace(events, replace(PARAMS, write_latency=2)) != []
    assert check_trace(events, replace(PARAMS, read_depth=PARAMS.read_depth + 1)) != []


def test_the_amaranth_dram_equals_the_core_in_amaranth(reference):
    events, memory, protocol_error = run_amaranth(TrafficMaster(PARAMS, **TRAFFIC), python_model=False,
                                                  max_cycles=20_000, preload=PRELOAD)
    assert (events, memory, protocol_error) == (*reference, 0)


@pytest.mark.parametrize("simulator", ["icarus"])
def test_the_core_under_cocotb_equals_the_core_in_amaranth(reference, tmp_path_factory, simulator):
    outcome = run_cocotb(build(tmp_path_factory, simulator, False, PARAMS, TRAFFIC), simulator, "model", PARAMS)
    assert (outcome["events"], outcome["memory"]) == reference


@pytest.mark.parametrize("simulator", [pytest.param("verilator", marks=pytest.mark.slow), "icarus"])
def test_the_amaranth_dram_in_verilog_equals_the_core(reference, tmp_path_factory, simulator):
    outcome = run_cocotb(build(tmp_path_factory, simulator, True, PARAMS, TRAFFIC), simulator, "rtl", PARAMS)
    assert (outcome["events"], outcome["memory"], outcome["protocol_error"]) == (*reference, 0)


def test_the_amaranth_dram_flags_a_burst_across_4_kib():
    from amaranth.sim import Simulator

    from aipu.sim.cosim.dram.rtl import AxiDram

    dram = AxiDram(PARAMS)
    sim = Simulator(dram)
    sim.add_clock(1e-8)
    seen = {}

    async def bench(ctx):
        bus = dram.bus
        for name, value in dict(arvalid=1, araddr=0xF10, arlen=15, arsize=PARAMS.size_code, arburst=1,
                                rready=1).items():
            ctx.set(getattr(bus, name), value)
        await ctx.tick()
        ctx.set(bus.arvalid, 0)
        await ctx.tick().until(bus.rvalid)
        seen.update(error=ctx.get(dram.protocol_error), resp=ctx.get(bus.rresp))

    sim.add_testbench(bench)
    sim.run()
    assert seen == {"error": 1, "resp": Resp.SLVERR}


def written(events, preload: bytes, params: DramParams) -> bytes:
    """``preload`` after every W beat of a trace, in order, at its AW's address (what any slave must end with)."""
    memory, width = bytearray(preload), params.data_bytes
    bursts = [(int(address, 16) // width * width, params.response(int(address, 16), int(length, 16) + 1))
              for _, kind, _, address, length in (event.split() for event in events if " AW " in event)]
    burst = beat = 0
    for event in events:
        _, kind, *fields = event.split()
        if kind == "W":
            last, strobe, data = (int(value, 16) for value in fields)
            address = bursts[burst][0] + beat * width
            if bursts[burst][1] == Resp.OKAY:
                for lane, byte in enumerate(data.to_bytes(width, "little")):
                    if strobe >> lane & 1:
                        memory[address + lane] = byte
            burst, beat = (burst + 1, 0) if last else (burst, beat + 1)
    return bytes(memory)


@pytest.mark.slow
def test_axiram_follows_the_core_timing_at_latency_2(tmp_path_factory):
    """cocotbext-axi's AxiRam: R and B at the core's rules with latency 2 (it accepts by rules of its own, so the
    master's random traffic, timed by acceptance, differs from the core's run), and every write in memory."""
    params = DramParams(size=SIZE, read_latency=2, write_latency=2)
    traffic = {**TRAFFIC, "region": SIZE}
    outcome = run_cocotb(build(tmp_path_factory, "icarus", False, params, traffic), "icarus", "axiram", params)
    assert check_trace(outcome["events"], params, acceptance=False) == []
    assert check_trace(outcome["events"], params) != []
    assert outcome["memory"] == written(outcome["events"], PRELOAD, params)


def test_the_write_replay_agrees_with_the_core(reference):
    events, memory = reference
    assert written(events, PRELOAD, PARAMS) == memory


STREAMS = {"len255": dict(reads=400, stream=255), "len0": dict(reads=40_000, stream=0)}


@pytest.mark.slow
@pytest.mark.parametrize("stream", STREAMS)
def test_streaming_read_speed_on_verilator(tmp_path_factory, stream):
    """Simulated cycles per wall second of back-to-back reads (docs/rtl-cosim.md's table): the core through
    cocotb against the Amaranth DRAM built in, on builds with only the ports visible."""
    params = DramParams(size=1 << 16, read_latency=8)
    traffic = dict(writes=0, region=4096, backpressure=False, **STREAMS[stream])
    rates = {}
    for slave, with_dram in (("model", False), ("rtl", True)):
        built = build(tmp_path_factory, "verilator", with_dram, params, traffic, ports_only=True)
        outcome = run_cocotb(built, "verilator", slave, params, trace=False, max_cycles=10**7, preload=b"")
        rates[slave] = outcome["cycles"] / outcome["seconds"]
    print(f"streaming reads {stream}: cycles per second {rates}")
    assert rates["rtl"] > rates["model"]
