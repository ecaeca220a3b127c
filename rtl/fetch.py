"""The command fetcher: streams the program image's queues from DRAM into one FIFO per unit.

On ``start`` it checks ``program_base`` (a multiple of ``program_image.alignment``, the header below
``dram_bytes``), reads the header (``aipu.sim.machine.program_image``), checks its constants against the
build's and every queue against ``dram_bytes``, then keeps each unit's FIFO filled through its one
``dram_read`` port. A refused run raises ``error`` with ``error_field`` indexing ``FETCH_ERRORS`` (the host
block reports ERROR.CAUSE = PROGRAM_IMAGE, ERROR.UNIT = FETCHER); nothing is requested after a refusal.

The schedule (docs/rtl.md, "Command fetch"; ``aipu.sim.timing.fetch`` states it rule by rule and replays it):

  IDLE     until ``start`` (cycle 0), which restarts from any state: the base checked -> HEADER or ERROR
  HEADER   the header's words requested in order, each response shifted into the header register;
           after the last response -> CHECK
  CHECK    one cycle: the fields checked -> FETCH (the counts into ``queue_lengths``) or ERROR
  FETCH    chunks (a command, or one DRAM word of several) requested while credits last, round-robin;
           once every chunk is requested and answered -> DONE

Requests leave from one register, held until taken and refilled in any cycle it is empty or taken. A chunk's
words are requested back to back, so the responses of a chunk arrive together (in request order) and one
assembly register serves every unit; a FIFO of unit numbers, one per chunk in flight, routes them.
"""
from __future__ import annotations

from enum import IntEnum

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.lanes import select_word
from aipu.rtl.ports import dram_read_port, dram_word_address_bits
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import COMMAND_BITS, COMMAND_BYTES, Unit
from aipu.sim.machine.program_image import (BY_NAME, FETCH_ERRORS, HEADER_BYTES, HEADER_FIELDS, alignment,
                                            constant_values)
from aipu.sim.timing.fetch import UNITS, FetchGeometry

COUNT_BITS = 8 * BY_NAME["load_count"].size


class State(IntEnum):
    IDLE = 0
    HEADER = 1
    CHECK = 2
    FETCH = 3
    DONE = 4
    ERROR = 5


