"""Random LOADs and STOREs: every element type, sizes and strides below, at and above the run (and zero),
padding on every side, unaligned addresses, chained by tokens in the order drawn."""
from __future__ import annotations

import numpy as np

from aipu.rtl.dma import LoadUnit, StoreUnit
from aipu.sim.cosim.stimulus.base import Stimulus
from aipu.sim.machine.arch import DTYPE_BYTES, DTYPE_NUMPY, BYTE_TYPES, Buffer, HardwareConfig
from aipu.sim.machine.isa import LOADABLE_BUFFERS, Opcode
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
    run = fields["run"] * DTYPE_BYTES[fields["elem_type"]]
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
    run = fields["run"] * DTYPE_BYTES[elem]
    for name, span in (("dram_x_stride", run), ("dram_y_stride", run * fields["x_size"])):
        fields[name] = int(rng.choice([0, span, int(rng.integers(0, span + 1)), int(rng.integers(span, 3 * span + 9))]))
    return fields


def random_load(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    while True:
        fields = _random_shape(rng, size)
        buffer = LOADABLE_BUFFERS[int(rng.integers(len(LOADABLE_BUFFERS)))]
        pads = {name: int(rng.integers(0, 3)) for name in ("pad_top", "pad_bottom", "pad_left", "pad_right")}
        run = fields["run"] * DTYPE_BYTES[fields["elem_type"]]
        tile = ((fields["y_size"] + pads["pad_top"] + pads["pad_bottom"])
                * (fields["x_size"] + pads["pad_left"] + pads["pad_right"]) * run)
        end = _pattern_end(fields)
        if tile <= config.buffer(buffer).bytes and end <= DRAM_BYTES:
            break
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


def random_commands(config: HardwareConfig, rng: np.random.Generator, count: int) -> list[Command]:
    return [(random_load if rng.random() < 0.5 else random_store)(config, rng) for _ in range(count)]


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int) -> Stimulus:
    program = chained_program(config, random_commands(config, rng, commands))
    return Stimulus(program, random_memory(config, rng), UNITS)
