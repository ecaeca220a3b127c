"""What the tests of LUT's and REQUANT's parts share: command words, buffers behind a part's read ports, and
an image of what its write port wrote."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Module
from amaranth.lib.memory import Memory

from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command


def command_word(config, opcode: Opcode, **fields) -> int:
    """The command word of ``opcode`` with ``fields`` (the rest at their smallest legal values)."""
    return int.from_bytes(Command.make(opcode, **fields).encode(config), "little")


def behind_buffers(part, ports: dict) -> Module:
    """``part`` with a buffer behind each of its read ports, as the System's: ``ports`` maps a port's name to
    the buffer's bytes; a word is read at the clock edge when ``en`` is high and held otherwise."""
    m = Module()
    m.submodules.part = part
    for name, image in ports.items():
        port = getattr(part, name)
        width = len(port.data) // 8
        words = np.frombuffer(bytes(image), np.uint8).reshape(-1, width)
        memory = Memory(shape=8 * width, depth=len(words), init=[int.from_bytes(w.tobytes(), "little") for w in words])
        m.submodules[f"{name}_buffer"] = memory
        read = memory.read_port()
        m.d.comb += [read.addr.eq(port.addr), read.en.eq(port.en), port.data.eq(read.data)]
    return m


class WrittenImage:
    """A buffer's bytes as a write port leaves them: :meth:`sample` once a cycle, before the clock edge."""

    def __init__(self, port, nbytes: int):
        self.port, self.bytes = port, np.zeros(nbytes, np.uint8)
        self.width = len(port.mask)
        self.writes = 0

    def sample(self, ctx) -> None:
        if not ctx.get(self.port.en):
            return
        self.writes += 1
        base, data, mask = ctx.get(self.port.addr) * self.width, ctx.get(self.port.data), ctx.get(self.port.mask)
        for i in range(self.width):
            if mask >> i & 1:
                self.bytes[base + i] = data >> (8 * i) & 0xFF
