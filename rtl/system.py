"""The NPU top the units run in: command queues, token queues, on-chip buffers and a DRAM model.

Each unit gets its own ports into the buffers it names (:mod:`aipu.rtl.ports`): the buffers are modelled as
multi-ported SRAMs, so units never stall on each other here (a correct program never touches the same bytes
from two units at once; bank conflicts of a real floor plan are the cycle model's business). Command queues
are memories a fetcher streams from, one per unit; a testbench preloads them and every buffer by backdoor
(``init`` for Amaranth's simulator, the memories' arrays for Verilog simulators), sets ``queue_lengths``,
raises ``run`` and waits for ``done`` or an error. ``cycle_log`` records the start and retire cycle of every
command (low and high 32 bits of entry i = command i of the unit's queue).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.rtl.fabric import CYCLE_BITS, attach_buffer_ports, buffer_memory, cycle_log, log_cycles, token_queues
from aipu.rtl.ports import port_space, word_bytes, word_count
from aipu.rtl.unit import UNITS, UnitComponent
from aipu.sim.machine import memory as machine_memory
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import COMMAND_BITS, COMMAND_BYTES, Unit


def _words(data_bytes: bytes, nbytes: int, depth: int) -> list[int]:
    """``data_bytes`` as ``depth`` little-endian words of ``nbytes`` (zero-padded)."""
    padded = data_bytes.ljust(depth * nbytes, b"\0")
    return [int.from_bytes(padded[i * nbytes:(i + 1) * nbytes], "little") for i in range(depth)]


class System(wiring.Component):
    """Units behind per-unit command queues, a token crossbar, shared buffers and DRAM.

    ``units``: the :class:`UnitComponent` classes to instantiate (queues of absent units must stay empty).
    ``image`` / ``queues``: initial memory contents and command words per unit for Amaranth's simulator
    (Verilog: leave None and preload by backdoor). Words are raw, so a test can queue an illegal one.
    """

    def __init__(self, config: HardwareConfig, units, *, program_depth: int, dram_bytes: int,
                 image: machine_memory.Memory | None = None, queues: dict[Unit, list[bytes]] | None = None):
        self.config = config
        self.units: dict[Unit, UnitComponent] = {cls.UNIT: cls(config) for cls in units}
        self.program_depth = max(1, program_depth)
        self.dram_bytes = dram_bytes
        self._image, self._queues = image, queues
        index_bits = unsigned(self.program_depth.bit_length())
        field_bits = unsigned(max(max(len(u.error_names) for u in self.units.values()) - 1, 1).bit_length())
        dram_words = -(-max(dram_bytes, 1) // config.dram.bytes_per_cycle)
        super().__init__({
            "run": In(1),
            # DRAM words a program may address: the whole model unless a Verilog build shared by programs with
            # smaller images (its DRAM rounded up) sets the image's size, so the fault fires where it would
            "dram_words": In(range(dram_words + 1), init=dram_words),
            "queue_lengths": In(data.ArrayLayout(index_bits, UNITS)),
            "done": Out(1),                                        # FINISH has executed
            "failed": Out(UNITS),                                  # bit u: unit u stopped on an error
            "error_fields": Out(data.ArrayLayout(field_bits, UNITS)),   # index into units[u].error_names
            "retired": Out(data.ArrayLayout(index_bits, UNITS)),   # commands retired per unit
            "token_error": Out(1),                                 # FINISH found a token queue not empty
            "dram_fault": Out(UNITS),                              # bit u: unit u addressed beyond the DRAM model
            "cycle": Out(CYCLE_BITS),
        })
        self.buffers = {b: buffer_memory(config, b, self._buffer_init(b)) for b in Buffer}
        self.dram = Memory(shape=unsigned(8 * config.dram.bytes_per_cycle), depth=dram_words,
                           init=_words(image.dram.tobytes(), config.dram.bytes_per_cycle, dram_words)
                           if image is not None else [])
        self.command_memories = {u: Memory(shape=unsigned(COMMAND_BITS), depth=self.program_depth,
                                           init=self._queue_init(u)) for u in self.units}
        self.cycle_logs = {u: cycle_log(self.program_depth) for u in self.units}

    def _buffer_init(self, buffer: Buffer) -> list[int]:
        if self._image is None:
            return []
        return _words(self._image.buffers[buffer].tobytes(), word_bytes(self.config, buffer),
                      word_count(self.config, buffer))

    def _queue_init(self, unit: Unit) -> list[int]:
        if self._queues is None:
            return []
        return _words(b"".join(self._queues.get(unit, ())), COMMAND_BYTES, self.program_depth)

    def memories(self) -> dict[str, Memory]:
        """Every memory a testbench preloads or reads back, by its name in the design (in Verilog, the name of
        its ``reg`` array in the top module, which a cocotb testbench writes and reads by backdoor)."""
        return {**{f"buffer_{buffer.name.lower()}": mem for buffer, mem in self.buffers.items()}, "dram": self.dram,
                **{f"queue_{unit.name.lower()}": mem for unit, mem in self.command_memories.items()},
                **{f"cycle_log_{unit.name.lower()}": mem for unit, mem in self.cycle_logs.items()}}

    def elaborate(self, platform) -> Module:
        m = Module()
        for name, mem in self.memories().items():
            m.submodules[name] = mem
        m.d.sync += self.cycle.eq(self.cycle + 1)

        for unit, component in self.units.items():
            name = unit.name.lower()
            m.submodules[name] = component
            self._fetch(m, unit, component)
            log_cycles(m, self.cycle_logs[unit], self.retired[unit], self.cycle, component)
            for name in attach_buffer_ports(m, self.buffers, component):
                self._attach_dram(m, unit, name, port_space(name)[1], getattr(component, name))
            m.d.comb += [self.failed[unit].eq(component.error), self.error_fields[unit].eq(component.error_field)]
            with m.If(component.retire):
                m.d.sync += self.retired[unit].eq(self.retired[unit] + 1)
            with m.If(component.finished):
                m.d.comb += self.done.eq(1)
        self._tokens(m)
        return m

    def _fetch(self, m: Module, unit: Unit, component: UnitComponent) -> None:
        mem = self.command_memories[unit]
        port = mem.read_port(domain="comb")
        pointer = Signal(range(self.program_depth + 1), name=f"fetch_{unit.name.lower()}")
        m.d.comb += [port.addr.eq(pointer), component.command.payload.eq(port.data),
                     component.command.valid.eq(self.run & (pointer < self.queue_lengths[unit]))]
        with m.If(component.command.valid & component.command.ready):
            m.d.sync += pointer.eq(pointer + 1)

    def _attach_dram(self, m: Module, unit: Unit, name: str, kind: str, port) -> None:
        with m.If(port.valid & (port.addr >= self.dram_words)):
            m.d.sync += self.dram_fault[unit].eq(1)
        m.d.comb += port.ready.eq(1)
        if kind == "write":
            write = self.dram.write_port(granularity=8)
            m.d.comb += [write.addr.eq(port.addr), write.data.eq(port.data),
                         write.en.eq(port.mask & port.valid.replicate(len(port.mask)))]
            return
        # Reads: the request waits latency - 1 cycles in a ring, then the synchronous read adds one.
        valid, addr = port.valid, port.addr
        delay = self.config.dram.latency_cycles - 1
        if delay:
            ring = Memory(shape=unsigned(len(port.addr) + 1), depth=delay, init=[])
            m.submodules[f"dram_ring_{name}_{unit.name.lower()}"] = ring
            slot = Signal(range(delay), name=f"ring_slot_{name}_{unit.name.lower()}")
            with m.If(slot == delay - 1):
                m.d.sync += slot.eq(0)
            with m.Else():
                m.d.sync += slot.eq(slot + 1)
            write, read = ring.write_port(), ring.read_port(domain="comb")
            m.d.comb += [write.addr.eq(slot), write.en.eq(1), write.data.eq(Cat(port.valid, port.addr)),
                         read.addr.eq(slot)]
            valid, addr = read.data[0], read.data[1:]
        read = self.dram.read_port()
        data_valid = Signal(name=f"dram_data_valid_{name}_{unit.name.lower()}")
        m.d.sync += data_valid.eq(valid)
        m.d.comb += [read.en.eq(valid), read.addr.eq(addr), port.data.eq(read.data), port.data_valid.eq(data_valid)]

    def _tokens(self, m: Module) -> None:
        """The token queues; FINISH checks that all are empty when it executes."""
        holding = token_queues(m, self.config.queues.token_depth, self.units)
        for unit, component in self.units.items():
            others = [self.retired[other] == self.queue_lengths[other] for other in Unit if other != unit]
            m.d.comb += component.others_drained.eq(Cat(*others).all())
            with m.If(component.finished & holding):
                m.d.sync += self.token_error.eq(1)
