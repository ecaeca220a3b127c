"""The state every executor of a program shares: the DRAM image and the on-chip buffers, as bytes.

The interpreter runs programs on it, the compiler builds its DRAM image, the RTL co-simulation preloads and
compares its buffers; sizes come from the hardware configuration.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.sim.machine.arch import Buffer, HardwareConfig


@dataclass
class Memory:
    """DRAM image plus every on-chip buffer, all as little-endian byte arrays."""

    config: HardwareConfig
    dram: np.ndarray
    buffers: dict[Buffer, np.ndarray]

    @classmethod
    def create(cls, config: HardwareConfig, dram: bytes | np.ndarray | int) -> Memory:
        """A fresh memory: ``dram`` is the image's size in bytes (zeros) or its content, copied once."""
        size = dram if isinstance(dram, int) else memoryview(dram).nbytes
        if size > 1 << config.dram.address_bits:
            raise ValueError(f"DRAM image of {size} bytes exceeds dram.address_bits = {config.dram.address_bits}")
        if isinstance(dram, int):
            image = np.zeros(dram, np.uint8)
        elif isinstance(dram, np.ndarray):
            image = np.ascontiguousarray(dram).view(np.uint8).reshape(-1).copy()
        else:
            image = np.frombuffer(dram, np.uint8).copy()
        return cls(config, image, {b: np.zeros(config.buffer(b).bytes, np.uint8) for b in Buffer})

    def copy(self) -> Memory:
        return Memory(self.config, self.dram.copy(), {b: a.copy() for b, a in self.buffers.items()})

    def __eq__(self, other) -> bool:
        return (isinstance(other, Memory) and np.array_equal(self.dram, other.dram)
                and all(np.array_equal(self.buffers[b], other.buffers[b]) for b in Buffer))
