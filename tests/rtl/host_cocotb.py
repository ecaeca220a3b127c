"""The host register block's Verilog driven by cocotbext-axi's AxiLiteMaster (loaded by the simulator, from
tests/rtl/test_host_verilog.py): reset values, random byte writes back to back with reads beside them against
the model of the table (tests/rtl/host_model.py), and a run with its interrupt, counters and a refused write.
"""
from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import BY_NAME, DATA_BYTES, REGISTERS, ErrorCause, Response
from tests.rtl.host_model import CoreInputs, HostModel, place

CLOCK_NS = 2
CORE_INPUTS = ("done", "error", "error_cause", "error_unit", "error_field", "unit_busy", "unit_dram_stall",
               "unit_wait", "unit_retire")
UNMAPPED = (0x024, 0x0FC, 0x170, 0xFFC)
OFFSET = {register.name: register.offset for register in REGISTERS}
BATCHES = int(os.environ.get("AIPU_HOST_BATCHES", "12"))


async def reset(dut) -> AxiLiteMaster:
    for name in CORE_INPUTS:
        getattr(dut, name).value = 0
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    master.write_if.log.setLevel("WARNING")
    master.read_if.log.setLevel("WARNING")
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return master


async def read(master, address: int) -> tuple[int, int]:
    answer = await master.read(address, DATA_BYTES)
    return int(answer.resp), int.from_bytes(answer.data, "little")


async def write(master, address: int, data: int) -> int:
    return int((await master.write(address, data.to_bytes(DATA_BYTES, "little"))).resp)


def monitor(dut, seen: dict):
    """Counts, at each clock edge, the cycles ``busy`` is high (with CONV's ``unit_busy`` too) and the pulses."""
    async def run():
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            busy = int(dut.busy.value)
            seen["busy"] = seen.get("busy", 0) + busy
            seen["conv"] = seen.get("conv", 0) + (busy & int(dut.unit_busy.value) >> Unit.CONV & 1)
            for name in ("start", "abort"):
                seen[name] = seen.get(name, 0) + int(getattr(dut, name).value)
    return run()


@cocotb.test()
async def every_register_resets_to_the_table(dut):
    master = await reset(dut)
    for register in REGISTERS:
        assert await read(master, register.offset) == (Response.OKAY, register.reset_value(DEFAULT)), register.name
    for offset in UNMAPPED:
        assert await read(master, offset) == (Response.SLVERR, 0)


def _random_write(rng) -> tuple[int, bytes]:
    """A write of 1 .. 4 bytes inside one register (cocotbext-axi sets the strobes), never a START."""
    offsets = [r.offset for r in REGISTERS] + list(UNMAPPED)
    offset = int(rng.choice(offsets))
    first = int(rng.integers(0, DATA_BYTES))
    data = bytearray(rng.integers(0, 256, int(rng.integers(1, DATA_BYTES - first + 1)), dtype=np.uint8).tobytes())
    if offset == OFFSET["CONTROL"] and first == 0:
        data[0] &= 0xFE
    return offset + first, bytes(data)


@cocotb.test()
async def random_writes_back_to_back_agree_with_the_model(dut):
    """Each batch: writes queued back to back with reads of constant and unmapped offsets beside them, then
    every register read back, queued back to back too."""
    master, model, rng = await reset(dut), HostModel(DEFAULT), np.random.default_rng(7)
    constant = [r.offset for r in REGISTERS if r.constant] + list(UNMAPPED)
    for _ in range(BATCHES):
        writes = [_random_write(rng) for _ in range(16)]
        reads = [int(rng.choice(constant)) for _ in range(8)]
        write_tasks = [cocotb.start_soon(master.write(address, data)) for address, data in writes]
        read_tasks = [cocotb.start_soon(read(master, address)) for address in reads]
        for (address, data), task in zip(writes, write_tasks):
            first = address % DATA_BYTES
            strobe = ((1 << len(data)) - 1) << first
            expected = model.cycle(CoreInputs(), (address, int.from_bytes(data, "little") << 8 * first, strobe))
            assert int((await task).resp) == expected, (hex(address), data)
        for address, task in zip(reads, read_tasks):
            assert await task == model.read(address), hex(address)
        back = [cocotb.start_soon(read(master, r.offset)) for r in REGISTERS]
        for register, task in zip(REGISTERS, back):
            assert await task == model.read(register.offset), register.name


@cocotb.test()
async def a_run_counts_interrupts_and_stops_on_a_write_while_busy(dut):
    master, seen = await reset(dut), {}
    cocotb.start_soon(monitor(dut, seen))
    both = place("IRQ_ENABLE", "DONE", 1) | place("IRQ_ENABLE", "ERROR", 1)
    assert await write(master, OFFSET["PROGRAM_BASE_LO"], 0x1234_5678) == Response.OKAY
    assert await write(master, OFFSET["IRQ_ENABLE"], both) == Response.OKAY
    assert int(dut.program_base.value) == 0x1234_5678 and not int(dut.irq.value)
    assert await write(master, OFFSET["CONTROL"], 1) == Response.OKAY
    dut.unit_busy.value = 1 << Unit.CONV
    await ClockCycles(dut.clk, 10)
    dut.done.value = 1
    await RisingEdge(dut.clk)
    dut.done.value = 0
    dut.unit_busy.value = 0
    await RisingEdge(dut.clk)
    assert int(dut.irq.value) and not int(dut.busy.value)
    status = {fld.name: fld for fld in BY_NAME["STATUS"].fields}
    assert await read(master, OFFSET["STATUS"]) == (Response.OKAY, 1 << status["DONE"].lsb)
    assert await read(master, OFFSET["CYCLES_LO"]) == (Response.OKAY, seen["busy"])
    assert await read(master, OFFSET["CONV_BUSY"]) == (Response.OKAY, seen["conv"]) and seen["conv"] >= 10
    assert await write(master, OFFSET["IRQ_STATUS"], both) == Response.OKAY
    await RisingEdge(dut.clk)
    assert not int(dut.irq.value)

    assert await write(master, OFFSET["CONTROL"], 1) == Response.OKAY
    assert await write(master, OFFSET["PROGRAM_BASE_LO"], 0) == Response.SLVERR
    assert await read(master, OFFSET["PROGRAM_BASE_LO"]) == (Response.OKAY, 0x1234_5678)
    refused = place("ERROR", "CAUSE", ErrorCause.REGISTER_WRITE_WHILE_BUSY) | place("ERROR", "FIELD",
                                                                                  OFFSET["PROGRAM_BASE_LO"])
    assert await read(master, OFFSET["ERROR"]) == (Response.OKAY, refused)
    assert int(dut.irq.value) and seen["start"] == 2 and seen["abort"] == 1
