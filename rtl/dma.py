"""The DMA units: LOAD (strided DRAM pattern -> dense padded tile in ACT, WEIGHT, LUT or PARAM) and STORE
(dense tile in OUT -> strided DRAM pattern), executing exactly what ``sim/interpreter/`` ``_load`` and
``_store`` define (docs/rtl-dma.md).

Both walk the DRAM pattern one DRAM word at a time with a :class:`PatternWalker`: each step is one DRAM word
of one run, the bytes of the run it holds and where those bytes sit in the dense tile. LOAD runs two
walkers over the same pattern: one issues the read requests, the other replays the sequence to place the
responses (they come back in order), so requests never wait for responses. Runs that touch end to end in
DRAM (and in the tile) are walked as one run. Every step is given a fixed number of cycles (its *slot*) so
the buffer port keeps up; with the DRAM port always ready and a fixed ``dram.latency_cycles`` that makes each
command's cycles a pure function of its fields, ``aipu.sim.timing.dma.command_cycles``. A refused request or
write word is held until taken; LOAD queues responses that come while it is still writing (docs/rtl-dma.md,
"Refusals and late responses").

Before anything is written the engines check what the interpreter checks, and ask the DRAM model for the
pattern's last word (a *probe*: the System raises ``dram_fault`` if it lies beyond the model).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from amaranth.hdl import C, Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from aipu.rtl.arith import net
from aipu.rtl.dma_pattern import PatternWalker, low_bits, log2, pattern_walker, run_shape, window_words
from aipu.rtl.lanes import byte_mask, bytes_to_bits, select_word, shift_down, shift_up
from aipu.rtl.ports import dram_read_port, dram_write_port, read_port, word_bytes, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import CODEBOOK_INDEX_BITS, DTYPE_NUMPY, BYTE_TYPES, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import (CIRC_LOG2_BITS, CIRC_SIGNS_MAX, CODEBOOK_ADDR_BITS, CODEBOOK_SLOT_BYTES,
                                  LOADABLE_BUFFERS, STRIDE_BYTES_BITS, IndexBits, Opcode, Unit)

MAX_EXPANSION = 8 // min(CODEBOOK_INDEX_BITS)      # tile bytes one DRAM byte of indices becomes, at most
TABLE_BYTES = max(CODEBOOK_SLOT_BYTES, CIRC_SIGNS_MAX // 8)   # LOAD's register of a codebook or of sign bits


def _words_written(m: Module, walker: PatternWalker, port_bytes: int, words: int):
    """(full words completed, words written) by a LOAD step: its tile bytes end ``full`` words and, at a
    row end, the partial word they stop in (at most ``words``)."""
    shift = log2(port_bytes)
    end = walker.dense + walker.tile_count
    full, written = Signal(range(words + 1)), Signal(range(words + 1))
    m.d.comb += [full.eq((end >> shift) - (walker.dense >> shift)),
                 written.eq(full + (walker.row_end & (low_bits(end, shift) != 0)))]
    return full, written


class _LoadChannel(Elaboratable):
    """The LOAD datapath into one buffer: request walker, response walker, the realigning writer (one
    buffer word per cycle) and the padding writer. ``go``: the probe is offered and the walk begins. A
    request stays offered until ``request_taken``; ``response_valid`` is a response handed over, which the
    unit does only while ``response_ready`` (no words of the previous response left to write). With a
    ``codebook`` (WEIGHT's channel) each response's bytes may be indices, expanded before they are placed."""

    def __init__(self, config: HardwareConfig, buffer: Buffer, cmd, shape, dense, codebook=None):
        self.config, self.buffer, self.cmd, self.shape, self.dense = config, buffer, cmd, shape, dense
        self.codebook = codebook
        self.port_bytes = word_bytes(config, buffer)
        self.words = window_words(config, self.port_bytes, 1 if codebook is None else MAX_EXPANSION)
        self.go = Signal()
        self.request_valid, self.request_addr, self.request_taken = Signal(), Signal(shape.width), Signal()
        self.response_data = Signal(8 * config.dram.bytes_per_cycle)
        self.response_valid, self.response_ready = Signal(), Signal()
        self.write = SimpleNamespace(addr=Signal(shape.width), en=Signal(), data=Signal(8 * self.port_bytes),
                                     mask=Signal(self.port_bytes))
        self.done = Signal()

    def elaborate(self, platform) -> Module:
        m = Module()
        config, cmd, shape, dense = self.config, self.cmd, self.shape, self.dense
        port, shift = self.port_bytes, log2(self.port_bytes)
        requests = pattern_walker(m, "requests", config, cmd, shape, dense.data_start, dense.gap)
        responses = pattern_walker(m, "responses", config, cmd, shape, dense.data_start, dense.gap)
        m.d.comb += [requests.restart.eq(self.go), responses.restart.eq(self.go)]

        # Requests: one per slot; a slot lasts as many cycles as the step writes buffer words (at least one)
        # and starts when the step's request is taken.
        wait = Signal(range(self.words + 1))
        requesting, probing, probe_pending, receiving = Signal(), Signal(), Signal(), Signal()
        _, request_writes = _words_written(m, requests, port, self.words)
        with m.If(self.go | probing):
            m.d.comb += [self.request_valid.eq(1), self.request_addr.eq(shape.last_word)]
            m.d.sync += probing.eq(~self.request_taken)
        with m.Elif(requesting & (wait == 0)):
            m.d.comb += [self.request_valid.eq(1), self.request_addr.eq(requests.word_address),
                         requests.advance.eq(self.request_taken)]
            with m.If(self.request_taken):
                m.d.sync += wait.eq(Mux(request_writes == 0, 0, request_writes - 1))
                with m.If(requests.final):
                    m.d.sync += requesting.eq(0)
        with m.Elif(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        with m.If(self.go):
            m.d.sync += [requesting.eq(1), probe_pending.eq(1), receiving.eq(1), wait.eq(0)]

        # Responses: realign into buffer words; the partial last word of a step waits in `residual`.
        words = self.words
        residual, residual_mask = Signal(8 * port), Signal(port)
        window, window_mask = Signal(8 * port * words), Signal(port * words)
        emit_index, emit_left = Signal(range(words + 1)), Signal(range(words + 1))
        emit_addr = Signal(shape.width)
        offset = low_bits(responses.dense, shift)
        incoming = shift_down(m, "incoming", self.response_data, responses.first_byte, 8, config.dram.bytes_per_cycle)
        if self.codebook is not None:
            incoming = _expand(m, incoming, self.codebook, config.dram.bytes_per_cycle)
            incoming = _circulant(m, incoming, responses, self.codebook, config.dram.bytes_per_cycle)
        placed_mask = byte_mask(m, "placed_mask", offset, offset + responses.tile_count, port * words)
        placed = shift_up(m, "placed", incoming, offset, 8, port * words)
        merged = Signal.like(window)
        merged_mask = Signal.like(window_mask)
        m.d.comb += [merged.eq(residual | (placed & bytes_to_bits(placed_mask))),
                     merged_mask.eq(residual_mask | placed_mask)]
        full, written = _words_written(m, responses, port, words)
        m.d.comb += self.response_ready.eq(emit_left == 0)
        arrival = self.response_valid & receiving & ~probe_pending
        with m.If(self.response_valid & probe_pending):
            m.d.sync += probe_pending.eq(0)
        with m.If(arrival):
            m.d.comb += [responses.advance.eq(1), self.write.en.eq(written != 0),
                         self.write.addr.eq(responses.dense >> shift),
                         self.write.data.eq(merged[:8 * port]), self.write.mask.eq(merged_mask[:port])]
            m.d.sync += [window.eq(merged), window_mask.eq(merged_mask), emit_index.eq(1),
                         emit_left.eq(Mux(written == 0, 0, written - 1)),
                         emit_addr.eq((responses.dense >> shift) + 1),
                         residual.eq(Mux(responses.row_end, 0, select_word(m, "residual_next", merged, full, 8 * port))),
                         residual_mask.eq(Mux(responses.row_end, 0, select_word(m, "residual_mask_next", merged_mask, full, port)))]
            with m.If(responses.final):
                m.d.sync += receiving.eq(0)
        with m.Elif(emit_left != 0):
            m.d.comb += [self.write.en.eq(1), self.write.addr.eq(emit_addr),
                         self.write.data.eq(select_word(m, "emit_data", window, emit_index, 8 * port)),
                         self.write.mask.eq(select_word(m, "emit_mask", window_mask, emit_index, port))]
            m.d.sync += [emit_index.eq(emit_index + 1), emit_left.eq(emit_left - 1), emit_addr.eq(emit_addr + 1)]

        self._padding(m, draining=~self.go & ~requesting & ~receiving & (emit_left == 0))
        return m

    def _padding(self, m: Module, draining) -> None:
        """After the data: the padding gaps (before the first data row, between rows, after the last),
        one buffer word per cycle with its byte mask; ``done`` with the last word (or alone: no padding)."""
        cmd, dense = self.cmd, self.dense
        port, shift = self.port_bytes, log2(self.port_bytes)
        cursor, gap_end = Signal(self.shape.width), Signal(self.shape.width)
        inner_left = Signal.like(cmd.y_size)
        kind = Signal(range(4))          # the gap being written: 1 before the data, 2 between rows, 3 after
        pending = Signal()
        gaps = [(1, dense.first_len != 0, dense.sram_addr, dense.data_start),
                (2, (dense.gap != 0) & (cmd.y_size > 1), dense.data_start + dense.data_bytes,
                 dense.data_start + dense.data_bytes + dense.gap),
                (3, dense.last_len != 0, dense.end - dense.last_len, dense.end)]

        def enter_gap_after(current: int) -> None:
            """Move to the first non-empty gap of a kind after ``current`` (kind 0: none left)."""
            for index, (following, present, start, end) in enumerate(gaps[current:]):
                with (m.Elif if index else m.If)(present):
                    m.d.sync += [kind.eq(following), cursor.eq(start), gap_end.eq(end)]
                    if following == 2:
                        m.d.sync += inner_left.eq(cmd.y_size - 2)
            with (m.Else() if current < len(gaps) else m.If(1)):
                m.d.sync += kind.eq(0)

        with m.If(self.go):
            m.d.sync += pending.eq(1)
            enter_gap_after(0)
        later = C(0, 1)
        for following, present, _, _ in reversed(gaps):
            later = Mux(kind < following, present | later, later)
        word = cursor >> shift
        word_end = (word + 1) << shift
        last_word = gap_end <= word_end
        high = Signal(range(port + 1))
        m.d.comb += high.eq(Mux(last_word, gap_end - (word << shift), port))
        with m.If(draining & pending):
            with m.If(kind != 0):
                m.d.comb += [self.write.en.eq(1), self.write.addr.eq(word), self.write.data.eq(self._pad_word(word)),
                             self.write.mask.eq(byte_mask(m, "pad_mask", low_bits(cursor, shift), high, port))]
            with m.If(kind == 0):
                m.d.comb += self.done.eq(1)
                m.d.sync += pending.eq(0)
            with m.Elif(~last_word):
                m.d.sync += cursor.eq(word_end)
            with m.Elif((kind == 2) & (inner_left != 0)):
                m.d.sync += [inner_left.eq(inner_left - 1), cursor.eq(gap_end + dense.data_bytes),
                             gap_end.eq(gap_end + dense.data_bytes + dense.gap)]
            with m.Else():
                for current in (1, 2, 3):
                    with m.If(kind == current):
                        enter_gap_after(current)
                with m.If(~later):
                    m.d.comb += self.done.eq(1)
                    m.d.sync += pending.eq(0)

    def _pad_word(self, word):
        """Buffer word ``word`` filled with pad_value: byte i holds element byte (address - sram_addr) mod size."""
        cmd, port = self.cmd, self.port_bytes
        low, high = cmd.pad_value.as_unsigned()[:8], cmd.pad_value.as_unsigned()[8:16]
        wide = cmd.elem_type == DType.INT16
        phase = ((word << log2(port)) - cmd.sram_addr)[0]
        return Cat(*(Mux(wide & (phase ^ (i & 1)), high, low) for i in range(port)))


def _by_index_bits(cmd, values: dict[int, int]):
    """``values[b]`` for the command's index_bits b (PLAIN included), as a chain of multiplexers."""
    result = C(values[IndexBits.PLAIN])
    for bits in CODEBOOK_INDEX_BITS:
        result = Mux(cmd.index_bits == bits, values[bits], result)
    return result


def _expand(m: Module, incoming, codebook: SimpleNamespace, dram_bytes: int):
    """A DRAM word's bytes as they are (PLAIN), or each byte's ``8 // b`` indices of b bits (low bits first)
    replaced by their codebook entries: up to ``MAX_EXPANSION * dram_bytes`` tile bytes."""
    result = incoming
    for bits in CODEBOOK_INDEX_BITS:
        per_byte = 8 // bits
        entries = [codebook.entries.word_select(incoming[8 * (j // per_byte) + bits * (j % per_byte):][:bits], 8)
                   for j in range(per_byte * dram_bytes)]
        result = Mux(codebook.index_bits == bits, net(m, Cat(*entries), f"expanded_{bits}"), result)
    return net(m, result, "expanded")


def _circulant(m: Module, incoming, walker: PatternWalker, table: SimpleNamespace, dram_bytes: int):
    """A circulant LOAD's step (circ_log2 > 0): each group of L = 2**circ_log2 bytes rotated right by the walk
    of the row (byte t takes byte (t - repeat) mod L of its group; the step starts on a group), and byte i
    negated in 8 bits where sign bit ``run_offset + i`` is set; any other LOAD's bytes as they are."""
    signs = shift_down(m, "signs_here", table.entries, walker.run_offset, 1, dram_bytes)
    result = incoming
    for exponent in range(1, 1 << CIRC_LOG2_BITS):
        size = 1 << exponent
        if size > dram_bytes:             # refused by the check (circ_log2)
            continue
        placed = []
        for i in range(dram_bytes):
            group = incoming[8 * size * (i // size):][:8 * size]
            byte = net(m, group.word_select((i % size - walker.repeat)[:exponent], 8), f"rotated_{exponent}_{i}")
            placed.append(Mux(signs[i], (-byte)[:8], byte))
        rows = Cat(*placed, C(0, len(incoming) - 8 * dram_bytes)) if len(incoming) > 8 * dram_bytes else Cat(*placed)
        result = Mux(table.circ_log2 == exponent, net(m, rows, f"circulant_{exponent}"), result)
    return net(m, result, "circulant")


def _pad_value_fits(cmd):
    """pad_value lies in the range of elem_type."""
    return Cat(*((cmd.elem_type == dtype) & (cmd.pad_value >= int(np.iinfo(DTYPE_NUMPY[dtype]).min))
                 & (cmd.pad_value <= int(np.iinfo(DTYPE_NUMPY[dtype]).max)) for dtype in BYTE_TYPES)).any()


def _load_dense_signals(m: Module, cmd) -> SimpleNamespace:
    """The tile of a LOAD in its buffer, as ``aipu.sim.timing.dma.load_dense`` (byte addresses)."""
    width = 64
    dense = SimpleNamespace(**{name: Signal(width, name=f"tile_{name}") for name in (
        "sram_addr", "run", "row_bytes", "data_start", "gap", "data_bytes", "first_len", "last_len", "end")})
    columns = cmd.x_size + cmd.pad_left + cmd.pad_right
    m.d.comb += [
        dense.sram_addr.eq(cmd.sram_addr),
        dense.run.eq(Mux(cmd.elem_type == DType.INT16, cmd.run << 1, cmd.run)),
        dense.row_bytes.eq(columns * dense.run),
        dense.data_start.eq(cmd.sram_addr + cmd.pad_top * dense.row_bytes + cmd.pad_left * dense.run),
        dense.gap.eq((cmd.pad_left + cmd.pad_right) * dense.run),
        dense.data_bytes.eq(cmd.x_size * dense.run),
        dense.first_len.eq(dense.data_start - cmd.sram_addr),
        dense.last_len.eq(cmd.pad_right * dense.run + cmd.pad_bottom * dense.row_bytes),
        dense.end.eq(cmd.sram_addr + ((cmd.y_size << cmd.circ_log2) + cmd.pad_top + cmd.pad_bottom) * dense.row_bytes),
    ]
    return dense


class LoadUnit(UnitComponent):
    """LOAD: DRAM pattern -> padded dense tile at byte ``sram_addr`` of ``buffer`` (one datapath per buffer,
    each realigning DRAM words into that buffer's words)."""

    UNIT = Unit.LOAD

    def ports(self, config: HardwareConfig) -> dict:
        return {"dram_read": Out(dram_read_port(config)), "lut_read": Out(read_port(config, Buffer.LUT)),
                **{f"{buffer.name.lower()}_write": Out(write_port(config, buffer)) for buffer in LOADABLE_BUFFERS}}

    def elaborate_engine(self, m, word, start, done, fault, fault_field) -> None:
        config, cmd = self.config, self.view(word, Opcode.LOAD)
        dense = _load_dense_signals(m, cmd)
        expansion = {bits: 8 // bits for bits in CODEBOOK_INDEX_BITS}     # tile bytes a DRAM byte becomes
        shape = run_shape(m, config, cmd, dense.gap == 0,
                         _by_index_bits(cmd, {0: 0, **{bits: log2(k) for bits, k in expansion.items()}}), cmd.circ_log2)
        checking = Signal()
        m.d.sync += checking.eq(start)
        beyond_buffer = Cat(*((cmd.buffer == buffer) & (dense.end > config.buffer(buffer).bytes)
                              for buffer in LOADABLE_BUFFERS)).any()
        go, expanding, circulant, fetching = Signal(), Signal(), Signal(), Signal()
        m.d.comb += [expanding.eq(cmd.index_bits != IndexBits.PLAIN), circulant.eq(cmd.circ_log2 != 0)]
        codebook, fetched = self._codebook(m, cmd, checking, fetching)
        with m.If(fetched):
            m.d.comb += go.eq(1)
            m.d.sync += fetching.eq(0)
        run_mask = _by_index_bits(cmd, {0: 0, **{bits: k - 1 for bits, k in expansion.items()}})
        faults = [*self._circulant_faults(cmd, circulant, codebook),           # in the interpreter's order
                  (expanding & (cmd.buffer != Buffer.WEIGHT), "buffer"),
                  (expanding & (cmd.elem_type == DType.INT16), "elem_type"),
                  (expanding & ((cmd.run & run_mask) != 0), "run"),
                  (expanding & (codebook.end > config.buffer(Buffer.LUT).bytes), "codebook_addr"),
                  (shape.beyond, "dram_addr"), (~_pad_value_fits(cmd), "pad_value"), (beyond_buffer, "sram_addr")]
        with m.If(checking):
            for index, (condition, name) in enumerate(faults):
                with (m.Elif if index else m.If)(condition):
                    m.d.comb += [fault.eq(1), fault_field.eq(self.error_index(name))]
            with m.Elif(expanding | circulant):
                m.d.sync += fetching.eq(1)
            with m.Else():
                m.d.comb += go.eq(1)
        credit, taken, response, handed = self._responses(m)
        request_valid, request_addr, finished, ready = [], [], [], []
        for buffer in LOADABLE_BUFFERS:
            channel = _LoadChannel(config, buffer, cmd, shape, dense, codebook if buffer == Buffer.WEIGHT else None)
            m.submodules[f"to_{buffer.name.lower()}"] = channel
            port = getattr(self, f"{buffer.name.lower()}_write")
            address = channel.write.addr
            if buffer == Buffer.LUT:   # the codebook's reads and the LUT channel's writes: one port, one address
                address = Signal.like(port.addr, name="lut_address")
                m.d.comb += [address.eq(Mux(self.lut_read.en, codebook.address, channel.write.addr)),
                             self.lut_read.addr.eq(address)]
            m.d.comb += [channel.go.eq(go & (cmd.buffer == buffer)), channel.request_taken.eq(taken),
                         channel.response_data.eq(response.data), channel.response_valid.eq(handed),
                         port.addr.eq(address), port.en.eq(channel.write.en),
                         port.data.eq(channel.write.data), port.mask.eq(channel.write.mask)]
            request_valid.append(channel.request_valid)
            request_addr.append(Mux(channel.request_valid, channel.request_addr, 0))
            finished.append(channel.done)
            ready.append(channel.response_ready)
        m.d.comb += [self.dram_read.valid.eq(Cat(*request_valid).any() & credit),
                     self.dram_read.addr.eq(_or_all(request_addr)), done.eq(Cat(*finished).any()),
                     handed.eq(response.valid & Cat(*ready).all())]

    def _circulant_faults(self, cmd, circulant, table) -> list:
        """A circulant LOAD's refusals (docs/rtl-dma.md, "Block-circulant rows"), first of all, in order."""
        low = (C(1, 1) << cmd.circ_log2) - 1          # a multiple of L has these bits clear
        too_large = Cat(*((cmd.circ_log2 == exponent) for exponent in range(1, 1 << CIRC_LOG2_BITS)
                          if 1 << exponent > self.config.dram.bytes_per_cycle))
        return [(circulant & (cmd.index_bits != IndexBits.PLAIN), "index_bits"),
                (circulant & (cmd.buffer != Buffer.WEIGHT), "buffer"),
                (circulant & (cmd.elem_type == DType.INT16), "elem_type"),
                (circulant & too_large.any(), "circ_log2"),
                (circulant & (((cmd.run & low) != 0) | (cmd.run > CIRC_SIGNS_MAX)), "run"),
                *((circulant & ((getattr(cmd, name) & low) != 0), name)
                  for name in ("dram_addr", "dram_y_stride", "dram_x_stride")),
                *((circulant & (getattr(cmd, name) != 0), name)
                  for name in ("pad_top", "pad_bottom", "pad_left", "pad_right")),
                (circulant & (table.end > self.config.buffer(Buffer.LUT).bytes), "codebook_addr")]

    def _codebook(self, m: Module, cmd, checking, fetching) -> tuple[SimpleNamespace, Signal]:
        """A LOAD of indices reads its codebook, a circulant LOAD its sign bits (one per byte of the run), from
        LUT memory into registers, one word a cycle from the check cycle on (docs/rtl-dma.md, "Codebook").
        Returns the table (``entries``, ``index_bits``, ``circ_log2``, ``end``: its byte after the last,
        ``address``: the LUT word read) and a level that is 1 in the cycle the last word arrives, while
        ``fetching``."""
        port_bytes, read = word_bytes(self.config, Buffer.LUT), self.lut_read
        shift = log2(port_bytes)
        circulant = cmd.circ_log2 != 0
        base = Signal(CODEBOOK_ADDR_BITS + log2(CODEBOOK_SLOT_BYTES))
        size, words = Signal(range(TABLE_BYTES + 1)), Signal(range(TABLE_BYTES + 1))
        sign_bytes = Signal(range(TABLE_BYTES + 1))
        m.d.comb += [base.eq(cmd.codebook_addr * CODEBOOK_SLOT_BYTES),
                     sign_bytes.eq(Mux(cmd.run > CIRC_SIGNS_MAX, TABLE_BYTES, (cmd.run + 7) >> 3)),
                     size.eq(Mux(circulant, sign_bytes,
                                 _by_index_bits(cmd, {0: 0, **{bits: 1 << bits for bits in CODEBOOK_INDEX_BITS}}))),
                     words.eq(Mux(size == 0, 0, ((low_bits(base, shift) + size - 1) >> shift) + 1))]
        issued, arrived, arrived_word = Signal.like(words), Signal(), Signal.like(words)
        index = Mux(checking, 0, issued)
        with m.If((checking & ((cmd.index_bits != IndexBits.PLAIN) | circulant)) | (fetching & (issued != words))):
            m.d.comb += read.en.eq(1)
            m.d.sync += issued.eq(index + 1)
        m.d.sync += [arrived.eq(read.en), arrived_word.eq(index)]
        entries = Signal(8 * TABLE_BYTES)
        with m.If(arrived):
            for entry in range(TABLE_BYTES):   # the table starts on a multiple of CODEBOOK_SLOT_BYTES
                if port_bytes <= CODEBOOK_SLOT_BYTES:
                    word, byte = entry >> shift, entry % port_bytes
                else:
                    place = net(m, low_bits(base, shift) + entry, f"table_place_{entry}")
                    word, byte = place >> shift, place[:shift]
                with m.If(arrived_word == word):
                    m.d.sync += entries.word_select(entry, 8).eq(read.data.word_select(byte, 8))
        fetched = Signal()
        m.d.comb += fetched.eq(fetching & (issued == words))
        return SimpleNamespace(entries=entries, index_bits=cmd.index_bits, circ_log2=cmd.circ_log2, end=base + size,
                               address=(base >> shift) + index), fetched

    def _responses(self, m: Module) -> tuple:
        """The response queue (docs/rtl-dma.md, "Refusals and late responses"): a response goes straight to the channels
        when the queue is empty and they are ready, else into the queue (``dram.latency_cycles + 1`` words, its
        bound: at most that many requests are ever taken and not yet handed over). Returns (a request may be
        offered, the offered request is taken, the head response (data, valid), the head is handed over)."""
        config, port = self.config, self.dram_read
        depth = config.dram.latency_cycles + 1
        m.submodules.response_queue = queue = SyncFIFOBuffered(width=len(port.data), depth=depth)
        open_requests = Signal(range(depth + 1))
        credit, taken, handed = Signal(), Signal(), Signal()
        response = SimpleNamespace(data=Signal.like(port.data), valid=Signal())
        bypass = queue.level == 0
        m.d.comb += [credit.eq(open_requests < depth), taken.eq(port.valid & port.ready),
                     response.valid.eq(Mux(bypass, port.data_valid, queue.r_rdy)),
                     response.data.eq(Mux(bypass, port.data, queue.r_data)),
                     queue.r_en.eq(handed), queue.w_data.eq(port.data),
                     queue.w_en.eq(port.data_valid & ~(bypass & handed))]
        m.d.sync += open_requests.eq(open_requests + taken - handed)
        return credit, taken, response, handed


def _or_all(values):
    result = values[0]
    for value in values[1:]:
        result = result | value
    return result


class StoreUnit(UnitComponent):
    """STORE: dense tile at byte ``sram_addr`` of OUT -> DRAM pattern, after checking in hardware that the
    pattern writes no byte twice."""

    UNIT = Unit.STORE

    def __init__(self, config: HardwareConfig, *, await_write_responses: bool = False):
        """``await_write_responses``: retire only once ``writes_answered`` says every write has its response
        (behind an AXI bridge, so that a later LOAD reads what STORE wrote); without it STORE retires when
        its last word is taken, as on the test harness's DRAM, which writes at once."""
        self.await_write_responses = await_write_responses
        super().__init__(config)

    def ports(self, config: HardwareConfig) -> dict:
        ports = {"out_read": Out(read_port(config, Buffer.OUT)), "dram_write": Out(dram_write_port(config))}
        if self.await_write_responses:
            ports["writes_answered"] = In(1)      # every write taken before this cycle has had its response
        return ports

    def elaborate_engine(self, m, word, start, done, fault, fault_field) -> None:
        config, cmd = self.config, self.view(word, Opcode.STORE)
        shape = run_shape(m, config, cmd, C(1, 1), C(0, 2), C(0, CIRC_LOG2_BITS))
        checking, probe, probing, scanning, streaming = Signal(), Signal(), Signal(), Signal(), Signal()
        m.d.sync += checking.eq(start)
        walker = pattern_walker(m, "walker", config, cmd, shape, cmd.sram_addr.as_unsigned() + C(0, 64), C(0, 1))
        m.d.comb += walker.restart.eq(checking)
        with m.If(checking):
            with m.If(cmd.sram_addr + cmd.y_size * shape.row_data > config.buffer(Buffer.OUT).bytes):
                m.d.comb += [fault.eq(1), fault_field.eq(self.error_index("sram_addr"))]
            with m.Elif(shape.beyond):
                m.d.comb += [fault.eq(1), fault_field.eq(self.error_index("dram_addr"))]
            with m.Else():
                m.d.comb += probe.eq(1)
        with m.If(probe | probing):   # the probe: a write of no byte to the pattern's last word, held until taken
            m.d.comb += [self.dram_write.valid.eq(1), self.dram_write.addr.eq(shape.last_word)]
            m.d.sync += [probing.eq(~self.dram_write.ready), scanning.eq(self.dram_write.ready)]
        self._overlap_scan(m, cmd, shape, checking, scanning, streaming, fault, fault_field)
        self._stream(m, cmd, walker, checking, streaming, done)

    def _overlap_scan(self, m, cmd, shape, checking, scanning, streaming, fault, fault_field) -> None:
        """One cycle per row distance dy = 1, 2, ...: is some run of row y + dy closer than a run's length
        to a run of row y? Row y + dy sits dy * y_stride = q * x_stride + r after row y; only the runs
        -q and -q-1 columns away can come that close. Stops once dy * y_stride passes a row's extent."""
        run, columns, rows = shape.run, cmd.x_size, cmd.y_size
        x_step = Signal(STRIDE_BYTES_BITS + 18)
        m.d.comb += x_step.eq(Mux(columns > 1, cmd.dram_x_stride, run))   # one column: any step >= run
        step_q, step_r = Signal.like(cmd.dram_y_stride), Signal.like(x_step)
        m.d.comb += [step_q.eq(cmd.dram_y_stride // x_step), step_r.eq(cmd.dram_y_stride % x_step)]
        extent = Signal(shape.width)
        m.d.comb += extent.eq((columns - 1) * cmd.dram_x_stride + run)
        distance, offset = Signal.like(rows), Signal(shape.width)
        quotient, remainder = Signal(shape.width), Signal.like(x_step)
        with m.If(checking):
            m.d.sync += [distance.eq(1), offset.eq(cmd.dram_y_stride), quotient.eq(step_q), remainder.eq(step_r)]
        overlap = (((quotient <= columns - 1) & (remainder < run))
                   | ((quotient + 1 <= columns - 1) & (x_step - remainder < run)))
        next_remainder = remainder + step_r
        wrap = next_remainder >= x_step
        with m.If(scanning):
            with m.If((columns > 1) & (cmd.dram_x_stride < run)):
                m.d.comb += [fault.eq(1), fault_field.eq(self.error_index("dram_y_stride"))]
            with m.Elif((rows == 1) | (offset >= extent)):
                m.d.sync += [scanning.eq(0), streaming.eq(1)]
            with m.Elif(overlap):
                m.d.comb += [fault.eq(1), fault_field.eq(self.error_index("dram_y_stride"))]
            with m.Elif(distance == rows - 1):
                m.d.sync += [scanning.eq(0), streaming.eq(1)]
            with m.Else():
                m.d.sync += [distance.eq(distance + 1), offset.eq(offset + cmd.dram_y_stride),
                             remainder.eq(Mux(wrap, next_remainder - x_step, next_remainder)),
                             quotient.eq(quotient + step_q + wrap)]

    def _stream(self, m, cmd, walker, checking, streaming, done) -> None:
        """Per DRAM word: read the OUT words it still needs (one per cycle, its slot), then compose it
        from the window of OUT words one cycle later, when the last of them has arrived. A composed word
        the DRAM port refuses is offered again; the walk waits (``stalled``), the arriving OUT word joins
        the window."""
        config = self.config
        port, shift = word_bytes(config, Buffer.OUT), log2(word_bytes(config, Buffer.OUT))
        dram_bytes = config.dram.bytes_per_cycle
        words = window_words(config, port)
        next_read = Signal(len(walker.dense))
        slot_cycle = Signal(range(words + 1))
        need_last = (walker.dense + walker.byte_count - 1) >> shift
        reads = Signal(range(words + 2))
        m.d.comb += reads.eq(need_last + 1 - next_read)
        last_cycle = slot_cycle + 1 >= reads
        read_valid, compose = Signal(), Signal()
        held = SimpleNamespace(dense=Signal.like(walker.dense), count=Signal.like(walker.byte_count),
                               first=Signal.like(walker.first_byte), address=Signal.like(walker.word_address),
                               final=Signal())
        stalled = Signal()
        m.d.comb += stalled.eq(compose & ~self.dram_write.ready)
        m.d.sync += [read_valid.eq(self.out_read.en), compose.eq(stalled)]
        with m.If(checking):
            m.d.sync += [next_read.eq(cmd.sram_addr >> shift), slot_cycle.eq(0)]
        with m.If(streaming & ~stalled):
            m.d.comb += [self.out_read.en.eq(slot_cycle < reads), self.out_read.addr.eq(next_read + slot_cycle)]
            with m.If(last_cycle):
                m.d.comb += walker.advance.eq(1)
                m.d.sync += [compose.eq(1), held.dense.eq(walker.dense), held.count.eq(walker.byte_count),
                             held.first.eq(walker.first_byte), held.address.eq(walker.word_address),
                             held.final.eq(walker.final), next_read.eq(need_last + 1), slot_cycle.eq(0)]
                with m.If(walker.final):
                    m.d.sync += streaming.eq(0)
            with m.Else():
                m.d.sync += slot_cycle.eq(slot_cycle + 1)

        window, fill = Signal(8 * port * words), Signal(range(words + 1))
        merged = Signal.like(window)
        m.d.comb += merged.eq(window | Mux(read_valid, shift_up(m, "arriving", self.out_read.data, fill, 8 * port, words), 0))
        filled = fill + read_valid
        consumed = ((held.dense + held.count) >> shift) - (held.dense >> shift)
        source = shift_down(m, "source", merged, low_bits(held.dense, shift), 8, dram_bytes)
        with m.If(compose):
            m.d.comb += [self.dram_write.valid.eq(1), self.dram_write.addr.eq(held.address),
                         self.dram_write.data.eq(shift_up(m, "composed", source, held.first, 8, dram_bytes)),
                         self.dram_write.mask.eq(byte_mask(m, "composed_mask", held.first, held.first + held.count, dram_bytes))]
        self._retire(m, compose & held.final & self.dram_write.ready, done)
        with m.If(checking):
            m.d.sync += [window.eq(0), fill.eq(0)]
        with m.Elif(compose & self.dram_write.ready):
            m.d.sync += [window.eq(shift_down(m, "window_next", merged, consumed, 8 * port, words)), fill.eq(filled - consumed)]
        with m.Else():
            m.d.sync += [window.eq(merged), fill.eq(filled)]

    def _retire(self, m, last_taken, done) -> None:
        """``done`` when the last word is taken, or (awaiting responses) once every write has been answered."""
        if not self.await_write_responses:
            m.d.comb += done.eq(last_taken)
            return
        draining = Signal()
        with m.If(last_taken):
            m.d.sync += draining.eq(1)
        with m.If(draining & self.writes_answered):
            m.d.comb += done.eq(1)
            m.d.sync += draining.eq(0)