class CommandFetcher(wiring.Component):
    """The fetcher of ``config`` whose per-unit FIFOs hold at least ``fifo_depth`` commands (whole chunks)."""

    def __init__(self, config: HardwareConfig, fifo_depth: int = 4):
        self.config = config
        self.geometry = FetchGeometry.of(config, fifo_depth)
        super().__init__({
            "start": In(1),                                   # one-cycle pulse: fetch the image at program_base
            "program_base": In(config.dram.address_bits),     # DRAM byte address, a multiple of alignment(config)
            "dram_bytes": In(config.dram.address_bits + 1),   # the program may read bytes 0 .. dram_bytes - 1
            "dram_read": Out(dram_read_port(config)),
            **{f"command_{unit.name.lower()}": Out(stream.Signature(COMMAND_BITS)) for unit in Unit},
            "queue_lengths": Out(data.ArrayLayout(COUNT_BITS, UNITS)),   # the header's counts, from FETCH on
            "busy": Out(1),                                   # HEADER, CHECK or FETCH
            "error": Out(1),                                  # the run was refused (until the next start)
            "error_field": Out(range(len(FETCH_ERRORS))),     # index into FETCH_ERRORS while ``error``
        })

    def command(self, unit: Unit):
        """The command stream of ``unit`` (for the unit's ``command`` input)."""
        return getattr(self, f"command_{unit.name.lower()}")

    def elaborate(self, platform) -> Module:
        m = Module()
        geometry = self.geometry
        state = Signal(State)
        self._fifos = [ResetInserter(self.start)(fifo.SyncFIFO(width=8 * geometry.chunk_bytes,
                                                               depth=geometry.chunks_per_fifo)) for _ in Unit]
        self._tags = ResetInserter(self.start)(fifo.SyncFIFO(width=(UNITS - 1).bit_length(),
                                                             depth=UNITS * geometry.chunks_per_fifo))
        m.submodules.tags = self._tags
        for unit, queue in zip(Unit, self._fifos):
            m.submodules[f"fifo_{unit.name.lower()}"] = queue
        self._registers()
        port = self.dram_read
        self._free = ~port.valid | port.ready
        with m.If(port.valid & port.ready):
            m.d.sync += port.valid.eq(0)
        with m.If(state == State.HEADER):
            self._header(m, state)
        with m.Elif(state == State.CHECK):
            self._check(m, state)
        with m.Elif(state == State.FETCH):
            self._fetch(m, state)
            self._answers(m)
        self._streams(m)
        self._start(m, state)
        m.d.comb += [self.busy.eq((state == State.HEADER) | (state == State.CHECK) | (state == State.FETCH)),
                     self.error.eq(state == State.ERROR)]
        return m

    def _registers(self) -> None:
        """The state a run keeps besides the FSM, the FIFOs and the request register. Counters that a
        configuration leaves at 0 keep one bit, so that no signal of the Verilog is empty."""
        geometry, word_bits = self.geometry, dram_word_address_bits(self.config)
        self._header_bits = Signal(8 * geometry.word_bytes * geometry.header_words)
        self._header_chosen = Signal(range(geometry.header_words + 1))
        self._header_answered = Signal(range(geometry.header_words + 1))
        self._chunk_words_left = Signal(range(max(2, geometry.words_per_chunk)))   # chunk words still to request
        self._answered = Signal(range(max(2, geometry.words_per_chunk)))           # chunk words answered
        self._next_unit = Signal(range(UNITS))                  # round-robin: where the search starts
        self._next_word = [Signal(word_bits, name=f"next_word_{u.name.lower()}") for u in Unit]
        self._chunks_left = [Signal(COUNT_BITS, name=f"chunks_left_{u.name.lower()}") for u in Unit]
        self._commands_left = [Signal(COUNT_BITS, name=f"commands_left_{u.name.lower()}") for u in Unit]
        self._credits = [Signal(range(geometry.chunks_per_fifo + 1), init=geometry.chunks_per_fifo,
                                name=f"credits_{u.name.lower()}") for u in Unit]
        self._lanes = [Signal(range(max(2, geometry.commands_per_chunk)), name=f"lane_{u.name.lower()}")
                       for u in Unit]
        self._spend = Signal(UNITS)         # bit u: a chunk of unit u chosen this cycle
        self._give = Signal(UNITS)          # bit u: unit u took the last command of a chunk this cycle

    def _field(self, name: str):
        field = BY_NAME[name]
        return self._header_bits[8 * field.offset:8 * (field.offset + field.size)]

    def _header(self, m: Module, state: Signal) -> None:
        """Request the header's words in order; shift each answer in (word 0 ends lowest)."""
        geometry, port = self.geometry, self.dram_read
        chosen, answered = self._header_chosen, self._header_answered
        with m.If(self._free & (chosen != geometry.header_words)):
            base_word = (self.program_base >> (geometry.word_bytes - 1).bit_length())[:len(port.addr)]
            m.d.sync += [port.valid.eq(1), port.addr.eq(base_word + chosen), chosen.eq(chosen + 1)]
        with m.If(port.data_valid):
            m.d.sync += [self._header_bits.eq(Cat(self._header_bits[len(port.data):], port.data)),
                         answered.eq(answered + 1)]
            with m.If(answered == geometry.header_words - 1):
                m.d.sync += state.eq(State.CHECK)

    def _refusals(self) -> list:
        """One condition per FETCH_ERRORS entry after ``program_base``: the header field is refused."""
        expected, limit = constant_values(self.config), self.dram_bytes
        align_bits = (alignment(self.config) - 1).bit_length()
        refused = []
        for field in HEADER_FIELDS:
            if field.unit is None:
                refused.append(self._field(field.name) != expected[field.name])
                continue
            name = field.unit.name.lower()
            start = self.program_base + self._field(f"{name}_offset")
            if field.name.endswith("_offset"):
                refused.append((self._field(field.name)[:align_bits] != 0) | (start > limit))
            else:
                refused.append(start + (self._field(field.name) * COMMAND_BYTES) > limit)
        return refused

    def _check(self, m: Module, state: Signal) -> None:
        """First refused field -> ERROR; else every unit's queue state loaded -> FETCH."""
        refused = self._refusals()
        with m.If(Cat(*refused).any()):
            m.d.sync += state.eq(State.ERROR)
            for index, condition in reversed(list(enumerate(refused, 1))):   # the first refused wins
                with m.If(condition):
                    m.d.sync += self.error_field.eq(index)
        with m.Else():
            m.d.sync += state.eq(State.FETCH)
            geometry = self.geometry
            shift = (geometry.word_bytes - 1).bit_length()
            per_chunk = (geometry.commands_per_chunk - 1).bit_length()
            for unit in Unit:
                name = unit.name.lower()
                count, offset = self._field(f"{name}_count"), self._field(f"{name}_offset")
                m.d.sync += [self._next_word[unit].eq((self.program_base + offset) >> shift),
                             self._chunks_left[unit].eq((count + geometry.commands_per_chunk - 1) >> per_chunk),
                             self._commands_left[unit].eq(count), self.queue_lengths[unit].eq(count)]

    def _fetch(self, m: Module, state: Signal) -> None:
        """Choose the next request: the chunk under way, else the round-robin unit with a chunk and a credit."""
        geometry, port, tags = self.geometry, self.dram_read, self._tags
        needy = Cat(*(left.any() & credit.any() for left, credit in zip(self._chunks_left, self._credits)))
        rotated = (Cat(needy, needy) >> self._next_unit)[:UNITS]      # bit i: unit next_unit + i (mod UNITS)
        step, sum_ = Signal(range(UNITS)), Signal(range(2 * UNITS))
        for index in reversed(range(UNITS)):                          # the lowest needy step wins
            with m.If(rotated[index]):
                m.d.comb += step.eq(index)
        chosen = Signal(range(UNITS))
        m.d.comb += [sum_.eq(self._next_unit + step),
                     chosen.eq(Mux(sum_ >= UNITS, sum_ - UNITS, sum_))]
        with m.If(self._free & self._chunk_words_left.any()):
            m.d.sync += [port.valid.eq(1), port.addr.eq(port.addr + 1),
                         self._chunk_words_left.eq(self._chunk_words_left - 1)]
        with m.Elif(self._free & needy.any()):
            m.d.comb += [self._spend.eq(1 << chosen), tags.w_en.eq(1), tags.w_data.eq(chosen)]
            m.d.sync += [port.valid.eq(1), self._chunk_words_left.eq(geometry.words_per_chunk - 1),
                         self._next_unit.eq(Mux(chosen == UNITS - 1, 0, chosen + 1))]
            for unit in Unit:
                with m.If(self._spend[unit]):
                    m.d.sync += [port.addr.eq(self._next_word[unit]),
                                 self._next_word[unit].eq(self._next_word[unit] + geometry.words_per_chunk),
                                 self._chunks_left[unit].eq(self._chunks_left[unit] - 1)]
        with m.If(~port.valid & ~tags.level.any() & ~self._chunk_words_left.any()
                  & ~Cat(*(left.any() for left in self._chunks_left)).any()):
            m.d.sync += state.eq(State.DONE)

    def _answers(self, m: Module) -> None:
        """A chunk's last word answered: the chunk into the FIFO of the unit its tag names."""
        geometry, port, tags = self.geometry, self.dram_read, self._tags
        chunk = port.data
        if geometry.words_per_chunk > 1:                 # a command's words answered so far, the first lowest
            assembly = Signal(COMMAND_BITS)
            chunk = Cat(assembly[len(port.data):], port.data)
            with m.If(port.data_valid):
                m.d.sync += assembly.eq(chunk)
        last = port.data_valid & (self._answered == geometry.words_per_chunk - 1)
        with m.If(port.data_valid):
            m.d.sync += self._answered.eq(self._answered + 1)
        with m.If(last):
            m.d.sync += self._answered.eq(0)
        owner = Signal(UNITS)                   # one-hot: the unit the answered chunk belongs to
        m.d.comb += [tags.r_en.eq(last), owner.eq(1 << tags.r_data)]
        for unit, queue in zip(Unit, self._fifos):
            m.d.comb += [queue.w_data.eq(chunk), queue.w_en.eq(last & owner[unit])]

    def _streams(self, m: Module) -> None:
        """Each unit's stream: the head chunk's next command; its last one taken frees the chunk and a credit."""
        per_chunk = self.geometry.commands_per_chunk
        for unit, queue in zip(Unit, self._fifos):
            out, lane, left = self.command(unit), self._lanes[unit], self._commands_left[unit]
            taken = out.valid & out.ready
            last = (lane == per_chunk - 1) | (left == 1)
            payload = (queue.r_data if per_chunk == 1
                       else select_word(m, f"payload_{unit.name.lower()}", queue.r_data, lane, COMMAND_BITS))
            m.d.comb += [out.valid.eq(queue.r_rdy), out.payload.eq(payload),
                         queue.r_en.eq(taken & last), self._give[unit].eq(taken & last)]
            with m.If(taken):
                m.d.sync += [left.eq(left - 1), lane.eq(lane + 1)]
                with m.If(last):
                    m.d.sync += lane.eq(0)
            m.d.sync += self._credits[unit].eq(self._credits[unit] - self._spend[unit] + self._give[unit])

    def _start(self, m: Module, state: Signal) -> None:
        """``start`` restarts from any state (after everything else, so that it wins)."""
        align_bits = (alignment(self.config) - 1).bit_length()
        base_refused = (self.program_base[:align_bits] != 0) | (self.program_base + HEADER_BYTES > self.dram_bytes)
        with m.If(self.start):
            m.d.sync += [self.dram_read.valid.eq(0), self._header_chosen.eq(0), self._header_answered.eq(0),
                         self._chunk_words_left.eq(0), self._answered.eq(0), self._next_unit.eq(0),
                         self.error_field.eq(0),
                         *(signal.eq(signal.init) for group in (self._chunks_left, self._commands_left,
                                                                self._credits, self._lanes) for signal in group),
                         *(self.queue_lengths[unit].eq(0) for unit in Unit)]
            with m.If(base_refused):
                m.d.sync += state.eq(State.ERROR)
            with m.Else():
                m.d.sync += state.eq(State.HEADER)
