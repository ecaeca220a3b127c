"""What every NPU top wires between its units: the on-chip buffers behind the units' ports, the token queues
between units and the per-unit command-cycle logs a testbench reads back.

Both tops use these: :class:`aipu.rtl.npu.Npu` (the NPU a chip team integrates) and
:class:`aipu.rtl.system.System` (the test harness with backdoor-loaded queues and an internal DRAM).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, Value, unsigned
from amaranth.lib.memory import Memory

from aipu.rtl.ports import port_space, word_bytes, word_count
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Unit

CYCLE_BITS = 32


def buffer_memory(config: HardwareConfig, buffer: Buffer, init: list[int] | None = None) -> Memory:
    """The memory of ``buffer``: words of its ``port_bytes``."""
    return Memory(shape=unsigned(8 * word_bytes(config, buffer)), depth=word_count(config, buffer), init=init or [])


def attach_buffer_ports(m: Module, buffers: dict[Buffer, Memory], component: UnitComponent) -> list[str]:
    """Give each port of ``component`` into one of ``buffers`` a port of its own on the buffer's memory (reads
    synchronous, writes with a byte mask); ports into other buffers are the caller's. Returns the names of its
    DRAM ports, which the top attaches itself."""
    dram_ports = []
    for name in component.signature.members:
        space = port_space(name)
        if space is None:
            continue
        target, kind = space
        port = getattr(component, name)
        if target == "dram":
            dram_ports.append(name)
        elif target not in buffers:
            continue
        elif kind == "read":
            read = buffers[target].read_port()
            m.d.comb += [read.addr.eq(port.addr), read.en.eq(port.en), port.data.eq(read.data)]
        else:
            write = buffers[target].write_port(granularity=8)
            m.d.comb += [write.addr.eq(port.addr), write.data.eq(port.data),
                         write.en.eq(port.mask & port.en.replicate(len(port.mask)))]
    return dram_ports


def token_queues(m: Module, depth: int, units: dict[Unit, UnitComponent]) -> Value:
    """One counter of ``depth`` tokens per ordered pair of units, driving every unit's ``pop_available`` and
    ``push_room``. Returns a value that is 1 while some queue holds a token (FINISH must find none)."""
    counters = []
    for source in Unit:
        for target in Unit:
            if source == target:
                continue
            counter = Signal(range(depth + 1), name=f"tokens_{source.name.lower()}_{target.name.lower()}")
            counters.append(counter)
            up = units[source].push[target] if source in units else 0
            down = units[target].pop[source] if target in units else 0
            m.d.sync += counter.eq(counter + up - down)
            if target in units:
                m.d.comb += units[target].pop_available[source].eq(counter != 0)
            if source in units:
                m.d.comb += units[source].push_room[target].eq(counter != depth)
    return Cat(*(counter != 0 for counter in counters)).any()


def cycle_log(depth: int) -> Memory:
    """A unit's command-cycle log: entry i holds command i's start cycle (low half) and retire cycle (high)."""
    return Memory(shape=unsigned(2 * CYCLE_BITS), depth=depth, init=[])


def log_cycles(m: Module, log: Memory, index: Value, cycle: Value, component: UnitComponent) -> None:
    """Record ``cycle`` at entry ``index`` of ``log`` when ``component`` starts and when it retires."""
    port = log.write_port(granularity=CYCLE_BITS)
    m.d.comb += [port.addr.eq(index), port.data.eq(Cat(cycle, cycle)),
                 port.en.eq(Cat(component.start, component.retire))]
