"""The ports every unit talks through: on-chip buffer SRAM ports and the DRAM ports of the DMA units.

Widths come from the hardware configuration: a buffer word is ``port_bytes`` bytes (what the SRAM delivers
per cycle), a DRAM word is ``dram.bytes_per_cycle`` bytes. A unit names its ports ``<buffer>_read``,
``<buffer>_write`` (buffer = lower-case :class:`Buffer` name), ``dram_read`` and ``dram_write``, optionally
with a suffix (``act_read_b``); :class:`aipu.rtl.system.System` attaches each to its memory by that name.

Timing (docs/rtl.md, "Ports"):
  buffer read   ``en`` with ``addr`` in cycle t -> ``data`` holds the word in cycle t + 1 (and keeps it
                while ``en`` is low)
  buffer write  ``en`` with ``addr``, ``data`` and a byte ``mask`` in cycle t -> written at the end of t
  DRAM read     request ``valid``/``ready`` with a word ``addr``; responses come back in request order,
                ``data_valid`` marks each, any number of cycles after the request was taken
                (``dram.latency_cycles`` on the System's DRAM model)
  DRAM write    ``valid``/``ready`` with ``addr``, ``data`` and byte ``mask``
"""
from __future__ import annotations

import re

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.sim.machine.arch import Buffer, HardwareConfig

PORT_NAME = re.compile(r"^(?P<space>act|weight|acc|out|lut|param|dram)_(?P<kind>read|write)(?:_\w+)?$")


def word_bytes(config: HardwareConfig, buffer: Buffer) -> int:
    return config.buffer(buffer).port_bytes


def word_count(config: HardwareConfig, buffer: Buffer) -> int:
    """Words of ``port_bytes`` in the buffer (the configuration guarantees port_bytes <= bytes)."""
    return config.buffer(buffer).bytes // config.buffer(buffer).port_bytes


def read_port(config: HardwareConfig, buffer: Buffer) -> wiring.Signature:
    return wiring.Signature({"addr": Out(range(word_count(config, buffer))), "en": Out(1),
                             "data": In(8 * word_bytes(config, buffer))})


def write_port(config: HardwareConfig, buffer: Buffer) -> wiring.Signature:
    nbytes = word_bytes(config, buffer)
    return wiring.Signature({"addr": Out(range(word_count(config, buffer))), "en": Out(1),
                             "data": Out(8 * nbytes), "mask": Out(nbytes)})


def dram_word_address_bits(config: HardwareConfig) -> int:
    return max(1, config.dram.address_bits - (config.dram.bytes_per_cycle - 1).bit_length())


def dram_read_port(config: HardwareConfig) -> wiring.Signature:
    return wiring.Signature({"addr": Out(dram_word_address_bits(config)), "valid": Out(1), "ready": In(1),
                             "data": In(8 * config.dram.bytes_per_cycle), "data_valid": In(1)})


def dram_write_port(config: HardwareConfig) -> wiring.Signature:
    nbytes = config.dram.bytes_per_cycle
    return wiring.Signature({"addr": Out(dram_word_address_bits(config)), "valid": Out(1), "ready": In(1),
                             "data": Out(8 * nbytes), "mask": Out(nbytes)})


def port_space(name: str) -> tuple[Buffer | str, str] | None:
    """(Buffer or "dram", "read" | "write") of a port member name; None for other members."""
    match = PORT_NAME.match(name)
    if match is None:
        return None
    space = match["space"]
    return (space if space == "dram" else Buffer[space.upper()]), match["kind"]
