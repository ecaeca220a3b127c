"""WDEC's cube stager: a part decoder's levels gathered into 8x8x8 cubes of (kernel, tap, channel), written to
WEIGHT as rows of up to 8 channels, so that one write carries up to 8 levels (docs/rtl-wdec.md, "Stager")."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.codec.npu_profile import CUBE_SHIFT
from aipu.rtl.ports import word_bytes, write_port
from aipu.rtl.wdec_parts.interfaces import command_field, leaf_level
from aipu.sim.machine.arch import Buffer, HardwareConfig

SIDE = 1 << CUBE_SHIFT   # the codec's cube side: rows of SIDE channels, SIDE x SIDE rows of (kernel, tap)
ROWS = SIDE * SIDE


class CubeStager(wiring.Component):
    """Two banks of one cube each: the levels of the current cube fill one (FILL), the closed cube drains from
    the other, a row of its channels at a time, one WEIGHT word's part of a row per granted write.

    A level in another cube than FILL's closes FILL: it becomes the draining cube and the level starts the next.
    The closing needs the other bank drained: until then ``hold`` stops the engine on that leaf (a leaf of the
    same cube, or anything but a leaf's bins, goes on). After the syntax has ``finished``, the last cube is
    drained the same way (FLUSH); ``done`` then rises.

    Signature: ``begin`` (In: a part starts), ``leaf`` (In: the syntax's levels and leaf position), ``finished``
    (In: the syntax's padding check passed), the part's ``wgt_addr``, ``out_c`` and ``in_c`` (In), ``hold``,
    ``pending``, ``done`` (Out), ``write`` (Out: the row's WEIGHT write, ``en`` unused), ``grant`` (In).
    """

    def __init__(self, config: HardwareConfig):
        self.port_bytes = word_bytes(config, Buffer.WEIGHT)
        super().__init__({"begin": In(1), "leaf": In(leaf_level(config)), "finished": In(1),
                          "wgt_addr": In(command_field(config, "wgt_addr")), "out_c": In(command_field(config, "out_c")),
                          "in_c": In(command_field(config, "in_c")), "hold": Out(1), "pending": Out(1),
                          "done": Out(1), "write": Out(write_port(config, Buffer.WEIGHT)), "grant": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        leaf = self.leaf
        m.submodules.banks = banks = Memory(shape=8 * SIDE, depth=2 * ROWS, init=[])
        fill_port = banks.write_port(granularity=8)
        drain_port = banks.read_port()
        fill_bank, filling, draining, finished = Signal(), Signal(), Signal(), Signal()
        fill_cube = Signal(len(Cat(leaf.kernel, leaf.tap, leaf.channel)))
        cube = Cat(leaf.kernel[CUBE_SHIFT:], leaf.tap[CUBE_SHIFT:], leaf.channel[CUBE_SHIFT:])
        m.d.comb += [fill_port.addr.eq(Cat(leaf.tap[:CUBE_SHIFT], leaf.kernel[:CUBE_SHIFT], fill_bank)),
                     fill_port.data.eq(leaf.level.replicate(SIDE)), self.pending.eq(draining),
                     self.hold.eq(leaf.in_leaf & filling & (cube != fill_cube) & draining),
                     self.done.eq(finished & ~filling & ~draining)]
        closing = Signal()
        with m.If(leaf.valid):
            m.d.comb += fill_port.en.eq(1 << leaf.channel[:CUBE_SHIFT])
            with m.If(filling & (cube != fill_cube)):
                m.d.comb += [closing.eq(1), fill_port.addr[-1].eq(~fill_bank)]
                m.d.sync += fill_bank.eq(~fill_bank)
            m.d.sync += [filling.eq(1), fill_cube.eq(cube)]
        with m.If(finished & filling & ~draining):
            m.d.comb += closing.eq(1)
            m.d.sync += [filling.eq(0), fill_bank.eq(~fill_bank)]
        self._drain(m, drain_port, closing, fill_bank, fill_cube, draining)
        with m.If(self.finished):
            m.d.sync += finished.eq(1)
        with m.If(self.begin):
            m.d.sync += [filling.eq(0), draining.eq(0), finished.eq(0)]
        return m

    def _drain(self, m: Module, port, closing, fill_bank, fill_cube, draining) -> None:
        """The draining cube's rows (kernel outer, tap inner; those inside the part), each as one write per
        WEIGHT word its channels touch; the row in the read port's register, the next one read as it goes."""
        leaf, nbytes = self.leaf, self.port_bytes
        shift = (nbytes - 1).bit_length()
        base = Signal.like(fill_cube)           # the draining cube: (kernel, tap, channel) >> CUBE_SHIFT
        row_k, row_z = Signal(CUBE_SHIFT), Signal(CUBE_SHIFT)
        segment = Signal(range(-(-SIDE // nbytes) + 1))     # words of the row written so far
        k_bits, z_bits = len(leaf.kernel) - CUBE_SHIFT, len(leaf.tap) - CUBE_SHIFT
        k0, z0, c0 = (field << CUBE_SHIFT for field in (base[:k_bits], base[k_bits:k_bits + z_bits], base[k_bits + z_bits:]))
        rows_k = Mux(self.out_c - k0 < SIDE, self.out_c - k0, SIDE)
        rows_z = Mux(leaf.taps - z0 < SIDE, leaf.taps - z0, SIDE)
        channels = Mux(self.in_c - c0 < SIDE, self.in_c - c0, SIDE)
        start = Signal(len(self.wgt_addr) + 1)
        m.d.comb += start.eq(self.wgt_addr + ((k0 + row_k) * leaf.taps + z0 + row_z) * self.in_c + c0)
        end = start + channels
        word = (start >> shift) + segment
        last_segment = ((word + 1) << shift) >= end
        last_row = (row_k == rows_k - 1) & (row_z == rows_z - 1)
        rotation = ((word << shift) - start)[:CUBE_SHIFT]
        row = port.data
        rotated = Cat(*(row.word_select((rotation + j)[:CUBE_SHIFT], 8) for j in range(SIDE)))
        first = Mux(start > (word << shift), (start - (word << shift))[:shift + 1], 0)     # bytes of the word
        beyond = Mux(last_segment, (end - (word << shift))[:shift + 1], nbytes)
        write = self.write
        m.d.comb += [write.addr.eq(word), write.data.eq(rotated.replicate(-(-nbytes // SIDE))[:8 * nbytes]),
                     write.mask.eq(((1 << beyond) - 1) & ~((1 << first) - 1)), port.en.eq(0)]
        next_k = Mux(row_z == rows_z - 1, row_k + 1, row_k)
        next_z = Mux(row_z == rows_z - 1, 0, row_z + 1)
        m.d.comb += port.addr.eq(Cat(next_z[:CUBE_SHIFT], next_k[:CUBE_SHIFT], ~fill_bank))
        with m.If(closing):
            m.d.comb += [port.en.eq(1), port.addr.eq(fill_bank * ROWS)]
            m.d.sync += [draining.eq(1), base.eq(fill_cube), row_k.eq(0), row_z.eq(0), segment.eq(0)]
        with m.Elif(draining & self.grant):
            with m.If(~last_segment):
                m.d.sync += segment.eq(segment + 1)
            with m.Elif(last_row):
                m.d.sync += draining.eq(0)
            with m.Else():
                m.d.comb += port.en.eq(1)
                m.d.sync += [row_k.eq(next_k), row_z.eq(next_z), segment.eq(0)]
