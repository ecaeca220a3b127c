"""CONV: the MAC array executing CONV commands exactly as ``sim/interpreter/`` and ``sim/golden/conv.py`` do.

Weight-stationary schedule (docs/rtl-conv.md): the command is cut into blocks (groups, out-channel chunk of
``cols``, kernel tap, in-channel chunk of ``rows``), visited in that order with the in-channel chunk
innermost. A block's ``rows x cols`` weight operands sit in one of two register banks while every output
pixel streams through the array (``beats`` cycles per pixel: two ACT and two ACC words per cycle, so any
byte alignment works); the loader fills the other bank with the next block meanwhile. Each pixel is a
read-add-write of its ``cols`` accumulators; the first block of an out-channel chunk overwrites them when
``accumulate`` is 0. A block lasts at least ``2 * beats + 1`` cycles, so a pixel's accumulators are written
back before the next block of the same chunk reads them, however few pixels the tile has. Groups that fit
share a block on the array's diagonal (``MacArrayConfig.groups_per_block`` in the machine specification, which
the compiler's tiling also reads): a depthwise layer runs ``min(rows, cols)`` channels at once. The cycles
this schedule takes are ``aipu.sim.timing.conv`` (``ConvTiming``, ``command_cycles``).
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib.wiring import Out

from aipu.rtl.lanes import select_word, shift_down, shift_up
from aipu.rtl.ports import read_port, word_bytes, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import ACC_BITS, DTYPE_NUMPY, MAC_OPERAND_BITS, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.timing.conv import ENTRY_BYTES, ConvTiming


class _Window:
    """Gathers ``2 * beats`` consecutive port words read two per cycle, for a run at any byte offset.

    The words of beats before the last are held in registers; in the last beat's data cycle ``words`` is the
    whole window, with the live port data on top."""

    def __init__(self, m: Module, name: str, beats: int, port_a, port_b, valid, beat):
        width = len(port_a.data)
        self.m, self.name = m, name
        self.held = [Signal(width, name=f"{name}_held{i}") for i in range(2 * beats - 2)]
        for i in range(beats - 1):
            with m.If(valid & (beat == i)):
                m.d.sync += [self.held[2 * i].eq(port_a.data), self.held[2 * i + 1].eq(port_b.data)]
        self.words = Cat(*self.held, port_a.data, port_b.data)

    def run(self, byte_offset, nbytes: int):
        """``nbytes`` bytes starting at ``byte_offset`` in the window."""
        return shift_down(self.m, f"{self.name}_run", self.words, byte_offset, 8, nbytes)


class ConvUnit(UnitComponent):
    """The MAC array: ``mac.rows x mac.cols`` multipliers of signed 9-bit operands into int32 accumulators.

    Ports: two ACT, two WEIGHT and two ACC read ports and two ACC write ports (``_b``: the next word), so a
    run at any alignment moves in ``ConvTiming`` beats.
    """

    UNIT = Unit.CONV

    def ports(self, config: HardwareConfig) -> dict:
        members = {}
        for buffer in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC):
            for suffix in ("", "_b"):
                members[f"{buffer.name.lower()}_read{suffix}"] = Out(read_port(config, buffer))
        for suffix in ("", "_b"):
            members[f"acc_write{suffix}"] = Out(write_port(config, Buffer.ACC))
        return members

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        config, timing = self.config, ConvTiming.of(self.config)
        rows, cols, beats, weight_beats = config.mac.rows, config.mac.cols, timing.beats, timing.weight_beats
        cmd = self.view(word, Opcode.CONV)
        act_port, weight_port, acc_port = (word_bytes(config, b) for b in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC))
        act_bytes, weight_bytes = config.buffer(Buffer.ACT).bytes, config.buffer(Buffer.WEIGHT).bytes
        acc_entries = config.buffer_units(Buffer.ACC)

        def register(name, value_range):
            return Signal(range(value_range), name=name)

        # --- tile geometry (SETUP_A) and checks (SETUP_B) --------------------------------------------------
        dim = 1 << len(cmd.in_c)
        group_in, group_out = register("group_in", dim), register("group_out", dim)
        out_h, out_w = register("out_h", dim), register("out_w", dim)
        groups_divide, fits_h, fits_w = Signal(), Signal(), Signal()
        span_h = cmd.dilation_h * (cmd.k_h - 1) + 1
        span_w = cmd.dilation_w * (cmd.k_w - 1) + 1

        taps_x_group_in = register("weights_per_out_channel", dim * (1 << 2 * len(cmd.k_h)))
        pixels = register("pixels", dim * dim)
        pixel_cycles = register("pixel_cycles", dim * dim * beats + 1)
        block_len = register("block_cycles", dim * dim * beats + 2 * beats + cols * weight_beats + 2)
        step_x, step_y = register("step_x", 1 << 32), register("step_y", 1 << 40)
        tap_x, tap_y = register("tap_x", 1 << 32), register("tap_y", 1 << 40)
        in_chunks_last, out_chunks_last = register("in_chunks_last", dim), register("out_chunks_last", dim)
        diagonal = min(rows, cols)
        block_groups = register("groups_per_block", diagonal + 1)         # groups_per_block() of the command
        block_group_cols = register("block_group_cols", dim * diagonal)  # ... times group_out

        zp = cmd.in_zero_point
        int8, uint8 = (np.iinfo(DTYPE_NUMPY[dtype]) for dtype in (DType.INT8, DType.UINT8))
        zero_point_fits = Mux(cmd.in_type == DType.INT8, (zp >= int(int8.min)) & (zp <= int(int8.max)),
                              (zp >= int(uint8.min)) & (zp <= int(uint8.max)))
        weights_per_out = cmd.k_h * cmd.k_w * group_in
        checks = [  # the interpreter's order: groups, the input, the weights, the output size, the zero point, ACC
            ("groups", groups_divide),
            ("in_addr", cmd.in_addr + cmd.in_h * cmd.in_w * cmd.in_c <= act_bytes),
            ("wgt_addr", cmd.wgt_addr + cmd.out_c * weights_per_out <= weight_bytes),
            ("k_h", fits_h),
            ("k_w", fits_w),
            ("in_zero_point", zero_point_fits),
            ("acc_addr", cmd.acc_addr + out_h * out_w * cmd.out_c <= acc_entries),
        ]

        # --- block counters: the block the loader fills (the next one once the first is loaded) ------------
        block_group, block_out = register("block_group", dim), register("block_out_chunk", dim)
        block_ky, block_kx = register("block_ky", 1 << len(cmd.k_h)), register("block_kx", 1 << len(cmd.k_w))
        block_in = register("block_in_chunk", dim)
        last_in, last_kx = block_in == in_chunks_last, block_kx == cmd.k_w - 1
        last_ky, last_out = block_ky == cmd.k_h - 1, block_out == out_chunks_last
        last_group = block_group + block_groups >= cmd.groups
        block_is_last = last_in & last_kx & last_ky & last_out & last_group
        out_channel = block_group * group_out + block_out * cols
        in_channel = block_group * group_in + block_in * rows
        block_act = cmd.in_addr + block_ky * tap_y + block_kx * tap_x + in_channel
        block_acc = cmd.acc_addr + out_channel
        block_weights = (cmd.wgt_addr + out_channel * taps_x_group_in
                         + (block_ky * cmd.k_w + block_kx) * group_in + block_in * rows)
        groups_left_cols = cmd.out_c - block_group * group_out
        in_left = group_in - block_in * rows
        out_left = Mux(groups_left_cols < block_group_cols, groups_left_cols, block_group_cols) - block_out * cols
        block_rows = Mux(in_left < rows, in_left, rows)
        block_cols = Mux(out_left < cols, out_left, cols)
        block_overwrites = ~cmd.accumulate & (block_ky == 0) & (block_kx == 0) & (block_in == 0)

        def advance_block():
            nested = [(block_in, last_in, 1), (block_kx, last_kx, 1), (block_ky, last_ky, 1),
                      (block_out, last_out, 1), (block_group, last_group, block_groups)]
            carry = 1
            for counter, at_last, step in nested:
                with m.If(carry):
                    m.d.sync += counter.eq(Mux(at_last, 0, counter + step))
                carry = carry & at_last

        # --- phases: -1 loads block 0; phase b streams block b's pixels and loads block b + 1 --------------
        phase_cycle = register("phase_cycle", dim * dim * beats + 2 * beats + cols * weight_beats + 2)
        loading_phase, last_phase = Signal(), Signal()
        bank = Signal()                     # the bank the streaming block's weights are in
        phase_len = Mux(loading_phase, cols * weight_beats, Mux(last_phase, pixel_cycles + beats + 1, block_len))
        phase_ends = phase_cycle == phase_len - 1

        act_addr_range, acc_addr_range = 2 * act_bytes, 2 * acc_entries
        act_row, act_pixel = register("act_row", act_addr_range), register("act_pixel", act_addr_range)
        acc_pixel = register("acc_pixel", acc_addr_range)
        out_x = register("out_x", dim)
        beat = register("beat", beats)
        stream_cols, stream_overwrites = register("stream_cols", cols + 1), Signal()

        load_col, load_beat = register("load_col", cols), register("load_beat", weight_beats)
        load_offset = register("load_offset", 2 * weight_bytes)
        # the column's group within the block: its weights sit in rows [load_row_lo, load_row_lo + group_in)
        load_group_col, load_row_lo = register("load_group_col", dim), register("load_row_lo", dim * cols)

        def fitting(value):
            """``value(k)`` for k = groups_per_block(): the most groups whose channels fit rows and columns."""
            chosen = value(1)
            for k in range(2, diagonal + 1):
                chosen = Mux((k * group_in <= rows) & (k * group_out <= cols), value(k), chosen)
            return chosen

        with m.FSM(name="conv_engine") as engine:
            with m.State("IDLE"):
                with m.If(start):
                    m.next = "SETUP_A"
            with m.State("SETUP_A"):
                m.d.sync += [group_in.eq(cmd.in_c // cmd.groups), group_out.eq(cmd.out_c // cmd.groups),
                             groups_divide.eq((cmd.in_c % cmd.groups == 0) & (cmd.out_c % cmd.groups == 0)),
                             fits_h.eq(cmd.in_h >= span_h), fits_w.eq(cmd.in_w >= span_w),
                             out_h.eq((cmd.in_h - span_h) // cmd.stride_h + 1),
                             out_w.eq((cmd.in_w - span_w) // cmd.stride_w + 1)]
                m.next = "SETUP_B"
            with m.State("SETUP_B"):
                refused = Const(0)
                for name, legal in checks:
                    with m.If(~refused & ~legal):
                        m.d.comb += [fault.eq(1), fault_field.eq(self.error_index(name))]
                    refused = refused | ~legal
                row_bytes = cmd.in_w * cmd.in_c
                pixel_count = out_h * out_w
                m.d.sync += [
                    taps_x_group_in.eq(weights_per_out), pixels.eq(pixel_count),
                    pixel_cycles.eq(pixel_count * beats),
                    block_len.eq(Mux(pixel_count * beats > max(cols * weight_beats, 2 * beats + 1),
                                     pixel_count * beats, max(cols * weight_beats, 2 * beats + 1))),
                    step_x.eq(cmd.stride_w * cmd.in_c), step_y.eq(cmd.stride_h * row_bytes),
                    tap_x.eq(cmd.dilation_w * cmd.in_c), tap_y.eq(cmd.dilation_h * row_bytes),
                    in_chunks_last.eq((group_in - 1) // rows), out_chunks_last.eq((group_out - 1) // cols),
                    block_groups.eq(fitting(lambda k: k)), block_group_cols.eq(fitting(lambda k: k * group_out)),
                    block_group.eq(0), block_out.eq(0), block_ky.eq(0), block_kx.eq(0), block_in.eq(0),
                    phase_cycle.eq(0), loading_phase.eq(1), last_phase.eq(0), bank.eq(0),
                    load_col.eq(0), load_beat.eq(0), load_offset.eq(0), load_group_col.eq(0), load_row_lo.eq(0)]
                m.next = "RUN"
                with m.If(refused):
                    m.next = "IDLE"
            with m.State("RUN"):
                m.d.sync += phase_cycle.eq(phase_cycle + 1)
                with m.If(phase_ends):
                    with m.If(last_phase):
                        m.d.comb += done.eq(1)
                        m.next = "IDLE"
        running = engine.ongoing("RUN")

        # --- loader: the next block's weight columns into the bank not streaming ---------------------------
        loading = running & ~last_phase & (phase_cycle < cols * weight_beats)
        load_byte = block_weights + load_offset - load_row_lo      # byte r of the run is row r's weight
        load_word = load_byte >> (weight_port.bit_length() - 1)
        ports_w = (self.weight_read, self.weight_read_b)
        m.d.comb += [ports_w[0].addr.eq(load_word + 2 * load_beat), ports_w[1].addr.eq(load_word + 2 * load_beat + 1),
                     ports_w[0].en.eq(loading), ports_w[1].en.eq(loading)]
        with m.If(loading):
            with m.If(load_beat == weight_beats - 1):
                m.d.sync += [load_beat.eq(0), load_col.eq(load_col + 1), load_offset.eq(load_offset + taps_x_group_in)]
                with m.If(load_group_col == group_out - 1):
                    m.d.sync += [load_group_col.eq(0), load_row_lo.eq(load_row_lo + group_in)]
                with m.Else():
                    m.d.sync += load_group_col.eq(load_group_col + 1)
            with m.Else():
                m.d.sync += load_beat.eq(load_beat + 1)
        # the read's data cycle
        got_weights, got_beat = Signal(), register("weights_beat", weight_beats)
        got_col, got_bank = register("weights_col", cols), Signal()
        got_offset = register("weights_offset", weight_port)
        got_row_lo, got_row_hi = register("weights_row_lo", dim * cols), register("weights_row_hi", dim * cols + rows)
        m.d.sync += [got_weights.eq(loading), got_beat.eq(load_beat), got_col.eq(load_col), got_bank.eq(~bank),
                     got_offset.eq(load_byte[:len(got_offset)]), got_row_lo.eq(load_row_lo),
                     got_row_hi.eq(load_row_lo + block_rows)]
        weight_window = _Window(m, "weight_window", weight_beats, *ports_w, got_weights, got_beat)
        column = weight_window.run(got_offset, rows)
        w_zp = cmd.w_zero_point
        operands = [Mux((r >= got_row_lo) & (r < got_row_hi), column[8 * r:8 * r + 8].as_signed() - w_zp, 0)
                    for r in range(rows)]
        weights = [[[Signal(signed(MAC_OPERAND_BITS), name=f"weight_b{b}_c{j}_r{r}") for r in range(rows)]
                    for j in range(cols)] for b in range(2)]
        with m.If(got_weights & (got_beat == weight_beats - 1)):
            for b in range(2):
                for j in range(cols):
                    with m.If((got_bank == b) & (got_col == j)):
                        m.d.sync += [weights[b][j][r].eq(operands[r]) for r in range(rows)]

        # --- issue: one pixel every ``beats`` cycles, two ACT and two ACC words per cycle -----------------
        issuing = running & ~loading_phase & (phase_cycle < pixel_cycles)
        act_word = act_pixel >> (act_port.bit_length() - 1)
        acc_byte = acc_pixel * ENTRY_BYTES
        acc_word = acc_byte >> (acc_port.bit_length() - 1)
        ports_act, ports_acc = (self.act_read, self.act_read_b), (self.acc_read, self.acc_read_b)
        for half in range(2):
            m.d.comb += [ports_act[half].addr.eq(act_word + 2 * beat + half), ports_act[half].en.eq(issuing),
                         ports_acc[half].addr.eq(acc_word + 2 * beat + half), ports_acc[half].en.eq(issuing)]
        with m.If(issuing):
            with m.If(beat == beats - 1):
                m.d.sync += [beat.eq(0), acc_pixel.eq(acc_pixel + cmd.out_c)]
                with m.If(out_x == out_w - 1):
                    m.d.sync += [out_x.eq(0), act_row.eq(act_row + step_y), act_pixel.eq(act_row + step_y)]
                with m.Else():
                    m.d.sync += [out_x.eq(out_x + 1), act_pixel.eq(act_pixel + step_x)]
            with m.Else():
                m.d.sync += beat.eq(beat + 1)

        # --- multiply: the pixel's data cycle (its last beat); registers the new accumulators --------------
        pixel_valid, pixel_beat = Signal(), register("pixel_beat", beats)
        pixel_act_offset = register("pixel_act_offset", act_port)
        pixel_acc_offset, pixel_acc_word = register("pixel_acc_offset", acc_port), Signal.like(acc_word)
        pixel_bank, pixel_cols, pixel_overwrites = Signal(), Signal.like(stream_cols), Signal()
        m.d.sync += [pixel_valid.eq(issuing), pixel_beat.eq(beat), pixel_act_offset.eq(act_pixel[:len(pixel_act_offset)]),
                     pixel_acc_offset.eq(acc_byte[:len(pixel_acc_offset)]), pixel_acc_word.eq(acc_word),
                     pixel_bank.eq(bank), pixel_cols.eq(stream_cols), pixel_overwrites.eq(stream_overwrites)]
        act_window = _Window(m, "act_window", beats, *ports_act, pixel_valid, pixel_beat)
        acc_window = _Window(m, "acc_window", beats, *ports_acc, pixel_valid, pixel_beat)
        act_run = act_window.run(pixel_act_offset, rows)
        old = acc_window.run(pixel_acc_offset, cols * ENTRY_BYTES)
        x_operands = [Mux(cmd.in_type == DType.INT8, act_run[8 * r:8 * r + 8].as_signed(), act_run[8 * r:8 * r + 8])
                      - cmd.in_zero_point for r in range(rows)]
        sums = []
        for j in range(cols):
            dot = sum(x_operands[r] * Mux(pixel_bank, weights[1][j][r], weights[0][j][r]) for r in range(rows))
            previous = Mux(pixel_overwrites, 0, old[ACC_BITS * j:ACC_BITS * (j + 1)])
            sums.append((previous + dot)[:ACC_BITS])
        entry_mask = Cat(*((j < pixel_cols).replicate(ENTRY_BYTES) for j in range(cols)))

        # --- write-back: ``beats`` cycles of two ACC words with byte masks --------------------------------
        window_bytes = 2 * beats * acc_port
        write_data, write_mask = Signal(8 * window_bytes), Signal(window_bytes)
        writing, write_beat, write_word = Signal(), register("write_beat", beats), Signal.like(acc_word)
        with m.If(pixel_valid & (pixel_beat == beats - 1)):
            m.d.sync += [writing.eq(1), write_beat.eq(0), write_word.eq(pixel_acc_word),
                         write_data.eq(shift_up(m, "write_data_placed", Cat(*sums), pixel_acc_offset, 8, window_bytes)),
                         write_mask.eq(shift_up(m, "write_mask_placed", entry_mask, pixel_acc_offset, 1, window_bytes))]
        with m.Elif(writing):
            m.d.sync += write_beat.eq(write_beat + 1)
            with m.If(write_beat == beats - 1):
                m.d.sync += writing.eq(0)
        for half, port in enumerate((self.acc_write, self.acc_write_b)):
            m.d.comb += [port.addr.eq(write_word + 2 * write_beat + half), port.en.eq(writing),
                         port.data.eq(select_word(m, f"write_data{half}", write_data, 2 * write_beat + half, 8 * acc_port)),
                         port.mask.eq(select_word(m, f"write_mask{half}", write_mask, 2 * write_beat + half, acc_port))]

        # --- phase boundary (last, so it wins over the stages' own updates): the loaded block streams next -
        with m.If(running & phase_ends):
            m.d.sync += [phase_cycle.eq(0), loading_phase.eq(0), last_phase.eq(block_is_last), bank.eq(~bank),
                         act_row.eq(block_act), act_pixel.eq(block_act), acc_pixel.eq(block_acc), out_x.eq(0),
                         beat.eq(0), stream_cols.eq(block_cols), stream_overwrites.eq(block_overwrites),
                         load_col.eq(0), load_beat.eq(0), load_offset.eq(0), load_group_col.eq(0), load_row_lo.eq(0)]
            advance_block()
