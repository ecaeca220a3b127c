"""The NPU cycle model's WDEC (sim/timing/npu_wdec.py) steps lazily, whole stretches in numba: driven one cycle
at a time or from request to request it is granted and retires in the same cycles; alone on the bridge one
part takes the engine's formula, then its cube stager's last flush, more where the stager holds it; K parts on
E lanes take no less than the slowest part alone and no more than all of them one after another. The cube
stager (docs/rtl-wdec.md, "Stager") by hand-built lanes: a one-cube part, a cube closing while its
predecessor drains (held), lanes sharing the write port round robin, Morton skips while held."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.reference.geometry import CTU_SIZES
from aipu.sim.cosim.stimulus.wdec import layer_stream
from aipu.sim.machine.arch import DEFAULT, Buffer, hardware_config_from_dict
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command
from aipu.sim.timing import wdec
from aipu.codec.npu_profile import (CYCLE_SKIP, MARK_CUBE, MARK_LEAF, MARK_LEVEL, cube_writes, encode_parts_stream,
                                   encode_profile_stream, profile_entries_compiled, split_parts)
from aipu.sim.timing import npu_wdec
from aipu.sim.timing.npu_wdec import NEVER, WdecUnit

START = 7
NARROW = {"dram": {"bytes_per_cycle": 8, "latency_cycles": 5}}
CONFIGS = {"default": DEFAULT, "narrow": hardware_config_from_dict(NARROW),
           "lanes": hardware_config_from_dict({**NARROW, "wdec": {"engines": 4, "bins_per_cycle": 2}})}


def _config(engines: int, bins_per_cycle: int, narrow: bool = False):
    return hardware_config_from_dict({**(NARROW if narrow else {}),
                                      "wdec": {"engines": engines, "bins_per_cycle": bins_per_cycle}})


def _command(seed: int, parts: int = 1, density: float = 0.7, with_levels: bool = False) -> tuple:
    """A layer of ten to forty thousand weights (a stream of hundreds of DRAM words) at an odd DRAM address, in
    ``parts`` parts, ``density`` of its weights non-zero: the command and its stream (``with_levels``: also
    the levels and the CTU size)."""
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(40, 70)), int(rng.integers(30, 70)), 3, 3)
    levels = np.where(rng.random(shape) < density, np.clip(np.round(rng.laplace(0, 8, shape)), -128, 127), 0)
    ctu = int(rng.choice(CTU_SIZES))
    levels = levels.astype(np.int8)
    stream = layer_stream(levels, ctu) if parts == 1 else encode_parts_stream(levels, parts, ctu)
    out_c, in_c, k_h, k_w = shape
    command = Command.make(Opcode.WDEC, dram_addr=int(rng.integers(0, 40)), length=len(stream), wgt_addr=0,
                           out_c=out_c, in_c=in_c, k_h=k_h, k_w=k_w, parts=parts)
    return (command, stream, levels, ctu) if with_levels else (command, stream)


def _refused(cycle: int) -> bool:
    """Whether another reader takes the grant in ``cycle`` (about 40 % of the cycles, in no simple pattern)."""
    return (cycle * 2654435761) % 97 < 40


def _each_cycle(stream: WdecUnit) -> tuple[list[int], int]:
    grants, cycle = [], START
    while not stream.requested:
        granted = stream.requesting(cycle) and not _refused(cycle)
        stream.step(cycle, granted)
        grants += [cycle] * granted
        cycle += 1
    return grants, stream.finish()


def _request_to_request(stream: WdecUnit) -> tuple[list[int], int]:
    grants, cycle = [], START
    while not stream.requested:
        cycle = stream.next_request(cycle)
        assert stream.requesting(cycle)
        granted = not _refused(cycle)
        stream.step(cycle, granted)
        grants += [cycle] * granted
        cycle += 1
    return grants, stream.finish()


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
@pytest.mark.parametrize("seed", range(4))
def test_lazy_stepping_grants_and_retires_as_stepping_each_cycle(config, seed):
    command, stream = _command(seed, min(seed + 1, config.wdec.engines))
    each = _each_cycle(WdecUnit(config, command, stream, START))
    assert len(each[0]) > 2 * (config.dram.latency_cycles + 4)       # the FIFO filled, then refilled as it drained
    assert _request_to_request(WdecUnit(config, command, stream, START)) == each


def _stager_bound(config, command: Command, stream: bytes) -> tuple[int, int]:
    """A one-part command alone: the engine's formula plus the last cube's flush (2 + its WRITES), the least
    the unit can take, and the most without overlap (plus every cube's WRITES, each a hold at worst)."""
    engine = wdec.engine_phases(config, command, wdec._decoded_parts(command, stream)).cycles
    shape = (command.out_c, command.in_c, command.k_h, command.k_w)
    _, _, cubes = profile_entries_compiled(stream, shape, config.wdec.bins_per_cycle)
    writes = cube_writes(cubes, command.wgt_addr, shape, config.buffer(Buffer.WEIGHT).port_bytes)
    return engine + 2 + int(writes[-1]), engine + 2 * len(writes) + int(writes.sum())


@pytest.mark.parametrize("engines", [1, 3])
@pytest.mark.parametrize("bins_per_cycle", [1, 2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_one_part_alone_on_the_bridge_takes_the_engine_then_the_stager(engines, bins_per_cycle, seed):
    config = _config(engines, bins_per_cycle, narrow=seed % 2 == 1)
    command, stream = _command(seed, density=(0.7, 0.05, 0.002)[seed])
    alone = WdecUnit(config, command, stream, START)
    assert alone.alone(NEVER) and alone.requested
    least, most = _stager_bound(config, command, stream)
    assert least <= alone.finish() - START == wdec.command_cycles(config, command, stream) <= most


def _part_alone(config, command: Command, stream: bytes, part, levels: np.ndarray, ctu: int) -> tuple[int, int]:
    """Bounds of one part's cycles in the unit: (at least, at most). The first part runs as a command of its
    own at its place in DRAM (both bounds); a continuation part takes at least its engine's cycles, and at most
    those of the whole profile stream of its channels as a command of its own, which adds the header fields."""
    channels = levels[part.k0:part.k1]
    continuation = part.k0 > 0
    own = encode_profile_stream(channels, ctu) if continuation else stream[part.offset:part.offset + part.length]
    single = Command.make(Opcode.WDEC, **{**command.args, "dram_addr": command.dram_addr + part.offset,
                                          "length": len(own), "out_c": part.k1 - part.k0, "parts": 1})
    most = wdec.command_cycles(config, single, own)
    if not continuation:
        return most, most
    bits, _, _ = npu_wdec.engine_entries(stream[part.offset:part.offset + part.length], channels.shape,
                                         config.wdec.bins_per_cycle, continuation=True)
    return len(bits), most


@pytest.mark.parametrize("engines, parts", [(2, 2), (4, 3), (8, 8)])
@pytest.mark.parametrize("bins_per_cycle", [1, 4])
@pytest.mark.parametrize("seed", range(2))
def test_parts_take_between_the_slowest_part_and_all_parts_alone(engines, parts, bins_per_cycle, seed):
    config = _config(engines, bins_per_cycle, narrow=seed == 1)
    command, stream, levels, ctu = _command(10 + seed, parts, density=(0.7, 0.05)[seed], with_levels=True)
    bounds = [_part_alone(config, command, stream, part, levels, ctu)
              for part in split_parts(stream, command.out_c, parts)]
    cycles = wdec.command_cycles(config, command, stream)
    assert max(least for least, _ in bounds) <= cycles <= sum(most for _, most in bounds)
    unit = WdecUnit(config, command, stream, START)
    assert unit.alone(NEVER) and unit.finish() - START == cycles


FIRST = MARK_LEAF | MARK_CUBE | MARK_LEVEL          # a one-cycle leaf, the first of its cube
LEVEL = MARK_LEAF | MARK_LEVEL                       # a one-cycle leaf of the open cube
SKIP = (CYCLE_SKIP, 0)


def _hand_built(engines: int, entries: list[list[tuple[int, int]]], writes: list[list[int]]) -> tuple:
    """A unit of ``engines`` lanes, lane i started on ``entries[i]`` ((bits, marks) per engine cycle) and its
    cubes' WRITES ``writes[i]``, its words all in its window: only its stager holds it."""
    bits = np.array([bit for lane in entries for bit, _ in lane], dtype=np.int8)
    marks = np.array([mark for lane in entries for _, mark in lane], dtype=np.uint8)
    lanes = np.zeros((len(entries), npu_wdec.LANE_SIZE), dtype=np.int64)
    ends, cubes = np.cumsum([len(lane) for lane in entries]), np.cumsum([len(lane) for lane in writes])
    for lane, end, own, cube_end, own_writes in zip(lanes, ends, entries, cubes, writes):
        lane[[npu_wdec.NEED, npu_wdec.SKIP, npu_wdec.DEPTH, npu_wdec.WORDS]] = 1, CYCLE_SKIP, 4, 1
        lane[[npu_wdec.RETIRE, npu_wdec.FILL, npu_wdec.DONE]] = -1
        lane[npu_wdec.FROM], lane[npu_wdec.END] = end - len(own), end
        lane[npu_wdec.CUBES_FROM] = cube_end - len(own_writes)
    unit = np.zeros(npu_wdec.UNIT_SIZE, dtype=np.int64)
    unit[npu_wdec.ENGINES], unit[npu_wdec.UNIT_RETIRE] = engines, -1
    return (unit, lanes, np.zeros((len(entries), 4), dtype=np.int64), bits, marks,
            np.array([w for lane in writes for w in lane], dtype=np.int64))


def _positions(built: tuple, cycles: int, column: int = npu_wdec.POSITION) -> list[tuple[int, ...]]:
    """Each lane's engine position (or another register) after each cycle, stepped without a grant."""
    lanes = built[1]
    positions = []
    for cycle in range(cycles):
        npu_wdec._step(*built, cycle, False)
        positions.append(tuple(int(p) for p in lanes[:, column]))
    return positions


def test_a_part_of_one_cube_takes_the_engine_s_cycles_the_flush_and_its_writes():
    """Three one-cycle levels of one cube (WRITES 5) in cycles 0..2, the padding check in 3; FINISHED from 4,
    whose end flushes the cube (DRAIN_LEFT 5), written in 5..9 (alone on the port, each cycle granted); DONE,
    the lane's and the unit's retire, in 10 = 3 entries + 1 + 1 + 5 + 1 - 1."""
    built = _hand_built(1, [[(0, FIRST), (0, LEVEL), (0, LEVEL)]], [[5]])
    assert _positions(built, 12, npu_wdec.DRAIN_LEFT) == [(0,)] * 4 + [(5,), (4,), (3,), (2,), (1,), (0,), (0,),
                                                                      (0,)]
    lanes = built[1]
    assert lanes[0, npu_wdec.RETIRE] == 3 and lanes[0, npu_wdec.DONE] == 10 == built[0][npu_wdec.UNIT_RETIRE]


def test_a_cube_closing_while_its_predecessor_drains_is_held():
    """Cube 0 (two levels, WRITES 4) closes when cube 1's level completes in cycle 2: it drains in 3..6. Cube 2's
    first entry (cycle 3) is another cube than FILL (1) while DRAIN_LEFT > 0: held in 3..6, taken in 7, which
    closes cube 1 (WRITES 2: drains 8, 9). The padding check in 8 (never held); FINISHED from 9 but DRAIN_LEFT
    is 1 at its start: the flush of cube 2 (WRITES 1) at the end of 10, its write in 11, DONE in 12. A
    non-leaf entry (the end-of-CTU flag's) between cubes is never held."""
    built = _hand_built(1, [[(0, FIRST), (0, LEVEL), (0, FIRST), (0, FIRST)]], [[4, 2, 1]])
    assert _positions(built, 13) == [(1,), (2,), (3,), (3,), (3,), (3,), (3,), (4,), (4,), (4,), (4,), (4,), (4,)]
    assert built[1][0, npu_wdec.RETIRE] == 8 and built[0][npu_wdec.UNIT_RETIRE] == 12
    flag = _hand_built(1, [[(0, FIRST), (0, FIRST), (3, 0), (0, FIRST)]], [[2, 1, 1]])
    assert _positions(flag, 5) == [(1,), (2,), (3,), (3,), (4,)]      # cube 0 drains in 2, 3: held in 3 only


def test_a_new_cube_s_leaf_is_held_in_its_zero_run_steps_and_bins():
    """A leaf of three cycles (a zero-run step, two bins) opening cube 2 while cube 0 drains (2, 3): held at its
    first cycle, the zero-run step's, in 2 and 3; once let through, its later cycles never are (FILL changes at
    its level only, and DRAIN_LEFT is 0 till then)."""
    leaf = [(8, MARK_LEAF | MARK_CUBE), (1, MARK_LEAF), (1, LEVEL)]
    built = _hand_built(1, [[(0, FIRST), (0, FIRST), *leaf]], [[2, 1, 1]])
    assert _positions(built, 8) == [(1,), (2,), (2,), (2,), (3,), (4,), (5,), (5,)]


@pytest.mark.parametrize("engines", [2, 4])
def test_lanes_draining_at_once_share_the_write_port_round_robin(engines):
    """Both lanes close cube 0 (WRITES 2) in cycle 1 and reach cube 2 in cycle 2: lane 0 writes in 2 and 4,
    lane 1 in 3 and 5 (the pointer past the winner), so lane 0 is let through in 5, lane 1 in 6."""
    lane = [(0, FIRST), (0, FIRST), (0, FIRST)]
    built = _hand_built(engines, [lane, lane], [[2, 1, 1], [2, 1, 1]])
    assert _positions(built, 7) == [(1, 1), (2, 2), (2, 2), (2, 2), (2, 2), (3, 2), (3, 3)]


def test_a_held_lane_steps_over_morton_candidates():
    """The leaf walk goes on over Morton candidates outside the CU while a cube drains (cube 0, WRITES 4, in
    2..5): the skips in 2 and 3, then the next cube's leaf held in 4 and 5."""
    built = _hand_built(1, [[(0, FIRST), (0, FIRST), SKIP, SKIP, (0, FIRST)]], [[4, 1, 1]])
    assert _positions(built, 7) == [(1,), (2,), (3,), (4,), (4,), (4,), (5,)]


def test_parts_beyond_the_lanes_are_refused():
    command, stream = _command(0, 3)
    with pytest.raises(ExecutionError, match="parts = 3"):
        WdecUnit(_config(2, 1), command, stream, START)


def test_refused_grants_on_a_split_stream_keep_the_lanes_going():
    """Refused in some cycles (another reader's grant), four lanes of a split stream still retire, no earlier
    than alone here. (The round-robin read and write arbiters make the unit's cycles no monotone function of its
    grants in general, which is why the NPU top's timeline counts the cycles it took as its work, no negative
    DRAM stall; with the cube stager no such stream was found among this file's.)"""
    config = _config(4, 4)
    command, stream = _command(0, 4)
    alone = WdecUnit(config, command, stream, START)
    alone.alone(NEVER)
    refused = WdecUnit(config, command, stream, START)
    cycle = START
    while not refused.requested:
        refused.step(cycle, refused.requesting(cycle) and (cycle * 2654435761) % 7 < 3)
        cycle += 1
    assert refused.finish() >= alone.finish()


def test_the_stager_s_writes_follow_the_weight_address_and_port():
    """A one-cube part (8 kernels of 8 channels, 1x1): 8 rows of 8 bytes. With 256-byte WEIGHT words at
    wgt_addr 0 a write a row; 4-byte words two a row, at wgt_addr 2 three (each row straddles a word more): the
    cycles grow by the writes, the engine's alike."""
    levels = np.arange(64, dtype=np.int8).reshape(8, 8, 1, 1) - 32
    stream = layer_stream(levels, 8)
    cycles = {}
    for port_bytes, wgt_addr in ((256, 0), (4, 0), (4, 2)):
        config = hardware_config_from_dict({"buffers": {"weight": {"port_bytes": port_bytes}}})
        command = Command.make(Opcode.WDEC, dram_addr=0, length=len(stream), wgt_addr=wgt_addr, out_c=8, in_c=8,
                               k_h=1, k_w=1)
        cycles[port_bytes, wgt_addr] = wdec.command_cycles(config, command, stream)
        least, _ = _stager_bound(config, command, stream)
        assert cycles[port_bytes, wgt_addr] == least
    assert cycles[4, 0] - cycles[256, 0] == 8 and cycles[4, 2] - cycles[256, 0] == 16


def _cubes_closed_form(config, command, stream: bytes) -> int:
    """One part's cycles alone on its port by its cubes, for a part whose engine the window never stalls after
    its start (``wdec.engine_phases`` exact for the engine): the engine's entry n runs in cycle T + n + H, H the
    cycles held before it; cube j's first level (entry l_j) closes cube j - 1 in C_j, which drains in C_j + 1 ..
    C_j + W_(j-1) (alone, a write each cycle), so cube j + 1's first entry s_(j+1) is held until C_j + W_(j-1)
    + 1; after the padding check p = T + N + H the last cube is flushed in f = max(p + 1, the cycle after the
    last drain) and written in f + 1 .. f + W_last, and DONE follows: the stager's rules worked by hand, which
    the unit's simulation (the definition) must meet."""
    parts = wdec._decoded_parts(command, stream)
    shape = (command.out_c, command.in_c, command.k_h, command.k_w)
    bits, marks, cubes = npu_wdec.engine_entries(stream, shape, config.wdec.bins_per_cycle)
    writes = cube_writes(cubes, command.wgt_addr, shape, config.buffer(Buffer.WEIGHT).port_bytes).tolist()
    starts = np.flatnonzero(marks & MARK_CUBE).tolist()
    levels = np.flatnonzero(marks & MARK_LEVEL)
    firsts = levels[np.searchsorted(levels, starts)].tolist()      # each cube's first level
    held, drained = 0, -1           # drained: the last cycle of the last drain (cycles from T = 0)
    for j in range(1, len(starts)):
        if starts[j] + held <= drained:
            held = drained + 1 - starts[j]
        close = firsts[j] + held
        drained = close + writes[j - 1]
    padding = len(bits) + held
    flush = max(padding + 1, drained + 1)
    return wdec.engine_phases(config, command, parts).cycles + (flush + writes[-1] + 1) - len(bits)



@pytest.mark.parametrize("engines, bins_per_cycle, narrow, port_bytes", [(1, 1, False, 256), (1, 4, True, 4),
                                                                         (3, 2, False, 16), (1, 4, False, 4)])
@pytest.mark.parametrize("seed", range(3))
def test_one_part_alone_is_the_cubes_closed_form(engines, bins_per_cycle, narrow, port_bytes, seed):
    """One part alone on the port: the unit's simulation equals the closed form by cubes
    (``_cubes_closed_form``), on 3x3 layers and on a 1x1 layer whose in_c is no multiple of 8, at any WEIGHT
    address."""
    config = hardware_config_from_dict({**(NARROW if narrow else {}),
                                        "wdec": {"engines": engines, "bins_per_cycle": bins_per_cycle},
                                        "buffers": {"weight": {"port_bytes": port_bytes}}})
    command, stream = _command(seed, density=(0.7, 0.05, 0.002)[seed])
    rng = np.random.default_rng(seed)
    levels = np.where(rng.random((20, 37, 1, 1)) < 0.3, rng.integers(-9, 10, (20, 37, 1, 1)), 0).astype(np.int8)
    one = layer_stream(levels, 8)
    pointwise = Command.make(Opcode.WDEC, dram_addr=5, length=len(one), wgt_addr=3 + seed, out_c=20, in_c=37,
                             k_h=1, k_w=1)
    for command, stream in ((Command.make(Opcode.WDEC, **{**command.args, "wgt_addr": 7 * seed}), stream),
                            (pointwise, one)):
        cycles = wdec.command_cycles(config, command, stream)
        assert cycles == _cubes_closed_form(config, command, stream)
        least, most = _stager_bound(config, command, stream)
        assert least <= cycles <= most
