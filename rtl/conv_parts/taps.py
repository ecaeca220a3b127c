"""DWCONV's tap walk: the blocks of positions and their kernel taps in order, each tap's input run from WEIGHT
and its kernel from ACT, gathered for the array."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import (block_drain, depthwise_command, depthwise_geometry, dim, slots,
                                            tap_operands)
from aipu.rtl.conv_parts.window import WordWindow, reads_needed
from aipu.rtl.lanes import counter
from aipu.rtl.ports import read_port, word_bytes
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.timing.conv import DepthwiseTiming


class TapWalk(wiring.Component):
    """From ``begin`` (the checking cycle of a DWCONV that runs): block b of ``cols`` positions starts every
    ``period`` cycles, and its k_h·k_w taps issue one after another, ``tap_beats`` cycles each, reading two
    WEIGHT words (the run of the block's positions at the tap's plane and offset) and two ACT words (the
    tap's ``channels`` kernel bytes) a cycle.

    Per position j of the block it keeps the column ``(f0 + j) mod plane_w`` (registers that move by
    ``cols_mod_w`` a block: no divider), so which positions are outputs, and the count of outputs before
    the block. A cycle after each read the words arrive in two ``WordWindow``s; in the data cycle of a tap's
    last beat ``tap`` holds its run and kernel with the block's output pattern, and for the block's last tap
    ``drain`` starts the block's drain.

    Signature: ``command`` (In: the DWCONV command), ``geometry`` (In: the depthwise setup's), ``begin`` (In),
    ``weight_read``, ``weight_read_b``, ``act_read``, ``act_read_b`` (words ``w`` and ``w + 1``), ``tap``
    (Out: to the slot operands and the accumulators), ``drain`` (Out: to the drain).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({
            "command": In(depthwise_command(config)), "geometry": In(depthwise_geometry(config)), "begin": In(1),
            **{f"{name}_read{suffix}": Out(read_port(config, Buffer[name.upper()]))
               for name in ("weight", "act") for suffix in ("", "_b")},
            "tap": Out(tap_operands(config)), "drain": Out(block_drain(config))})
        cols, n, geo = config.mac.cols, dim(config), self.geometry
        # the walk's registers
        self.running, self.tapping, self.bank = Signal(), Signal(), Signal()
        self.step = Signal.like(geo.period)
        self.ky, self.kx = Signal.like(self.command.k_h, name="tap_ky"), Signal.like(self.command.k_w, name="tap_kx")
        self.beat = counter(DepthwiseTiming.of(config, config.mac.rows, cols).tap_beats)
        self.first = Signal(range(n * n), name="block_first_position")
        self.first_bytes = Signal(range(2 * config.buffer(Buffer.WEIGHT).bytes), name="block_first_byte")
        self.outputs_before = Signal(range(n * n))
        self.kernel_byte = Signal(range(2 * config.buffer(Buffer.ACT).bytes))
        self.columns = [Signal(range(n), name=f"position{j}_column") for j in range(cols)]
        self.kept = [column < geo.out_w for column in self.columns]
        self.last_block = self.first + cols >= geo.positions

    def elaborate(self, platform) -> Module:
        m = Module()
        self.walk(m)
        self.read(m)
        return m

    def walk(self, m: Module):
        """The counters: beats within a tap, taps within a block, blocks every ``period`` cycles."""
        cmd, geo, cols = self.command, self.geometry, self.config.mac.cols
        ky, kx, beat = self.ky, self.kx, self.beat
        last_beat, last_kx, last_ky = beat == geo.tap_beats - 1, kx == cmd.k_w - 1, ky == cmd.k_h - 1
        restart_taps = [ky.eq(0), kx.eq(0), beat.eq(0), self.kernel_byte.eq(cmd.wgt_addr), self.tapping.eq(1)]
        with m.If(self.begin):
            m.d.sync += [*restart_taps, self.running.eq(1), self.step.eq(0), self.bank.eq(0), self.first.eq(0),
                         self.first_bytes.eq(0), self.outputs_before.eq(0)]
            # position j's column j mod plane_w (no divider for position 0: Yosys cannot map one of constant 0)
            m.d.sync += [column.eq(j % geo.plane_w if j else 0) for j, column in enumerate(self.columns)]
        with m.Elif(self.running):
            with m.If(self.tapping):
                m.d.sync += beat.eq(beat + 1)
                with m.If(last_beat):
                    m.d.sync += [beat.eq(0), kx.eq(kx + 1), self.kernel_byte.eq(self.kernel_byte + cmd.channels)]
                    with m.If(last_kx):
                        m.d.sync += [kx.eq(0), ky.eq(ky + 1)]
                        with m.If(last_ky):
                            m.d.sync += self.tapping.eq(0)
            m.d.sync += self.step.eq(self.step + 1)
            with m.If(self.step == geo.period - 1):      # last, so that the next block wins over the taps
                m.d.sync += self.step.eq(0)
                with m.If(self.last_block):
                    m.d.sync += self.running.eq(0)
                with m.Else():
                    m.d.sync += [*restart_taps, self.bank.eq(~self.bank), self.first.eq(self.first + cols),
                                 self.first_bytes.eq(self.first_bytes + cols * cmd.channels),
                                 self.outputs_before.eq(self.outputs_before + sum(self.kept))]
                    for column in self.columns:
                        moved = column + geo.cols_mod_w
                        m.d.sync += column.eq(Mux(moved >= geo.plane_w, moved - geo.plane_w, moved))

    def tap_byte(self):
        """The WEIGHT byte of the tap's run: plane (ky·dilation_h mod stride_h, kx·dilation_w mod stride_w),
        ``(ky·dilation_h div stride_h)·plane_w + kx·dilation_w div stride_w`` positions on from the block's."""
        cmd, geo = self.command, self.geometry
        down, across = self.ky * cmd.dilation_h, self.kx * cmd.dilation_w
        plane = (down % cmd.stride_h) * cmd.stride_w + across % cmd.stride_w
        offset = (down // cmd.stride_h) * geo.plane_w + across // cmd.stride_w
        return cmd.in_addr + plane * geo.plane_bytes + offset * cmd.channels + self.first_bytes

    def read(self, m: Module):
        """The reads of a beat, and in their data cycle the words gathered into the tap's operands."""
        config, cmd, geo, tap, drain = self.config, self.command, self.geometry, self.tap, self.drain
        issuing = self.running & self.tapping
        beats = DepthwiseTiming.of(config, config.mac.rows, config.mac.cols).tap_beats
        positions = Mux(self.last_block, geo.positions - self.first, config.mac.cols)     # the block's
        runs = (("weight", self.tap_byte(), positions * cmd.channels, (self.weight_read, self.weight_read_b),
                 slots(config), tap.run),
                ("act", self.kernel_byte, cmd.channels, (self.act_read, self.act_read_b), config.mac.rows,
                 tap.kernel))
        got, got_beat = Signal(), Signal.like(self.beat, name="got_beat")
        m.d.sync += [got.eq(issuing), got_beat.eq(self.beat)]
        for name, byte, used, ports, length, run in runs:     # reads only as far as the run's ``used`` bytes
            port_bytes = word_bytes(config, Buffer[name.upper()])
            word = byte >> (port_bytes.bit_length() - 1)
            for half, port in enumerate(ports):
                read = word + 2 * self.beat + half
                m.d.comb += [port.addr.eq(read), port.en.eq(issuing & reads_needed(read, byte, used, port_bytes))]
            got_offset = Signal(range(port_bytes), name=f"got_{name}_offset")
            m.d.sync += got_offset.eq(byte[:len(got_offset)])
            m.submodules[f"{name}_window"] = window = WordWindow(port_bytes, beats, length)
            m.d.comb += [window.a.eq(ports[0].data), window.b.eq(ports[1].data), window.valid.eq(got),
                         window.beat.eq(got_beat), window.offset.eq(got_offset), run.eq(window.run)]

        skip, skipped = [], 0
        for kept in self.kept:
            skip.append(skipped)
            skipped = skipped + Mux(kept, 0, cmd.channels)
        kept_count = sum(self.kept)
        left = geo.outputs - self.outputs_before
        last_beat = issuing & (self.beat == geo.tap_beats - 1)
        m.d.sync += [tap.valid.eq(last_beat), tap.first.eq((self.ky == 0) & (self.kx == 0)), tap.bank.eq(self.bank),
                     tap.kept.eq(Cat(*self.kept)), *(tap.skip[j].eq(value) for j, value in enumerate(skip)),
                     drain.start.eq(last_beat & (self.ky == cmd.k_h - 1) & (self.kx == cmd.k_w - 1)),
                     drain.bank.eq(self.bank), drain.last.eq(self.last_block),
                     drain.acc_first.eq(cmd.acc_addr + self.outputs_before * cmd.channels),
                     drain.entries.eq(Mux(kept_count < left, kept_count, left) * cmd.channels)]
