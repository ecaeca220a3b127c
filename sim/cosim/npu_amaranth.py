"""Run a program on the NPU top (:class:`aipu.rtl.npu.Npu`) in Amaranth's simulator, the way a host drives it:
the program image goes into the testbench DRAM after the model's DRAM image, the host writes PROGRAM_BASE,
DRAM_BYTES, IRQ_ENABLE and CONTROL.START over AXI4-Lite and waits for ``irq``, then reads STATUS, ERROR and the
unit counters. Only the DRAM (a testbench part) and the command-cycle logs are read by backdoor; nothing is
preloaded into the NPU."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from amaranth.sim import Simulator

from aipu.rtl.banks import buffer_words
from aipu.rtl.fabric import CYCLE_BITS
from aipu.rtl.npu import UNIT_CLASSES, Npu
from aipu.rtl.ports import word_bytes
from aipu.sim.cosim.amaranth_run import run_to_end
from aipu.sim.cosim.axil import read, write
from aipu.sim.cosim.npu_bench import npu_dram_params
from aipu.sim.cosim.dram.amaranth_dram import add_dram
from aipu.sim.cosim.result import RtlError, RtlResult
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program
from aipu.sim.machine.program_image import pack_image, with_image
from aipu.sim.machine.registers import BY_NAME, DATA_BITS, ErrorCause, field_value

READ_BACK = ("STATUS", "ERROR", "IRQ_STATUS", "CYCLES_LO", *(f"{unit.name}_RETIRED" for unit in Unit))
ERROR_NAMES = {cls.UNIT: cls.unit_error_names() for cls in UNIT_CLASSES}    # what ERROR.FIELD indexes, per unit


def start_writes(base: int, dram_bytes: int) -> list[tuple[int, int]]:
    """The (offset, word) writes with which the host starts a run, in order: PROGRAM_BASE and DRAM_BYTES (each a
    LO/HI pair), IRQ_ENABLE with every event, CONTROL.START."""
    def pair(name: str, value: int) -> list[tuple[int, int]]:
        return [(BY_NAME[f"{name}_LO"].offset, value & (1 << DATA_BITS) - 1),
                (BY_NAME[f"{name}_HI"].offset, value >> DATA_BITS)]

    start = next(f for f in BY_NAME["CONTROL"].fields if f.name == "START")
    return [*pair("PROGRAM_BASE", base), *pair("DRAM_BYTES", dram_bytes),
            (BY_NAME["IRQ_ENABLE"].offset, sum(1 << f.lsb for f in BY_NAME["IRQ_ENABLE"].fields)),
            (BY_NAME["CONTROL"].offset, 1 << start.lsb)]


def run_npu_amaranth(program: Program, memory: Memory, *, max_cycles: int, vcd: str | None = None) -> RtlResult:
    """Execute ``program`` from ``memory`` on the NPU; stop at ``irq`` or after ``max_cycles`` from START."""
    program.validate()
    queues = {unit: [command.encode(program.config) for command in queue] for unit, queue in program.queues.items()}
    return run_words_npu_amaranth(queues, memory, max_cycles=max_cycles, vcd=vcd)


def run_words_npu_amaranth(queues: dict[Unit, list[bytes]], memory: Memory, *, max_cycles: int,
                           vcd: str | None = None, errors=(), while_running=None,
                           base_offset: int = 0) -> RtlResult:
    """Like :func:`run_npu_amaranth` on raw command words (which may be illegal: the units must refuse them).
    ``errors``: DRAM byte ranges that answer with an error (``DramParams.errors``); ``while_running``: a
    coroutine ``(ctx, npu)`` the host runs after START, before it waits for ``irq``; ``base_offset``: added
    to the PROGRAM_BASE the host writes (not 0: a wrong base the fetcher must refuse)."""
    config = memory.config
    dram, base = with_image(config, memory.dram, pack_image(config, queues))
    npu = Npu(config, trace_depth=max(1, *(len(queue) for queue in queues.values())))
    sim = Simulator(npu)
    sim.add_clock(1e-9)
    model = add_dram(sim, npu.m_axi, replace(npu_dram_params(config, dram.size), errors=tuple(errors)))
    model.memory[:dram.size] = dram.tobytes()
    outcome: dict = {}

    async def testbench(ctx):
        for offset, value in start_writes(base + base_offset, dram.size):
            await write(ctx, npu, offset, value)
        cycles, started = 0, time.perf_counter()
        if while_running is not None:
            await while_running(ctx, npu)
        while cycles < max_cycles and not ctx.get(npu.irq):
            await ctx.tick()
            cycles += 1
        outcome["run_seconds"] = time.perf_counter() - started
        outcome["registers"] = {name: (await read(ctx, npu, BY_NAME[name].offset))[1] for name in READ_BACK}
        outcome["buffers"] = {b: buffer_words([[ctx.get(mem.data[i]) for i in range(mem.depth)]
                                               for mem in npu.buffers[b]]) for b in Buffer}
        retired = {unit: outcome["registers"][f"{unit.name}_RETIRED"] for unit in Unit}
        outcome["logs"] = {unit: [ctx.get(npu.cycle_logs[unit].data[i]) for i in range(retired[unit])]
                           for unit in Unit}

    sim.add_testbench(testbench)
    run_to_end(sim, vcd)
    got = np.frombuffer(bytes(model.memory[:memory.dram.size]), np.uint8).copy()
    return result_of(config, memory, got, outcome)


def _unpack(words: list[int], nbytes: int, size: int) -> np.ndarray:
    raw = b"".join(word.to_bytes(nbytes, "little") for word in words)
    return np.frombuffer(raw, np.uint8)[:size].copy()


def result_of(config: HardwareConfig, memory: Memory, dram: np.ndarray, outcome: dict) -> RtlResult:
    """The RtlResult of a run (on any simulator) from what the host and the testbench read back: ``outcome``
    holds ``registers`` (READ_BACK by name), ``buffers`` (words per buffer), ``logs`` (cycle-log entries of the
    retired commands per unit) and ``run_seconds``; ``dram`` the model's DRAM bytes."""
    registers = outcome["registers"]
    image = Memory(config, dram, {b: _unpack(outcome["buffers"][b], word_bytes(config, b), config.buffer(b).bytes)
                                  for b in Buffer})
    mask = (1 << CYCLE_BITS) - 1
    cycles = {u: [(entry & mask, entry >> CYCLE_BITS) for entry in outcome["logs"][u]] for u in Unit}
    error = registers["ERROR"]
    cause, unit, detail = (field_value("ERROR", name, error) for name in ("CAUSE", "UNIT", "FIELD"))
    errors, token_error, dram_faults = [], False, []
    if field_value("STATUS", "ERROR", registers["STATUS"]):
        if cause in (ErrorCause.ILLEGAL_COMMAND, ErrorCause.ENGINE_FAULT):
            retired = registers[f"{Unit(unit).name}_RETIRED"]
            errors.append(RtlError(Unit(unit), retired, ERROR_NAMES[Unit(unit)][detail]))
        elif cause == ErrorCause.BANK_CONFLICT:
            retired = registers[f"{Unit(unit).name}_RETIRED"]
            errors.append(RtlError(Unit(unit), retired, Buffer(detail).name, "a bank conflict in"))
        elif cause == ErrorCause.TOKEN_ERROR:
            token_error = True
        elif cause == ErrorCause.DRAM_RANGE:
            dram_faults.append(Unit(unit))
    return RtlResult(image, cycles, registers["CYCLES_LO"], bool(field_value("STATUS", "DONE", registers["STATUS"])),
                     errors, token_error, dram_faults, outcome["run_seconds"], registers=registers)
