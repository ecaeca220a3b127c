"""The DRAM plan: where every tensor and constant of a lowered network lives.

Activations are stored channels-last (a [1, C, H, W] tensor as [H][W][C], a [1, F] tensor as [F]), as the
units read and write them. Constants (weights, parameter records, tables) are placed first and never move;
a computed tensor gets a region when its producer runs and gives it back after its last reader, first-fit
among the free regions (``reuse=False`` keeps every tensor, so tests can read each one back). Regions are
aligned to ``DRAM_ALIGN`` bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.arch import unpack_int4

DRAM_ALIGN = 64


def align(value: int) -> int:
    return -(-value // DRAM_ALIGN) * DRAM_ALIGN


def channels_last(value: np.ndarray) -> np.ndarray:
    """A [1, C, ...] tensor as its DRAM layout: axis 1 moved last."""
    return np.ascontiguousarray(np.moveaxis(value, 1, -1)) if value.ndim > 2 else np.ascontiguousarray(value)


def from_channels_last(data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`channels_last` for a tensor of ``shape``."""
    if len(shape) <= 2:
        return data.reshape(shape)
    return np.moveaxis(data.reshape(shape[0], *shape[2:], shape[1]), -1, 1)


def store_tensor(dram: np.ndarray, address: int, value: np.ndarray) -> None:
    """Write a [1, C, ...] tensor into a DRAM image at ``address`` in its channels-last layout."""
    data = np.frombuffer(channels_last(value).tobytes(), np.uint8)
    dram[address:address + data.size] = data


def tensor_bytes(shape: tuple[int, ...], dtype: np.dtype, int4: bool = False) -> int:
    """The DRAM bytes of a tensor: INT4 (``int4``, int8 values) two a byte along its even channel count."""
    count = math.prod(shape)
    return count // 2 if int4 else count * np.dtype(dtype).itemsize


def load_tensor(dram: np.ndarray, address: int, shape: tuple[int, ...], dtype: np.dtype,
                int4: bool = False) -> np.ndarray:
    """Read a tensor of ``shape`` and ``dtype`` stored channels-last at ``address`` (as NCHW); ``int4``: its
    values two a byte (as int8)."""
    data = dram[address:address + tensor_bytes(shape, dtype, int4)]
    return from_channels_last(unpack_int4(data) if int4 else data.view(dtype), shape)


@dataclass
class DramPlan:
    """Constant blobs and tensor regions: name -> (byte address, bytes)."""

    regions: dict[str, tuple[int, int]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    end: int = 0
    _free: list[tuple[int, int]] = field(default_factory=list)      # (address, bytes) given back
    _live: dict[int, set[str]] = field(default_factory=dict)         # address -> names still using it

    def constant(self, name: str, data: np.ndarray) -> int:
        blob = np.ascontiguousarray(data).tobytes()
        self.blobs[name] = blob
        return self._place(name, len(blob), reuse=False)

    def tensor(self, name: str, shape: tuple[int, ...], dtype: np.dtype, reuse: bool = True, int4: bool = False) -> int:
        if name in self.regions:
            return self.regions[name][0]
        return self._place(name, tensor_bytes(shape, dtype, int4), reuse)

    def alias(self, name: str, source: str) -> None:
        """``name`` is the same bytes as ``source`` (a reshape that moves nothing)."""
        self.regions[name] = self.regions[source]
        self._live[self.regions[source][0]].add(name)

    def release(self, name: str) -> None:
        """``name`` is read no more; its region is free once no alias uses it either."""
        address, nbytes = self.regions[name]
        users = self._live.get(address, set())
        users.discard(name)
        if not users and address in self._live:
            del self._live[address]
            self._free.append((address, align(max(nbytes, 1))))

    def _place(self, name: str, nbytes: int, reuse: bool) -> int:
        size = align(max(nbytes, 1))
        address = None
        if reuse:
            fitting = [region for region in sorted(self._free) if region[1] >= size]
            if fitting:
                address, free = fitting[0]
                self._free.remove((address, free))
                if free > size:
                    self._free.append((address + size, free - size))
        if address is None:
            address, self.end = self.end, self.end + size
        self.regions[name] = (address, nbytes)
        self._live[address] = {name}
        return address

    def image(self) -> np.ndarray:
        """The initial DRAM image: zeros with every constant in place."""
        dram = np.zeros(max(self.end, DRAM_ALIGN), np.uint8)
        for name, blob in self.blobs.items():
            address = self.regions[name][0]
            dram[address:address + len(blob)] = np.frombuffer(blob, np.uint8)
        return dram
