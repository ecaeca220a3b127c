"""The NPU's host register block: an AXI4-Lite slave over the register table of :mod:`aipu.sim.machine.registers`.

Offsets, access, reset values and field positions come from the table (docs/registers.md is generated from
it); this module adds the bus protocol and the run state behind the live registers. The bus side takes one
write (address and data in any order) and one read at a time, a read beside a write: a write takes effect
in the cycle after its last handshake and is answered in the next, a read is answered in the cycle after its
handshake (at the earliest: an earlier response still waiting holds them). The core side (docs/rtl.md, "Host
registers"):

  start, abort   one-cycle pulses: run the program at ``program_base``; stop now (a register was written while busy)
  busy, irq      levels: STATUS.BUSY; any IRQ_STATUS bit that IRQ_ENABLE enables
  program_base, dram_bytes   the registers' values (held while busy: writing them then is refused)
  done, error    level or pulse, read while busy: the run completed / stopped on the error that
                 ``error_cause``, ``error_unit`` and ``error_field`` name (ERROR's fields); both ignored once
                 the run has ended, so the core must lower them when ``start`` pulses
  unit_<input>   one bit per unit and cycle for each UNIT_COUNTERS counter (``unit_busy``, ``unit_retire``, ...)
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.axi import AxiLiteSignature
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import (ADDRESS_BITS, BY_NAME, COUNTER_BITS, DATA_BITS, DATA_BYTES, REGISTERS,
                                        UNIT_COUNTERS, Access, ErrorCause, Response, counter_name)

UNITS = len(Unit)
WORD_SHIFT = (DATA_BYTES - 1).bit_length()      # byte address -> register index
CYCLE_BITS = 2 * DATA_BITS


def byte_mask(strobe: Value) -> Value:
    """One bit per data bit from one strobe bit per byte."""
    return Cat(*(bit.replicate(8) for bit in strobe))


@dataclass(frozen=True)
class _Write:
    """The write the channel holds: ``commit`` high in the cycle it takes effect, at register ``index``, with
    ``bits`` (its strobed data), ``strobe`` (one bit per data bit) and ``error`` (answer SLVERR)."""

    commit: Signal
    index: Signal
    bits: Value
    strobe: Value
    error: Signal


class HostRegisters(wiring.Component):
    """The register block of ``config``: ``s_axil`` (AXI4-Lite slave) plus the core-side members above."""

    def __init__(self, config: HardwareConfig):
        self.config = config
        error = {fld.name: width for fld, width in BY_NAME["ERROR"].layout(config)}
        super().__init__({
            "s_axil": In(AxiLiteSignature(ADDRESS_BITS, DATA_BITS)),
            "start": Out(1), "abort": Out(1), "busy": Out(1), "irq": Out(1),
            "program_base": Out(self._pair_bits("PROGRAM_BASE")),
            "dram_bytes": Out(self._pair_bits("DRAM_BYTES")),
            "done": In(1), "error": In(1),
            "error_cause": In(error["CAUSE"]), "error_unit": In(error["UNIT"]), "error_field": In(error["FIELD"]),
            **{f"unit_{counter.input}": In(UNITS) for counter in UNIT_COUNTERS},
        })

    def _pair_bits(self, name: str) -> int:
        return sum(width for half in ("LO", "HI") for _, width in BY_NAME[f"{name}_{half}"].layout(self.config))

    def _field(self, word: Value, register: str, name: str) -> Value:
        """The bits of field ``name`` of ``register`` within ``word`` (a 32-bit value of that register)."""
        for fld, width in BY_NAME[register].layout(self.config):
            if fld.name == name:
                return word[fld.lsb:fld.lsb + width]
        raise KeyError(f"{register} has no field {name} under this configuration")

    def _pack(self, register: str, values: dict[str, Value]) -> Value:
        """A 32-bit word of ``register`` with each named field holding its value, every other bit 0."""
        parts, position = [], 0
        for fld, width in sorted(BY_NAME[register].layout(self.config), key=lambda placed: placed[0].lsb):
            if fld.name in values:
                parts += [Const(0, fld.lsb - position), values[fld.name][:width]]
                position = fld.lsb + width
        return Cat(*parts, Const(0, DATA_BITS - position))

    def elaborate(self, platform) -> Module:
        m = Module()
        self.stored = {r.name: Signal(DATA_BITS, init=r.reset_value(self.config), name=r.name.lower())
                       for r in REGISTERS if r.access in (Access.RW, Access.W1C)}
        self.running, self.finished, self.failed = Signal(), Signal(), Signal()
        self.error_word = Signal(DATA_BITS)
        self.cycles, self.cycles_high = Signal(CYCLE_BITS), Signal(DATA_BITS)
        self.counters = {counter_name(unit, counter): Signal(COUNTER_BITS, name=counter_name(unit, counter).lower())
                         for unit in Unit for counter in UNIT_COUNTERS}
        write = self._write_channel(m)
        accepted, refused = self._decode_write(m, write)
        start = accepted["CONTROL"] & self._field(write.bits, "CONTROL", "START").any()
        m.d.comb += [self.start.eq(start), self.abort.eq(refused), self.busy.eq(self.running),
                     self.irq.eq((self.stored["IRQ_STATUS"] & self.stored["IRQ_ENABLE"]).any())]
        self._store_writes(m, accepted, write)
        self._run(m, start, refused, write, accepted["IRQ_STATUS"])
        self._count(m, start)
        self._read_channel(m)
        return m

    def _write_channel(self, m: Module) -> _Write:
        """Address and data are each held until both are there and the response slot is free; then the write
        commits and its response (``_Write.error``: SLVERR, else OKAY) is offered on B in the next cycle."""
        bus = self.s_axil
        address_held, data_held = Signal(), Signal()
        index = Signal(ADDRESS_BITS - WORD_SHIFT)
        data, strobe = Signal(DATA_BITS), Signal(DATA_BYTES)
        m.d.comb += [bus.awready.eq(~address_held), bus.wready.eq(~data_held)]
        with m.If(bus.awvalid & ~address_held):
            m.d.sync += [address_held.eq(1), index.eq(bus.awaddr[WORD_SHIFT:])]
        with m.If(bus.wvalid & ~data_held):
            m.d.sync += [data_held.eq(1), data.eq(bus.wdata), strobe.eq(bus.wstrb)]
        write = _Write(commit=Signal(), index=index, bits=data & byte_mask(strobe), strobe=byte_mask(strobe),
                       error=Signal())
        m.d.comb += write.commit.eq(address_held & data_held & ~bus.bvalid)
        with m.If(write.commit):
            m.d.sync += [address_held.eq(0), data_held.eq(0), bus.bvalid.eq(1),
                         bus.bresp.eq(Mux(write.error, Response.SLVERR, Response.OKAY))]
        with m.Elif(bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        return write

    def _decode_write(self, m: Module, write: _Write) -> tuple[dict[str, Signal], Signal]:
        """``accepted[name]``: the committing write takes effect on writable register ``name``. ``refused``: it
        targets a register that may not change while busy, during a run. A write to a read-only or unmapped
        offset, or a refused one, answers SLVERR."""
        accepted, hits, refusals = {}, [], []
        for register in (r for r in REGISTERS if r.writable):
            hit = write.commit & (write.index == register.offset >> WORD_SHIFT)
            allowed = Const(1) if register.writable_while_busy else ~self.running
            accepted[register.name] = Signal(name=f"write_{register.name.lower()}")
            m.d.comb += accepted[register.name].eq(hit & allowed)
            hits.append(hit)
            refusals.append(hit & ~allowed)
        refused = Signal()
        m.d.comb += [refused.eq(Cat(*refusals).any()), write.error.eq(~Cat(*hits).any() | refused)]
        return accepted, refused

    def _store_writes(self, m: Module, accepted: dict[str, Signal], write: _Write) -> None:
        """RW registers take the strobed bits of their fields; IRQ_STATUS (W1C) is kept by :meth:`_run`."""
        for register in (r for r in REGISTERS if r.access is Access.RW):
            stored, keep = self.stored[register.name], write.strobe & register.mask(self.config)
            with m.If(accepted[register.name]):
                m.d.sync += stored.eq((stored & ~keep) | (write.bits & keep))
        m.d.comb += [self.program_base.eq(self._joined("PROGRAM_BASE")), self.dram_bytes.eq(self._joined("DRAM_BYTES"))]

    def _joined(self, name: str) -> Value:
        """The value of a LO/HI register pair: the fields of LO, then those of HI, as one number."""
        halves = (BY_NAME[f"{name}_LO"], BY_NAME[f"{name}_HI"])
        return Cat(*(self.stored[half.name][fld.lsb:fld.lsb + width]
                     for half in halves for fld, width in half.layout(self.config)))

    def _run(self, m: Module, start: Value, refused: Value, write: _Write, clear: Value) -> None:
        """STATUS, ERROR and IRQ_STATUS: START begins a run (clearing STATUS and ERROR); the first of a core
        error, a refused write and done ends it. An event sets its IRQ_STATUS bit even in the cycle a W1C write
        clears it."""
        done, failed = Signal(), Signal()                       # the IRQ_STATUS bits the run sets this cycle
        latched = {fld.name: Signal(width, name=f"error_{fld.name.lower()}")
                   for fld, width in BY_NAME["ERROR"].layout(self.config)}
        m.d.comb += [latched["CAUSE"].eq(self.error_cause), latched["UNIT"].eq(self.error_unit),
                     latched["FIELD"].eq(self.error_field)]
        with m.If(~self.error):
            m.d.comb += [latched["CAUSE"].eq(ErrorCause.REGISTER_WRITE_WHILE_BUSY), latched["UNIT"].eq(0),
                         latched["FIELD"].eq(write.index << WORD_SHIFT)]
        with m.If(start):
            m.d.sync += [self.running.eq(1), self.finished.eq(0), self.failed.eq(0), self.error_word.eq(0)]
        with m.Elif(self.running & (self.error | refused)):
            m.d.comb += failed.eq(1)
            m.d.sync += [self.running.eq(0), self.failed.eq(1), self.error_word.eq(self._pack("ERROR", latched))]
        with m.Elif(self.running & self.done):
            m.d.comb += done.eq(1)
            m.d.sync += [self.running.eq(0), self.finished.eq(1)]
        status = self.stored["IRQ_STATUS"]
        events = self._pack("IRQ_STATUS", {"DONE": done, "ERROR": failed})
        m.d.sync += status.eq((status & ~Mux(clear, write.bits, 0)) | events)

    def _count(self, m: Module, start: Value) -> None:
        """CYCLES counts the cycles STATUS.BUSY is set; each unit counter the cycles its input is high then,
        saturating. START clears them all."""
        with m.If(start):
            m.d.sync += [self.cycles.eq(0), *(counter.eq(0) for counter in self.counters.values())]
        with m.Elif(self.running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            for unit in Unit:
                for spec in UNIT_COUNTERS:
                    counter = self.counters[counter_name(unit, spec)]
                    with m.If(getattr(self, f"unit_{spec.input}")[unit] & ~counter.all()):
                        m.d.sync += counter.eq(counter + 1)

    def _read_values(self) -> dict[str, Value]:
        """What a read of each register returns."""
        values = {r.name: Const(r.reset_value(self.config), DATA_BITS) for r in REGISTERS if r.constant}
        values |= {name: stored & BY_NAME[name].mask(self.config) for name, stored in self.stored.items()}
        values |= {"CONTROL": Const(0, DATA_BITS), "ERROR": self.error_word,
                   "STATUS": self._pack("STATUS", {"BUSY": self.running, "DONE": self.finished,
                                                      "ERROR": self.failed}),
                   "CYCLES_LO": self.cycles[:DATA_BITS], "CYCLES_HI": self.cycles_high, **self.counters}
        missing = {r.name for r in REGISTERS} - set(values)
        if missing:
            raise ValueError(f"the register table has registers the RTL does not implement: {sorted(missing)}")
        return values

    def _read_channel(self, m: Module) -> None:
        """One read at a time: the address is decoded in its handshake cycle and the data offered on R in the
        next, until taken. An unmapped offset answers SLVERR and 0. Reading CYCLES_LO latches CYCLES_HI."""
        bus = self.s_axil
        m.d.comb += bus.arready.eq(~bus.rvalid)
        with m.If(bus.arvalid & ~bus.rvalid):
            m.d.sync += bus.rvalid.eq(1)
            with m.Switch(bus.araddr[WORD_SHIFT:]):
                for name, value in self._read_values().items():
                    with m.Case(BY_NAME[name].offset >> WORD_SHIFT):
                        m.d.sync += [bus.rdata.eq(value), bus.rresp.eq(Response.OKAY)]
                with m.Default():
                    m.d.sync += [bus.rdata.eq(0), bus.rresp.eq(Response.SLVERR)]
            with m.If(bus.araddr[WORD_SHIFT:] == BY_NAME["CYCLES_LO"].offset >> WORD_SHIFT):
                m.d.sync += self.cycles_high.eq(self.cycles[DATA_BITS:])
        with m.Elif(bus.rready):
            m.d.sync += bus.rvalid.eq(0)
