"""The cocotb test that runs one program on the Verilog NPU bench (loaded by the simulator, not by pytest).

It is the host: through cocotbext-axi's AXI4-Lite master it makes the writes ``request.json`` lists
(``npu_amaranth.start_writes``: PROGRAM_BASE, DRAM_BYTES, IRQ_ENABLE, CONTROL.START), then sleeps until ``irq``
rises or the cycle bound passes: the RTL runs free, Python wakes for nothing else. It reads the registers the request names over the bus, then the DRAM,
the buffers and the command-cycle logs by backdoor, into ``outcome.json`` (the ``outcome`` of
:func:`aipu.sim.cosim.npu_amaranth.result_of`). It imports nothing of aipu: the simulator starts faster.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_steps, get_sim_time
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

CLOCK_NS = 2
WORD_BYTES = 4


async def _write(master, address: int, value: int) -> None:
    await master.write(address, value.to_bytes(WORD_BYTES, "little"))


async def _read(master, address: int) -> int:
    return int.from_bytes((await master.read(address, WORD_BYTES)).data, "little")


def _words(memory, count: int) -> list[int]:
    return [int(memory[i].value) for i in range(count)]


@cocotb.test()
async def run_program(dut):
    request = json.loads(Path("request.json").read_text())
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk)
    master.write_if.log.setLevel("WARNING")
    master.read_if.log.setLevel("WARNING")
    await ClockCycles(dut.clk, 2)
    for offset, value in request["writes"]:          # the last one starts the run
        await _write(master, offset, value)
    started, began, run_step = time.perf_counter(), get_sim_time("ns"), get_sim_time("step")
    await ReadOnly()
    if not int(dut.irq.value):
        await First(RisingEdge(dut.irq), Timer(request["max_cycles"] * CLOCK_NS, "ns"))
    run_seconds = time.perf_counter() - started
    cycles = int((get_sim_time("ns") - began) // CLOCK_NS)
    await RisingEdge(dut.clk)
    registers = {name: await _read(master, offset) for name, offset in request["registers"].items()}
    await ReadOnly()
    npu = dut.npu
    outcome = {
        "run_seconds": run_seconds, "cycles": cycles, "registers": registers, "run_step": run_step,
        "clock_steps": get_sim_steps(CLOCK_NS, "ns"),
        "protocol_error": int(dut.protocol_error.value),
        "dram": _words(dut.dram.dram_words, request["dram_words"]),
        "memories": {name: _words(getattr(npu, name), depth) for name, depth in request["buffers"].items()},
        "logs": {name: _words(getattr(npu, f"cycle_log_{name.lower()}"), registers[f"{name}_RETIRED"])
                 for _, name in request["units"]},
    }
    Path("outcome.json").write_text(json.dumps(outcome))
