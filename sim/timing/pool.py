"""POOL's and ELTWISE's cycles (docs/rtl-pool.md, "Cycles"): the POOL unit (``aipu.rtl.pool``) checks the
command in two cycles, then issues one item a cycle without a stall (one window tap of a group of
``pool_lanes`` channels for POOL, a group of ``lanes`` operand pairs for ELTWISE), and writes the last partly
filled output word after its pipeline drains.
"""
from __future__ import annotations

from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, Opcode
from aipu.sim.machine.program import Command

CHECK_CYCLES = 2          # CHECK and VERIFY
FLUSH_CYCLES = 1          # the last output word
PIPELINE_LATENCY = 3      # item issued -> element read -> registered result -> output to the packer


def lanes(config: HardwareConfig) -> int:
    """ELTWISE elements per cycle: a group of int16 results fills at most one OUT word, and a group of
    operand bytes at most one source word (so each group touches two words of each)."""
    return max(1, min(config.buffer(Buffer.OUT).port_bytes // 2,
                      *(config.buffer(b).port_bytes for b in VECTOR_SOURCE_BUFFERS)))


def pool_lanes(config: HardwareConfig) -> int:
    """POOL channels per cycle, whatever the element type: a group of int16 elements fills at most one word of
    OUT and of each source buffer (its inputs are as wide as its results). At most ``lanes``."""
    return max(1, min(config.buffer(b).port_bytes for b in (Buffer.OUT, *VECTOR_SOURCE_BUFFERS)) // 2)


def pool_output_size(command: Command) -> tuple[int, int]:
    """(out_h, out_w) of a POOL command whose window fits its padded input."""
    span_h, span_w = command.dilation_h * (command.k_h - 1) + 1, command.dilation_w * (command.k_w - 1) + 1
    return ((command.in_h + command.pad_top + command.pad_bottom - span_h) // command.stride_h + 1,
            (command.in_w + command.pad_left + command.pad_right - span_w) // command.stride_w + 1)


def command_cycles(config: HardwareConfig, command: Command) -> int:
    """Cycles from start to retire of a legal POOL or ELTWISE command (docs/rtl-pool.md, "Cycles")."""
    if command.opcode == Opcode.POOL:
        out_h, out_w = pool_output_size(command)
        groups = -(-command.channels // pool_lanes(config))
        items = out_h * out_w * groups * command.k_h * command.k_w
    else:
        items = -(-command.count // lanes(config))
    return CHECK_CYCLES + items + PIPELINE_LATENCY + FLUSH_CYCLES
