"""The traffic master's Verilog (tests/sim/cosim/dram_bench.py) under cocotb, against one DRAM (loaded by the
simulator, from tests/sim/cosim/test_dram_forms.py): the timing core through CocotbDram, cocotbext-axi's AxiRam,
or the Amaranth DRAM built into the design. ``$DRAM_CASE`` (JSON) says which, with the parameters, the bound in
cycles, whether to trace (and read the memory back: the speed runs' builds show their ports only), and where
to write the outcome (trace, memory, cycles, seconds of the free run)."""
from __future__ import annotations

import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiRam

from aipu.sim.cosim.dram.cocotb_dram import CocotbDram
from aipu.sim.cosim.dram.model import DramParams
from aipu.sim.cosim.dram.trace import trace_cycle

PREFIX = "m_axi"


def attach(dut, case: dict, params: DramParams, preload: bytes):
    """The slave the case names, preloaded; returns a function reading its memory back."""
    bus = AxiBus.from_prefix(dut, PREFIX)
    if case["slave"] == "model":
        model = CocotbDram(bus, dut.clk, params, reset=dut.enable, reset_active_level=False)
        model.write(0, preload)
        return lambda: bytes(model.memory)
    if case["slave"] == "axiram":
        ram = AxiRam(bus, dut.clk, dut.enable, reset_active_level=False, size=params.size)
        for interface in (ram.read_if, ram.write_if):
            interface.log.setLevel("WARNING")
        ram.write(0, preload)
        return lambda: ram.read(0, params.size)
    width = params.data_bytes      # the Amaranth DRAM: preloaded by $readmemh, read back over VPI
    return lambda: b"".join(int(dut.dram.dram_words[i].value).to_bytes(width, "little")
                            for i in range(params.size // width))


async def free_run(dut, case: dict, events: list) -> int:
    """Run until ``done`` or the bound; trace every edge if asked. Returns the cycles run."""
    if not case["trace"]:       # Python wakes once (ClockCycles would wake it at every edge)
        await First(RisingEdge(dut.done), Timer(10 * case["max_cycles"], unit="ns"))
        return int(dut.cycle.value)
    handles = {name: getattr(dut, f"{PREFIX}_{name}") for name in (
        "arvalid", "arready", "arid", "araddr", "arlen", "awvalid", "awready", "awid", "awaddr", "awlen",
        "wvalid", "wready", "wlast", "wstrb", "wdata", "rvalid", "rready", "rid", "rresp", "rlast", "rdata",
        "bvalid", "bready", "bid", "bresp")}
    edge = RisingEdge(dut.clk)
    while True:
        await edge
        cycle = int(dut.cycle.value)
        events.extend(trace_cycle(cycle, lambda name: int(handles[name].value)))
        if int(dut.done.value) or cycle >= case["max_cycles"]:
            return cycle + 1


@cocotb.test()
async def run_case(dut):
    case = json.loads(os.environ["DRAM_CASE"])
    params = DramParams(**case["params"])
    preload = bytes.fromhex(case["preload"])
    dut.enable.value = 0
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start(start_high=False))
    read_back = attach(dut, case, params, preload)
    await ClockCycles(dut.clk, 3)
    dut.enable.value = 1
    events: list[str] = []
    started = time.perf_counter()
    cycles = await free_run(dut, case, events)
    seconds = time.perf_counter() - started
    error = int(dut.protocol_error.value) if hasattr(dut, "protocol_error") else 0
    with open(case["outcome"], "w") as file:
        json.dump({"events": events, "memory": read_back().hex() if case["trace"] else "", "cycles": cycles,
                   "seconds": seconds, "protocol_error": error}, file)
