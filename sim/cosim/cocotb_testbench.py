"""The cocotb test that runs one program on the Verilog System (loaded by the simulator, not by pytest).

It reads ``request.json`` from its run directory (the simulator's working directory): the queue lengths and the
cycle bound. The memories are already loaded by then, at time 0 by the System's own ``$readmemh`` from the files
the plusargs name (:func:`aipu.sim.cosim.verilog.compact_zero_init`). It raises ``run`` and lets the RTL run free: Python wakes only when ``done``, ``failed`` or
``dram_fault`` changes or the bound is reached, never per cycle. After the same settling cycles as the
Amaranth run it reads every buffer, the DRAM, the status outputs and the cycle logs into ``outcome.json``
(the ``outcome`` of :func:`aipu.sim.cosim.amaranth_run.result_from_outcome`, cycles counted from ``run``).
It imports nothing of aipu (every constant comes in the request): the simulator starts faster.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, First, ReadOnly, RisingEdge, Timer, ValueChange
from cocotb.utils import get_sim_steps, get_sim_time

CLOCK_NS = 2


def _status(handle) -> int:
    """An output of the top as an integer while the run goes on, X and Z bits read as 0 (``cycle`` is X in
    Icarus before its first clock edge). The outcome reads them strictly (:func:`_final`)."""
    return int(handle.value.resolve("zeros"))


def _final(dut, name: str, unresolved: list[str]) -> int:
    """The output ``name`` after the run: its X or Z bits as 0, and ``name`` in ``unresolved`` if it has any (an
    X that the lenient read would hide, such as a status bit no logic drives)."""
    value = getattr(dut, name).value
    if not value.is_resolvable:
        unresolved.append(name)
    return int(value.resolve("zeros"))


def _pack(values: list[int], bits: int) -> int:
    return sum(value << (bits * i) for i, value in enumerate(values))


def _unpack(value: int, bits: int, count: int) -> list[int]:
    return [(value >> (bits * i)) & ((1 << bits) - 1) for i in range(count)]


async def _wait_for_stop(dut, max_cycles: int, first_cycle: int) -> int:
    """Cycles from ``run`` until done, an error or a DRAM fault shows, or ``max_cycles``."""
    deadline = get_sim_time("ns") + max_cycles * CLOCK_NS
    while True:
        remaining = deadline - get_sim_time("ns")
        if remaining > 0:
            await First(RisingEdge(dut.done), ValueChange(dut.failed), ValueChange(dut.dram_fault),
                        Timer(remaining, "ns"))
        await ReadOnly()
        cycles = _status(dut.cycle) - first_cycle
        stopped = _status(dut.done) or _status(dut.failed) or _status(dut.dram_fault)
        if stopped or cycles >= max_cycles:     # a change back to zero (a glitch) is not a stop
            return min(cycles, max_cycles)


@cocotb.test()
async def run_program(dut):
    request = json.loads(Path("request.json").read_text())
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.run.value = 0
    await ClockCycles(dut.clk, 2)            # the initial blocks have zeroed and preloaded the memories
    await FallingEdge(dut.clk)
    dut.dram_words.value = request["dram_words"]
    dut.queue_lengths.value = _pack(request["queue_lengths"], request["index_bits"])
    dut.run.value = 1
    first_cycle = _status(dut.cycle)
    run_step = get_sim_time("step")
    started = time.perf_counter()
    cycles = await _wait_for_stop(dut, request["max_cycles"], first_cycle)
    run_seconds = time.perf_counter() - started
    await ClockCycles(dut.clk, request["settle_cycles"])
    await ReadOnly()

    units = request["units"]                 # [unit number, lower-case name] of every unit in the System
    unresolved: list[str] = []
    status = {name: _final(dut, name, unresolved)
              for name in ("done", "failed", "token_error", "dram_fault", "retired", "error_fields")}
    retired = _unpack(status["retired"], request["index_bits"], request["unit_count"])
    fields = _unpack(status["error_fields"], request["field_bits"], request["unit_count"])
    cycle_bits = request["cycle_bits"]
    mask = (1 << cycle_bits) - 1

    def rebased(entry: int) -> int:
        """A cycle-log entry counted from ``run`` (cycle 0 of the Amaranth run)."""
        start, retire = (entry & mask) - first_cycle, (entry >> cycle_bits) - first_cycle
        return (retire & mask) << cycle_bits | (start & mask)

    def read(name: str, count: int) -> list[int]:
        memory = getattr(dut, name)
        return [int(memory[i].value) for i in range(count)]

    outcome = {
        "cycles": cycles, "run_seconds": run_seconds, "run_step": run_step,
        "clock_steps": get_sim_steps(CLOCK_NS, "ns"), "done": bool(status["done"]), "failed": status["failed"],
        "fields": {name: fields[u] for u, name in units}, "retired": {name: retired[u] for u, name in units},
        "token_error": bool(status["token_error"]), "dram_fault": status["dram_fault"], "unresolved": unresolved,
        "memories": {name: read(name, depth) for name, depth in request["read_back"].items()},
        "logs": {name: [rebased(entry) for entry in read(f"cycle_log_{name}", retired[u])] for u, name in units},
    }
    Path("outcome.json").write_text(json.dumps(outcome))
