"""Random LOADs and STOREs: every element type, sizes and strides below, at and above the run (and zero),
padding on every side, unaligned addresses, LOADs of codebook indices and circulant LOADs, chained by tokens in
the order drawn."""
from __future__ import annotations

import numpy as np

from aipu.rtl.dma import LoadUnit, StoreUnit
from aipu.sim.cosim.stimulus.base import Stimulus
from aipu.sim.machine.arch import (CODEBOOK_INDEX_BITS, DTYPE_BYTES, DTYPE_NUMPY, BYTE_TYPES, Buffer, DType,
                                HardwareConfig)
from aipu.sim.machine.isa import CIRC_LOG2_BITS, CODEBOOK_SLOT_BYTES, LOADABLE_BUFFERS, IndexBits, Opcode
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.machine.ordering import writes_a_byte_twice

UNITS = (LoadUnit, StoreUnit)
DRAM_BYTES = 4096


def random_memory(config: HardwareConfig, rng: np.random.Generator) -> Memory:
    memory = Memory.create(config, rng.integers(0, 256, DRAM_BYTES, dtype=np.uint8).tobytes())
    for array in memory.buffers.values():
        array[:] = rng.integers(0, 256, array.size, dtype=np.uint8)
    return memory


def _pattern_end(fields: dict) -> int:
    """The DRAM bytes from the pattern's first to after its last (a run of indices: its packed bytes)."""
    run = fields["run"] * DTYPE_BYTES[fields["elem_type"]] * fields.get("index_bits", 8) // 8
    return ((fields["y_size"] - 1) * fields["dram_y_stride"] + (fields["x_size"] - 1) * fields["dram_x_stride"]
            + run)


def _writes_a_byte_twice(fields: dict) -> bool:
    return writes_a_byte_twice((0, fields["y_size"], fields["dram_y_stride"], fields["x_size"], fields["dram_x_stride"],
                                fields["run"] * DTYPE_BYTES[fields["elem_type"]]))


def _random_shape(rng: np.random.Generator, size: int) -> dict:
    """Element type, sizes and strides: strides below, at and above the run's bytes (and zero)."""
    elem = BYTE_TYPES[int(rng.integers(len(BYTE_TYPES)))]
    fields = dict(elem_type=elem, y_size=int(rng.integers(1, size + 1)), x_size=int(rng.integers(1, size + 1)),
                  run=int(rng.integers(1, 2 * size + 1)))
    _random_strides(rng, fields, fields["run"] * DTYPE_BYTES[elem])
    return fields


def _random_strides(rng: np.random.Generator, fields: dict, run: int) -> None:
    """DRAM strides below, at and above the ``run`` bytes of a run and a row's runs (and zero)."""
    for name, span in (("dram_x_stride", run), ("dram_y_stride", run * fields["x_size"])):
        fields[name] = int(rng.choice([0, span, int(rng.integers(0, span + 1)), int(rng.integers(span, 3 * span + 9))]))


