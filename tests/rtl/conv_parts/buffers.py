"""Buffer read ports answered from a byte image, as the System's memories answer them: a word read with
``en`` in one cycle is on ``data`` in the next and stays there until the next read."""
from __future__ import annotations

import numpy as np


class ReadPorts:
    def __init__(self, image: np.ndarray, port_bytes: int, *ports):
        self.words = image.reshape(-1, port_bytes)
        self.ports = ports

    def word(self, addr: int) -> int:
        return int.from_bytes(self.words[addr % len(self.words)].tobytes(), "little")


async def tick(ctx, *buffers: ReadPorts) -> None:
    """One clock edge: the reads the buffers' ports enable now are answered after it."""
    reads = [(buffer, port, ctx.get(port.addr)) for buffer in buffers for port in buffer.ports if ctx.get(port.en)]
    await ctx.tick()
    for buffer, port, addr in reads:
        ctx.set(port.data, buffer.word(addr))


def run_bytes(image: np.ndarray, start: int, length: int) -> np.ndarray:
    """``length`` bytes of ``image`` from ``start``, wrapping at its end as the port address does."""
    return image[np.arange(start, start + length) % len(image)]
