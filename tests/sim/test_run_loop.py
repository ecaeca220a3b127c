"""The interpreter's compiled run loop gives what running every command's Python step gives: the same memory,
statistics and write log, and the same errors, in any schedule."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layers import lower_conv_layer, lower_conv_layers
from aipu.sim.interpreter import run_loop, tiles
from aipu.sim.interpreter import ExecutionError, prepare
from aipu.sim.machine.arch import DEFAULT, PARAM_DTYPE, Buffer, DType, hardware_config_from_dict
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

AIPU_DIR = Path(run_loop.__file__).resolve().parent.parent.parent
TINY = hardware_config_from_dict({"buffers": {"act": {"bytes": 2048}, "weight": {"bytes": 1024},
                                              "acc": {"bytes": 1024}, "out": {"bytes": 512},
                                              "param": {"bytes": 256}}})


def _same_runs(program: Program, memory: Memory, seed=None):
    prepared = prepare(program, memory.dram.size)
    compiled, stepwise = prepared.run(memory, seed=seed), prepared.run(memory, seed=seed, compiled=False)
    assert compiled.memory == stepwise.memory
    assert compiled.stats.to_dict() == stepwise.stats.to_dict()
    assert list(compiled.stats.saturations) == list(stepwise.stats.saturations)     # in execution order
    assert compiled.writes == stepwise.writes and compiled.trace == stepwise.trace
    return prepared


@pytest.mark.parametrize("seed", range(30))
def test_random_layers_run_the_same_compiled_and_step_by_step(seed):
    rng = np.random.default_rng(500 + seed)
    layer = random_layer(rng, max_channels=40, max_size=16, with_lut=seed % 3 == 0)
    lowered = lower_conv_layer(layer)
    prepared = _same_runs(lowered.program, lowered.memory(), seed=None if seed % 2 else seed)
    assert any(step.row is not None for step in prepared.steps.values())


@pytest.mark.parametrize("seed", range(3))
def test_a_chain_of_layers_runs_the_same_in_several_schedules(seed):
    """Layers that read the previous one's output from DRAM, on a tiny machine (many small tiles)."""
    rng = np.random.default_rng(900 + seed)
    layers = [random_layer(rng, max_channels=16, max_size=10, out_types=(DType.INT8, DType.UINT8))]
    for _ in range(2):
        layers.append(random_layer(rng, x=layers[-1].reference(), max_channels=16, out_types=(DType.INT8,)))
    lowered = lower_conv_layers(layers, TINY if seed % 2 else DEFAULT)
    for schedule in (None, seed):
        _same_runs(lowered.program, lowered.memory(), seed=schedule)


def _conv(**fields) -> Command:
    conv = dict(in_addr=0, in_h=1, in_w=1, in_c=1, in_type=DType.INT8, out_c=1, k_h=1, k_w=1, wgt_addr=0, acc_addr=0)
    return Command.make(Opcode.CONV, **{**conv, **fields})


def _requant(**fields) -> Command:
    requant = dict(acc_addr=0, out_addr=0, pixels=1, channels=1, param_index=0, out_type=DType.INT8, qmin=-128,
                   qmax=127)
    return Command.make(Opcode.REQUANT, pop=[Unit.CONV], **{**requant, **fields})


def _memory(acc_value: int = 0, reserved: int = 0) -> Memory:
    memory = Memory.create(DEFAULT, 0x1000)
    memory.buffers[Buffer.ACT][0] = 100
    memory.buffers[Buffer.WEIGHT][0] = 100
    memory.buffers[Buffer.ACC][:4] = np.array([acc_value], np.int32).view(np.uint8)
    records = np.zeros(1, PARAM_DTYPE)
    records["multiplier"], records["shift"], records["reserved"] = 1, 20, reserved
    memory.buffers[Buffer.PARAM][:records.nbytes] = records.view(np.uint8)
    return memory


def _errors(program: Program, memory: Memory) -> list[str]:
    messages = []
    for compiled in (True, False):
        with pytest.raises(ExecutionError) as caught:
            prepare(program, memory.dram.size).run(memory, compiled=compiled)
        messages.append(str(caught.value))
    return messages


def test_a_sum_that_leaves_the_register_stops_the_loop_and_the_python_step_reports_it():
    """A preloaded ACC entry near the int32 bound plus a CONV's 100 * 100: the loop refuses the accumulation,
    the Python step keeps the exact sum, and the REQUANT that consumes it names it, in both runs alike."""
    program = Program()
    program.append(_conv(accumulate=1, push=[Unit.REQUANT]))
    program.append(_requant())
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    compiled, stepwise = _errors(program, _memory(acc_value=2 ** 31 - 100))
    assert compiled == stepwise and f"accumulator sum {2 ** 31 - 100 + 10_000} does not fit" in compiled


def test_a_record_with_reserved_bits_is_reported_alike():
    program = Program()
    program.append(_conv(push=[Unit.REQUANT]))
    program.append(_requant())
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    compiled, stepwise = _errors(program, _memory(reserved=1))
    assert compiled == stepwise and "non-zero reserved bits" in compiled
    _same_runs(program, _memory())


def _aipu_imports(path: Path) -> set[Path]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aipu.sim."):
            stem = AIPU_DIR.joinpath(*node.module.split(".")[1:])
            found.update(p for p in (stem.with_suffix(".py"), stem / "__init__.py") if p.is_file())
    return found


def test_the_loop_cache_key_covers_every_module_the_compiled_code_is_built_from():
    """numba checks a cached function against its own file only; the loop's key hashes every sim module its
    compiled code imports, directly or not."""
    reached, pending = set(), [Path(run_loop.__file__).resolve(), Path(tiles.__file__).resolve()]
    while pending:
        path = pending.pop()
        if path not in reached:
            reached.add(path)
            pending += _aipu_imports(path)
    reached.discard(Path(run_loop.__file__).resolve().parent / "__init__.py")   # imports them, is not compiled
    assert reached <= set(tiles.jit.source_files())
    assert {path.name for path in reached} >= {"run_loop.py", "tiles.py", "grouped_conv.py", "channels_last_conv.py",
                                               "requant.py", "arch.py"}


@pytest.mark.parametrize("run_bytes", [1, 3, 15, 16, 17, 31, 48, 63, 64, 65, 128, 130])
@pytest.mark.parametrize("contiguous", [False, True])
def test_runs_copy_exactly_and_nothing_around_them(run_bytes, contiguous):
    """The DMA copy's runs, as vectors of 16 or 64 bytes (the last overlapping the one before it) from 16 bytes
    on and a byte loop below: every byte of every run, none between or around them."""
    rng = np.random.default_rng(run_bytes)
    source = rng.integers(0, 256, 3000, dtype=np.uint8)
    target = np.full(3000, 7, np.uint8)
    source_step, target_step = (run_bytes, run_bytes) if contiguous else (run_bytes + 9, run_bytes + 3)
    run_loop._copy_runs(source, 5, source_step, target, 11, target_step, 6, run_bytes)
    want = np.full(3000, 7, np.uint8)
    for r in range(6):
        want[11 + r * target_step:11 + r * target_step + run_bytes] = source[5 + r * source_step:
                                                                            5 + r * source_step + run_bytes]
    np.testing.assert_array_equal(target, want)
