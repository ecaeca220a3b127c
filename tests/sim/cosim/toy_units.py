"""Toy units that exercise the co-simulation harness, not any real datapath: a unit that only takes time and a
LOAD that copies one DRAM word into one ACT word (DRAM latency, buffer writes, DRAM faults, read-back)."""
from __future__ import annotations

from amaranth.hdl import Signal
from amaranth.lib.wiring import Out

from aipu.rtl.ports import dram_read_port, word_count, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

ENGINE_CYCLES = 5


def timed_unit(unit: Unit):
    """A unit whose engine takes ENGINE_CYCLES per command and touches nothing."""

    class Timed(UnitComponent):
        UNIT = unit

        def elaborate_engine(self, m, word, start, done, fault, fault_field):
            left = Signal(range(ENGINE_CYCLES + 1))
            with m.If(start):
                m.d.sync += left.eq(ENGINE_CYCLES)
            with m.Elif(left != 0):
                m.d.sync += left.eq(left - 1)
                m.d.comb += done.eq(left == 1)

    Timed.__qualname__ = f"Timed{unit.name.title()}"
    return Timed


class CopyWordLoad(UnitComponent):
    """LOAD reduced to one word: ACT word ``sram_addr // port_bytes`` := DRAM word ``dram_addr // bytes_per_cycle``
    (truncated or zero-extended to the ACT port)."""

    UNIT = Unit.LOAD

    def ports(self, config):
        return {"dram_read": Out(dram_read_port(config)), "act_write": Out(write_port(config, Buffer.ACT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        view = self.view(word, Opcode.LOAD)
        config = self.config
        waiting = Signal()
        m.d.comb += [self.dram_read.addr.eq(view.dram_addr // config.dram.bytes_per_cycle),
                     self.dram_read.valid.eq(start)]
        with m.If(start):
            m.d.sync += waiting.eq(1)
        with m.If(waiting & self.dram_read.data_valid):
            m.d.sync += waiting.eq(0)
            m.d.comb += [self.act_write.addr.eq((view.sram_addr // config.buffer(Buffer.ACT).port_bytes)
                                                % word_count(config, Buffer.ACT)),
                         self.act_write.data.eq(self.dram_read.data), self.act_write.mask.eq(-1),
                         self.act_write.en.eq(1), done.eq(1)]


def copy_command(dram_addr: int, sram_addr: int, **tokens) -> Command:
    return Command.make(Opcode.LOAD, sram_addr=sram_addr, dram_addr=dram_addr, **tokens)


def expected_copies(program: Program, memory: Memory) -> Memory:
    """The image after the program's CopyWordLoad commands, computed in Python."""
    config, result = memory.config, memory.copy()
    dram_word, act_word = config.dram.bytes_per_cycle, config.buffer(Buffer.ACT).port_bytes
    act = result.buffers[Buffer.ACT]
    for command in program.queues[Unit.LOAD]:
        source = command.args["dram_addr"] // dram_word * dram_word
        target = command.args["sram_addr"] // act_word % word_count(config, Buffer.ACT) * act_word
        data = result.dram[source:source + dram_word].tobytes()[:act_word].ljust(act_word, b"\0")
        act[target:target + act_word] = list(data)
    return result