def random_load(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    while True:
        fields = _random_shape(rng, size)
        buffer = LOADABLE_BUFFERS[int(rng.integers(len(LOADABLE_BUFFERS)))]
        command = _placed_load(config, rng, fields, buffer)
        if command is not None:
            return command


def random_codebook_load(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    """A LOAD of 1-, 2- or 4-bit codebook indices into WEIGHT: runs of whole DRAM bytes, strides counted in them,
    its codebook anywhere in LUT memory (random_memory fills it)."""
    while True:
        bits = CODEBOOK_INDEX_BITS[int(rng.integers(len(CODEBOOK_INDEX_BITS)))]
        fields = dict(index_bits=IndexBits(bits), elem_type=(DType.INT8, DType.UINT8)[int(rng.integers(2))],
                      y_size=int(rng.integers(1, size + 1)), x_size=int(rng.integers(1, size + 1)),
                      run=8 // bits * int(rng.integers(1, 2 * size + 1)),
                      codebook_addr=int(rng.integers(0, (config.buffer(Buffer.LUT).bytes - (1 << bits))
                                                     // CODEBOOK_SLOT_BYTES + 1)))
        _random_strides(rng, fields, fields["run"] * bits // 8)
        command = _placed_load(config, rng, fields, Buffer.WEIGHT)
        if command is not None:
            return command


def random_circulant_load(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    """A circulant LOAD into WEIGHT (circ_size L = 2, 4 or 8 within a DRAM word): runs of whole groups, DRAM
    addresses and strides multiples of L (strides below, at and above a run's and a row's bytes), no padding, its
    sign bits anywhere in LUT memory."""
    largest = min(config.dram.bytes_per_cycle.bit_length() - 1, (1 << CIRC_LOG2_BITS) - 1)
    while True:
        log2 = int(rng.integers(1, largest + 1))
        group = 1 << log2
        fields = dict(circ_log2=log2, elem_type=(DType.INT8, DType.UINT8)[int(rng.integers(2))],
                      y_size=int(rng.integers(1, size + 1)), x_size=int(rng.integers(1, size + 1)),
                      run=group * int(rng.integers(1, 2 * size + 1)))
        _random_strides(rng, fields, fields["run"])
        fields = {name: value - value % group if name.startswith("dram_") else value for name, value in fields.items()}
        signs = -(-fields["run"] // 8)
        fields["codebook_addr"] = int(rng.integers(0, (config.buffer(Buffer.LUT).bytes - signs) // CODEBOOK_SLOT_BYTES
                                                   + 1))
        tile = fields["y_size"] * group * fields["x_size"] * fields["run"]
        end = _pattern_end(fields)
        if tile <= config.buffer(Buffer.WEIGHT).bytes and end <= DRAM_BYTES:
            return Command.make(Opcode.LOAD, buffer=Buffer.WEIGHT,
                                sram_addr=int(rng.integers(0, config.buffer(Buffer.WEIGHT).bytes - tile + 1)),
                                dram_addr=group * int(rng.integers(0, (DRAM_BYTES - end) // group + 1)), **fields)


def _placed_load(config: HardwareConfig, rng: np.random.Generator, fields: dict, buffer: Buffer) -> Command | None:
    """The LOAD of ``fields`` with random padding, addresses and pad value, if its tile fits ``buffer`` and its
    pattern the DRAM image (else None: draw again)."""
    pads = {name: int(rng.integers(0, 3)) for name in ("pad_top", "pad_bottom", "pad_left", "pad_right")}
    run = fields["run"] * DTYPE_BYTES[fields["elem_type"]]
    tile = ((fields["y_size"] + pads["pad_top"] + pads["pad_bottom"])
            * (fields["x_size"] + pads["pad_left"] + pads["pad_right"]) * run)
    end = _pattern_end(fields)
    if tile > config.buffer(buffer).bytes or end > DRAM_BYTES:
        return None
    info = np.iinfo(DTYPE_NUMPY[fields["elem_type"]])
    return Command.make(Opcode.LOAD, buffer=buffer, sram_addr=int(rng.integers(0, config.buffer(buffer).bytes - tile + 1)),
                        dram_addr=int(rng.integers(0, DRAM_BYTES - end + 1)),
                        pad_value=int(rng.integers(info.min, int(info.max) + 1)), **pads, **fields)


def random_store(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    while True:
        fields = _random_shape(rng, size)
        source = fields["y_size"] * fields["x_size"] * fields["run"] * DTYPE_BYTES[fields["elem_type"]]
        end = _pattern_end(fields)
        if source <= config.buffer(Buffer.OUT).bytes and end <= DRAM_BYTES and not _writes_a_byte_twice(fields):
            break
    return Command.make(Opcode.STORE, sram_addr=int(rng.integers(0, config.buffer(Buffer.OUT).bytes - source + 1)),
                        dram_addr=int(rng.integers(0, DRAM_BYTES - end + 1)), **fields)


def chained_program(config: HardwareConfig, commands: list[Command]) -> Program:
    """The commands in this order: each one that follows a command of the other unit pops its token."""
    program = Program(config)
    for index, command in enumerate(commands):
        unit = command.unit
        before = commands[index - 1].unit if index else unit
        after = commands[index + 1].unit if index + 1 < len(commands) else unit
        program.append(Command(command.opcode, command.args, pop=frozenset({before} - {unit}),
                               push=frozenset({after} - {unit})))
    last = commands[-1].unit
    program.append(Command.make(Opcode.FINISH, unit=last))
    return program


def random_commands(config: HardwareConfig, rng: np.random.Generator, count: int, codebook: bool = False,
                    circulant: bool = False) -> list[Command]:
    """LOADs and STOREs, half and half; with ``codebook`` a third of them LOADs of codebook indices, with
    ``circulant`` a third circulant LOADs (options of their own, so that the programs drawn without them stay
    what they were)."""
    if codebook or circulant:
        kinds = (random_load, random_store, random_codebook_load if codebook else random_circulant_load)
        return [kinds[int(rng.integers(len(kinds)))](config, rng) for _ in range(count)]
    return [(random_load if rng.random() < 0.5 else random_store)(config, rng) for _ in range(count)]


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int, codebook: bool = False
                    ) -> Stimulus:
    """``commands`` random commands chained by tokens; with ``codebook`` LOADs of codebook indices among them, the
    first a LOAD of all of LUT memory from DRAM (a program's buffers may start empty: the codebooks are then DRAM's
    bytes)."""
    drawn = random_commands(config, rng, commands - 1 if codebook else commands, codebook)
    if codebook:
        drawn.insert(0, Command.make(Opcode.LOAD, buffer=Buffer.LUT, elem_type=DType.INT8,
                                     run=min(config.buffer(Buffer.LUT).bytes, DRAM_BYTES)))
    return Stimulus(chained_program(config, drawn), random_memory(config, rng), UNITS)
