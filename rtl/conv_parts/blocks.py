"""CONV's block walk: the blocks of a command in order, and where the next one's operands are."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import PHASE, conv_command, dim, geometry, next_block, packed_bytes
from aipu.sim.machine.arch import HardwareConfig


class BlockWalk(wiring.Component):
    """Counts the block the loader fills: (group, out-channel chunk of ``cols``, kernel tap (ky, kx),
    in-channel chunk of ``rows``, or ``2 * rows`` with INT4 weights), the in-channel chunk innermost; a block
    of groups steps by ``groups_per_block``. ``phase.begin`` sets the first block, ``phase.boundary`` the next.
    Addresses count bytes: an INT4 operand's channel offset is half its channel count (always even, D23).

    ``block`` says where that block's operands are and what it holds: the ACT byte of its first pixel's run
    and the ACC entry of its first accumulator, the WEIGHT byte of its first column, its in- and out-channels
    (the last chunk of a group, or the last block of groups, may be short), the bytes of a pixel's ACT run
    (its groups' in-channels side by side), whether it overwrites the accumulators (``accumulate`` = 0 and
    the first tap and in-chunk of its out-channels) and whether it is the command's last.

    Signature: ``command`` (In: the CONV command), ``geometry`` (In: the setup's), ``phase`` (In: the
    sequencer's), ``block`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"command": In(conv_command(config)), "geometry": In(geometry(config)), "phase": In(PHASE),
                          "block": Out(next_block(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, geo, block = self.command, self.geometry, self.block
        rows, cols, n = self.config.mac.rows, self.config.mac.cols, dim(self.config)
        group, out_chunk = Signal(range(n), name="block_group"), Signal(range(n), name="block_out_chunk")
        ky, kx = Signal(range(1 << len(cmd.k_h)), name="block_ky"), Signal(range(1 << len(cmd.k_w)), name="block_kx")
        in_chunk = Signal(range(n), name="block_in_chunk")
        last_in, last_kx = in_chunk == geo.in_chunks_last, kx == cmd.k_w - 1
        last_ky, last_out = ky == cmd.k_h - 1, out_chunk == geo.out_chunks_last
        last_group = group + geo.groups_per_block >= cmd.groups

        chunk = Mux(geo.int4_weights, 2 * rows, rows)
        out_channel = group * geo.group_out + out_chunk * cols
        in_channel = group * geo.group_in + in_chunk * chunk
        groups_left_cols = cmd.out_c - group * geo.group_out
        in_left = geo.group_in - in_chunk * chunk
        block_rows = Mux(in_left < chunk, in_left, chunk)
        groups_left = cmd.groups - group
        block_groups = Mux(groups_left < geo.groups_per_block, groups_left, geo.groups_per_block)
        out_left = (Mux(groups_left_cols < geo.block_group_cols, groups_left_cols, geo.block_group_cols)
                    - out_chunk * cols)
        m.d.comb += [
            block.act.eq(cmd.in_addr + ky * geo.tap_y + kx * geo.tap_x + packed_bytes(in_channel, geo.int4_inputs)),
            block.acc.eq(cmd.acc_addr + out_channel),
            block.weights.eq(cmd.wgt_addr + out_channel * geo.weights_per_out_channel
                             + packed_bytes((ky * cmd.k_w + kx) * geo.group_in + in_chunk * chunk, geo.int4_weights)),
            block.rows.eq(block_rows), block.cols.eq(Mux(out_left < cols, out_left, cols)),
            block.act_bytes.eq(packed_bytes(block_rows * block_groups, geo.int4_inputs)),
            block.overwrites.eq(~cmd.accumulate & (ky == 0) & (kx == 0) & (in_chunk == 0)),
            block.last.eq(last_in & last_kx & last_ky & last_out & last_group)]

        with m.If(self.phase.begin):
            m.d.sync += [counter.eq(0) for counter in (group, out_chunk, ky, kx, in_chunk)]
        with m.Elif(self.phase.boundary):
            nested = [(in_chunk, last_in, 1), (kx, last_kx, 1), (ky, last_ky, 1), (out_chunk, last_out, 1),
                      (group, last_group, geo.groups_per_block)]
            carry = 1
            for counter, at_last, step in nested:
                with m.If(carry):
                    m.d.sync += counter.eq(Mux(at_last, 0, counter + step))
                carry = carry & at_last
        return m
