"""Run a program on the RTL in Amaranth's own simulator: the memories start from the image (``init``), the
testbench only raises ``run`` and watches ``done`` and the error outputs. Quick unit tests use this; the same
:class:`System` runs as Verilog under cocotb for speed."""
from __future__ import annotations

import time

import numpy as np
from amaranth.sim import Simulator

from aipu.rtl.ports import word_bytes
from aipu.rtl.system import CYCLE_BITS, System
from aipu.sim.cosim.result import RtlError, RtlResult
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program

SETTLE_CYCLES = 4   # after done or an error: let posted writes land before reading the memories back


def _unpack(words: list[int], nbytes: int, size: int) -> np.ndarray:
    raw = b"".join(word.to_bytes(nbytes, "little") for word in words)
    return np.frombuffer(raw, np.uint8)[:size].copy()


def run_amaranth(program: Program, memory: Memory, units, *, max_cycles: int,
                 vcd: str | None = None) -> RtlResult:
    """Execute ``program`` from ``memory`` on a System of ``units``; stop at done, an error or ``max_cycles``."""
    program.validate()
    queues = {unit: [command.encode(program.config) for command in queue] for unit, queue in program.queues.items()}
    return run_words_amaranth(queues, memory, units, max_cycles=max_cycles, vcd=vcd)


def run_words_amaranth(queues: dict[Unit, list[bytes]], memory: Memory, units, *, max_cycles: int,
                       vcd: str | None = None) -> RtlResult:
    """Like :func:`run_amaranth` on raw command words (which may be illegal: the units must refuse them)."""
    config = memory.config
    present = {cls.UNIT for cls in units}
    for unit, queue in queues.items():
        if queue and unit not in present:
            raise ValueError(f"the program has {len(queue)} commands for {unit.name}, which this System lacks")
    depth = max(len(queue) for queue in queues.values())
    system = System(config, units, program_depth=depth, dram_bytes=memory.dram.size, image=memory, queues=queues)
    outcome = {}

    async def testbench(ctx):
        for unit in Unit:
            ctx.set(system.queue_lengths[unit], len(queues.get(unit, ())))
        ctx.set(system.run, 1)
        cycles, started = 0, time.perf_counter()
        while cycles < max_cycles:
            await ctx.tick()
            cycles += 1
            if ctx.get(system.done) or ctx.get(system.failed) or ctx.get(system.dram_fault):
                break
        outcome["run_seconds"] = time.perf_counter() - started
        await ctx.tick().repeat(SETTLE_CYCLES)
        outcome["cycles"] = cycles
        outcome["done"] = bool(ctx.get(system.done))
        outcome["failed"] = ctx.get(system.failed)
        outcome["fields"] = {u: ctx.get(system.error_fields[u]) for u in system.units}
        outcome["retired"] = {u: ctx.get(system.retired[u]) for u in system.units}
        outcome["token_error"] = bool(ctx.get(system.token_error))
        outcome["dram_fault"] = ctx.get(system.dram_fault)
        outcome["buffers"] = {b: [ctx.get(system.buffers[b].data[i]) for i in range(system.buffers[b].depth)]
                              for b in Buffer}
        outcome["dram"] = [ctx.get(system.dram.data[i]) for i in range(system.dram.depth)]
        outcome["logs"] = {u: [ctx.get(system.cycle_logs[u].data[i]) for i in range(outcome["retired"][u])]
                           for u in system.units}

    sim = Simulator(system)
    sim.add_clock(1e-9)
    sim.add_testbench(testbench)
    run_to_end(sim, vcd)
    return result_from_outcome(system, memory, outcome)


def run_to_end(sim: Simulator, vcd: str | None) -> None:
    """Run ``sim`` until its testbenches return, writing every signal to the VCD file ``vcd`` if given."""
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()


def result_from_outcome(system: System, memory: Memory, outcome: dict) -> RtlResult:
    """The RtlResult of what a testbench read back (the same ``outcome`` keys on every simulator): memory words
    per buffer and DRAM, the cycle-log entries of every retired command, the status outputs and the cycle count."""
    config = system.config
    image = Memory(config, _unpack(outcome["dram"], config.dram.bytes_per_cycle, memory.dram.size),
                   {b: _unpack(outcome["buffers"][b], word_bytes(config, b), config.buffer(b).bytes) for b in Buffer})
    mask = (1 << CYCLE_BITS) - 1
    cycles = {u: [(entry & mask, entry >> CYCLE_BITS) for entry in outcome["logs"].get(u, [])] for u in Unit}
    errors = [RtlError(u, outcome["retired"][u], system.units[u].error_names[outcome["fields"][u]])
              for u in system.units if outcome["failed"] >> u & 1]
    return RtlResult(image, cycles, outcome["cycles"], outcome["done"], errors, outcome["token_error"],
                     [u for u in Unit if outcome["dram_fault"] >> u & 1], outcome["run_seconds"])
