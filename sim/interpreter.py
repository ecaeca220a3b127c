"""Functional interpreter: executes a command program on a memory image, unit queue by unit queue.

Each unit runs its queue in order; a command may run once every token it pops is available and every
token queue it pushes into has room (``queues.token_depth``). Which ready unit runs next is chosen by a
schedule (in unit order, or at random from a seed): a correctly synchronised program gives the same
memory for every schedule. The interpreter detects deadlock (no unit can run), unbalanced tokens at
FINISH, out-of-bounds accesses, and -- with vector clocks -- data races: two accesses to overlapping
bytes, at least one a write, by commands that no token chain orders.
The result logs every write (command, space, byte range or strided pattern, element type) so that a byte
another executor gets wrong can be traced to the command that should have written it.

All arithmetic is delegated to the golden model (:mod:`aipu.sim.golden`); this module only moves bytes.
"""
from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided

from aipu.sim import golden
from aipu.sim.machine.arch import (ACC_BITS, ACC_DTYPE, BUFFER_UNIT_BYTES, DTYPE_BYTES, DTYPE_NUMPY, LUT8_ENTRIES,
                                LUT_ENTRY_DTYPE, PARAM_DTYPE, Buffer, DType)
from aipu.sim.machine.isa import EltwiseOp, LutMode, Opcode, PoolMode, RequantMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

DRAM = "DRAM"


class ExecutionError(ValueError):
    """A command cannot execute: bad address, bad operand, arithmetic overflow. Names the command."""


class DeadlockError(ExecutionError):
    """No unit can make progress although commands remain."""


class HazardError(ExecutionError):
    """Two commands not ordered by tokens access overlapping bytes and at least one writes."""


@dataclass
class Stats:
    """What the run did. Byte counts are keyed by direction, e.g. ``DRAM->ACT`` or ``OUT->DRAM``."""

    macs: int = 0
    bytes_moved: Counter = field(default_factory=Counter)
    commands: Counter = field(default_factory=Counter)          # unit name -> commands executed
    saturations: dict[str, int] = field(default_factory=dict)   # "REQUANT[3]" -> clamped values
    lut_out_of_range: dict[str, int] = field(default_factory=dict)  # "LUT[2]" -> inputs outside the table

    def to_dict(self) -> dict:
        return {"macs": self.macs, "bytes_moved": dict(self.bytes_moved), "commands": dict(self.commands),
                "saturations": dict(self.saturations), "saturated_values": sum(self.saturations.values()),
                "lut_out_of_range": dict(self.lut_out_of_range)}


@dataclass(frozen=True, slots=True)
class Write:
    """One write call of one command, kept so that a wrong byte can be traced back to the command that wrote it
    (one record per call, never per byte, so the log leaves the interpreter's speed alone)."""

    unit: Unit
    index: int
    space: str
    low: int
    high: int          # exclusive
    dtype: np.dtype    # the element type written
    pattern: tuple[int, ...] | None = None   # strided DMA (base, y_size, y_stride, x_size, x_stride, run)

    def bytes(self) -> np.ndarray:
        """The byte addresses written, in the order of the data written."""
        return _region_bytes(self.low, self.high, self.pattern)


@dataclass
class Result:
    memory: Memory
    stats: Stats
    trace: list[tuple[Unit, int]]          # (unit, index in its queue) in execution order
    writes: list[Write] = field(default_factory=list)   # every write, in execution order


@dataclass
class _Access:
    space: str
    low: int
    high: int          # exclusive
    write: bool
    unit: Unit
    index: int
    clock: tuple[int, ...]
    pattern: tuple[int, ...] | None = None   # strided DMA (base, y_size, y_stride, x_size, x_stride, run)

    def bytes(self) -> np.ndarray:
        """The exact byte addresses touched (only computed when a conflict must be confirmed)."""
        return _region_bytes(self.low, self.high, self.pattern)


def _region_bytes(low: int, high: int, pattern: tuple[int, ...] | None) -> np.ndarray:
    """The byte addresses of a contiguous range or of a strided pattern, in access order."""
    if pattern is None:
        return np.arange(low, high, dtype=np.int64)
    return _pattern_offsets(*pattern).reshape(-1)


def _pattern_offsets(base: int, y_size: int, y_stride: int, x_size: int, x_stride: int, run: int) -> np.ndarray:
    return (base + np.arange(y_size, dtype=np.int64)[:, None, None] * y_stride
            + np.arange(x_size, dtype=np.int64)[None, :, None] * x_stride
            + np.arange(run, dtype=np.int64)[None, None, :])


def _writes_a_byte_twice(pattern: tuple[int, ...]) -> bool:
    """Whether a DMA pattern's byte offsets repeat. Rows laid out one after another (each run within its
    x stride, each row within its y stride) never do; otherwise every byte is marked once, no sort."""
    _, y_size, y_stride, x_size, x_stride, run = pattern
    if (x_size == 1 or x_stride >= run) and (y_size == 1 or y_stride >= (x_size - 1) * x_stride + run):
        return False
    offsets = _pattern_offsets(*pattern)
    low = int(offsets.min())
    marks = np.zeros(int(offsets.max()) - low + 1, np.bool_)
    marks[offsets.reshape(-1) - low] = True
    return int(np.count_nonzero(marks)) != offsets.size


class _RaceDetector:
    """Vector-clock happens-before check over byte ranges. Strided DMA accesses are first compared by
    their bounding intervals; an unordered pair that overlaps there is confirmed on the exact bytes."""

    def __init__(self) -> None:
        self.records: dict[str, list[_Access]] = {}

    def access(self, access: _Access) -> None:
        records = self.records.setdefault(access.space, [])
        for old in records:
            if (old.unit != access.unit and (old.write or access.write) and old.low < access.high
                    and access.low < old.high and old.clock[old.unit] > access.clock[old.unit]
                    and (old.pattern is None and access.pattern is None
                         or np.intersect1d(old.bytes(), access.bytes()).size)):
                raise HazardError(
                    f"{old.unit.name}[{old.index}] ({'write' if old.write else 'read'}) and "
                    f"{access.unit.name}[{access.index}] ({'write' if access.write else 'read'}) are not ordered "
                    f"by tokens but both access {access.space} [{max(old.low, access.low):#x}, "
                    f"{min(old.high, access.high):#x})")
        if access.write:   # accesses this write covers and follows can no longer race with anything new
            records[:] = [old for old in records
                          if not (old.clock[old.unit] <= access.clock[old.unit]
                                  and access.low <= old.low and old.high <= access.high)]
        records.append(access)


class _Executor:
    def __init__(self, program: Program, memory: Memory, check_hazards: bool) -> None:
        if memory.config != program.config:
            raise ValueError(f"memory image is for config {memory.config.config_hash()}, "
                             f"the program for {program.config.config_hash()}")
        self.memory = memory.copy()
        # Exact sums beside the wrapping ACC register (D6), entry for entry; preloaded ACC content is exact.
        self.exact_acc = self.memory.buffers[Buffer.ACC].view(ACC_DTYPE).astype(np.int64)
        self.stats = Stats()
        self.races = _RaceDetector() if check_hazards else None
        self.writes: list[Write] = []
        self.command: Command | None = None
        self.index = 0
        self.label = self.where = ""
        self.clock: tuple[int, ...] = ()

    # --- memory access: every read and write of the interpreter goes through these two ------------------
    def _span(self, space, field_name: str, address: int, nbytes: int, written: np.dtype | None,
              byte_address: bool = False) -> np.ndarray:
        """Bounds-check and race-check a contiguous byte range; return a view of it. Addresses count the
        buffer's units (int32 entries, parameter records) unless ``byte_address`` (DMA) says bytes.
        ``written``: the element type of a write, None for a read."""
        if space == DRAM:
            array, start = self.memory.dram, address
        else:
            unit = 1 if byte_address else BUFFER_UNIT_BYTES[space]
            array, start = self.memory.buffers[space], address * unit
        if address < 0 or start + nbytes > array.size:
            raise ExecutionError(f"{self.where}: field {field_name} = {address:#x}: access of {nbytes} bytes "
                                 f"ends at byte {start + nbytes:#x}, beyond {_space_name(space)} "
                                 f"({array.size:#x} bytes)")
        self._record(space, start, start + nbytes, written)
        return array[start:start + nbytes]

    def _record(self, space, low: int, high: int, written: np.dtype | None,
                pattern: tuple[int, ...] | None = None) -> None:
        """Log a write (for tracing a mismatch to its command) and race-check any access."""
        if high <= low:
            return
        if written is not None:
            self.writes.append(Write(self.command.unit, self.index, _space_name(space), low, high, written, pattern))
        if self.races is not None:
            self.races.access(_Access(_space_name(space), low, high, written is not None, self.command.unit,
                                      self.index, self.clock, pattern))

    def _strided_dram(self, field_name: str, address: int, cmd: Command, write: bool) -> np.ndarray:
        """A view [y][x][run bytes] of DRAM through a strided DMA pattern (strides are unsigned), bounds- and
        race-checked."""
        elem = DType(cmd.elem_type)
        run = cmd.run * DTYPE_BYTES[elem]
        pattern = (address, cmd.y_size, cmd.dram_y_stride, cmd.x_size, cmd.dram_x_stride, run)
        end = address + (cmd.y_size - 1) * cmd.dram_y_stride + (cmd.x_size - 1) * cmd.dram_x_stride + run
        if end > self.memory.dram.size:
            raise ExecutionError(f"{self.where}: field {field_name} = {address:#x}: strided access reaches byte "
                                 f"{end - 1:#x}, beyond DRAM ({self.memory.dram.size:#x} bytes)")
        if write and _writes_a_byte_twice(pattern):
            raise ExecutionError(f"{self.where}: dram_y_stride = {cmd.dram_y_stride}, dram_x_stride = "
                                 f"{cmd.dram_x_stride}: the store pattern writes some bytes twice")
        self._record(DRAM, address, end, DTYPE_NUMPY[elem] if write else None, pattern)
        return as_strided(self.memory.dram[address:end], shape=(cmd.y_size, cmd.x_size, run),
                          strides=(cmd.dram_y_stride, cmd.dram_x_stride, 1))

    def _tensor(self, space, field_name: str, address: int, shape, dtype: DType | np.dtype) -> np.ndarray:
        """A read of ``shape`` elements of ``dtype`` at ``address`` (a view into the memory image)."""
        np_dtype = DTYPE_NUMPY[dtype] if isinstance(dtype, DType) else np.dtype(dtype)
        nbytes = int(np.prod(shape)) * np_dtype.itemsize
        return self._span(space, field_name, address, nbytes, None).view(np_dtype).reshape(shape)

    def _write(self, space, field_name: str, address: int, values: np.ndarray, byte_address: bool = False) -> None:
        data = np.ascontiguousarray(values)
        span = self._span(space, field_name, address, data.nbytes, data.dtype, byte_address)
        span[:] = data.reshape(-1).view(np.uint8)

    # --- commands -----------------------------------------------------------------------------------
    def execute(self, unit: Unit, index: int, command: Command, clock: tuple[int, ...]) -> None:
        self.command, self.index, self.clock = command, index, clock
        self.label = f"{unit.name}[{index}]"
        self.where = f"{self.label} {command.opcode.name}"
        try:
            self.HANDLERS[command.opcode](self, command)
        except ExecutionError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            raise ExecutionError(f"{self.where}: {exc}") from exc
        self.stats.commands[unit.name] += 1

    def _load(self, cmd: Command) -> None:
        buffer = Buffer(cmd.buffer)
        elem = DType(cmd.elem_type)
        data = self._strided_dram("dram_addr", cmd.dram_addr, cmd, write=False)
        rows, cols = cmd.y_size + cmd.pad_top + cmd.pad_bottom, cmd.x_size + cmd.pad_left + cmd.pad_right
        info = np.iinfo(DTYPE_NUMPY[elem])
        if not info.min <= cmd.pad_value <= info.max:
            raise ExecutionError(f"{self.where}: field pad_value = {cmd.pad_value}: outside {elem.name} range")
        padded = np.empty((rows, cols, cmd.run), DTYPE_NUMPY[elem])
        padded[...] = cmd.pad_value
        padded.view(np.uint8).reshape(rows, cols, -1)[
            cmd.pad_top:cmd.pad_top + cmd.y_size, cmd.pad_left:cmd.pad_left + cmd.x_size] = data
        self._write(buffer, "sram_addr", cmd.sram_addr, padded, byte_address=True)
        self.stats.bytes_moved[f"DRAM->{buffer.name}"] += data.size

    def _store(self, cmd: Command) -> None:
        run_bytes = cmd.run * DTYPE_BYTES[DType(cmd.elem_type)]
        data = self._tensor(Buffer.OUT, "sram_addr", cmd.sram_addr, (cmd.y_size, cmd.x_size, run_bytes), np.uint8)
        self._strided_dram("dram_addr", cmd.dram_addr, cmd, write=True)[...] = data
        self.stats.bytes_moved["OUT->DRAM"] += data.size

    def _conv(self, cmd: Command) -> None:
        if cmd.in_c % cmd.groups or cmd.out_c % cmd.groups:
            raise ExecutionError(f"{self.where}: field groups = {cmd.groups} must divide in_c = {cmd.in_c} "
                                 f"and out_c = {cmd.out_c}")
        group_c = cmd.in_c // cmd.groups
        x = self._tensor(Buffer.ACT, "in_addr", cmd.in_addr, (cmd.in_h, cmd.in_w, cmd.in_c), DType(cmd.in_type))
        w = self._tensor(Buffer.WEIGHT, "wgt_addr", cmd.wgt_addr, (cmd.out_c, cmd.k_h, cmd.k_w, group_c), DType.INT8)
        exact = golden.conv2d(x.transpose(2, 0, 1)[None], w.transpose(0, 3, 1, 2), x_zero_point=cmd.in_zero_point,
                              w_zero_point=cmd.w_zero_point, stride=(cmd.stride_h, cmd.stride_w),
                              dilation=(cmd.dilation_h, cmd.dilation_w), groups=cmd.groups, wide=True)
        exact = exact[0].transpose(1, 2, 0)                       # [out_h][out_w][out_c], exact int64
        entries = slice(cmd.acc_addr, cmd.acc_addr + exact.size)
        if cmd.accumulate:
            self._tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, exact.shape, ACC_DTYPE)   # bounds and hazard check
            exact = exact + self.exact_acc[entries].reshape(exact.shape)
        # The register wraps (D6); the exact sum rides along and is checked where it is consumed.
        self._write(Buffer.ACC, "acc_addr", cmd.acc_addr, _wrap(exact, ACC_BITS).astype(ACC_DTYPE))
        self.exact_acc[entries] = exact.reshape(-1)
        self.stats.macs += exact.size * group_c * cmd.k_h * cmd.k_w

    def _params(self, cmd: Command) -> np.ndarray:
        records = self._tensor(Buffer.PARAM, "param_index", cmd.param_index, (cmd.channels,), PARAM_DTYPE)
        if np.any(records["reserved"]):
            raise ExecutionError(f"{self.where}: parameter record {cmd.param_index + int(np.argmax(records['reserved'] != 0))}"
                                 " has non-zero reserved bits")
        return records

    def _requant(self, cmd: Command) -> None:
        acc = self._tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (cmd.pixels, cmd.channels), ACC_DTYPE)
        exact = self.exact_acc[cmd.acc_addr:cmd.acc_addr + acc.size]
        wrapped = exact != acc.reshape(-1)
        if wrapped.any():
            worst = int(exact[wrapped][np.argmax(np.abs(exact[wrapped]))])
            raise ExecutionError(f"{self.where}: accumulator sum {worst} does not fit int{ACC_BITS}; the register "
                                 f"wrapped (docs/arithmetic.md D6: the compiler must prove the bound)")
        p = self._params(cmd)
        out_dtype = DTYPE_NUMPY[DType(cmd.out_type)]
        common = dict(bias=p["bias"].astype(np.int64), out_zero_point=cmd.out_zero_point, qmin=cmd.qmin,
                      qmax=cmd.qmax, channel_axis=1, out_dtype=out_dtype, return_saturated=True)
        if cmd.mode == RequantMode.FLOAT32:
            if cmd.leaky:
                raise ExecutionError(f"{self.where}: field leaky = 1 is not supported in FLOAT32 mode")
            out, saturated = golden.requantize_float32(acc.copy(), scale=p["scale"].astype(np.float32),
                                                       **common)
        else:
            negative = (dict(negative_multiplier=p["negative_multiplier"].astype(np.int64),
                             negative_shift=p["negative_shift"].astype(np.int64)) if cmd.leaky else {})
            out, saturated = golden.requantize(acc.copy(), multiplier=p["multiplier"].astype(np.int64),
                                               shift=p["shift"].astype(np.int64),
                                               rounding=Rounding(cmd.rounding).name.lower(), **negative, **common)
        self._write(Buffer.OUT, "out_addr", cmd.out_addr, out)
        self.stats.saturations[self.label] = saturated

    def _lut(self, cmd: Command) -> None:
        in_type, out_type = DType(cmd.in_type), DType(cmd.out_type)
        x = self._tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.count,), in_type)
        out_dtype = DTYPE_NUMPY[out_type]
        if cmd.mode == LutMode.DIRECT8:
            if cmd.table_log2 or cmd.index_shift or cmd.input_min or cmd.qmin or cmd.qmax:
                raise ExecutionError(f"{self.where}: DIRECT8 takes no table_log2/index_shift/input_min/qmin/qmax "
                                     "(they must be 0)")
            entries = self._tensor(Buffer.LUT, "table_addr", cmd.table_addr, (LUT8_ENTRIES,), LUT_ENTRY_DTYPE)
            info = np.iinfo(out_dtype)
            if entries.min() < info.min or entries.max() > info.max:
                raise ExecutionError(f"{self.where}: table entries {int(entries.min())}..{int(entries.max())} "
                                     f"do not fit out_type {out_type.name}")
            out = golden.lut8(x.copy(), entries.astype(out_dtype))
        else:
            table = self._tensor(Buffer.LUT, "table_addr", cmd.table_addr, ((1 << cmd.table_log2) + 1,),
                                 LUT_ENTRY_DTYPE)
            out, outside = golden.lut16(x.copy(), table.copy(), index_shift=cmd.index_shift,
                                        input_min=cmd.input_min, out_dtype=out_dtype, qmin=cmd.qmin,
                                        qmax=cmd.qmax, return_clipped=True)
            self.stats.lut_out_of_range[self.label] = outside
        # The LUT unit streams in one pass: a destination overlapping the source must not run ahead of it.
        overlaps = (cmd.src_buf == Buffer.OUT and cmd.src_addr < cmd.dst_addr + out.nbytes
                    and cmd.dst_addr < cmd.src_addr + x.nbytes)
        if overlaps and (cmd.dst_addr > cmd.src_addr or out.itemsize > x.itemsize):
            raise ExecutionError(f"{self.where}: field dst_addr = {cmd.dst_addr:#x} overlaps the source at "
                                 f"{cmd.src_addr:#x} ahead of it or with wider elements (docs/rtl-lut.md)")
        self._write(Buffer.OUT, "dst_addr", cmd.dst_addr, out)

    def _pool(self, cmd: Command) -> None:
        dtype = DType(cmd.dtype)
        x = self._tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.in_h, cmd.in_w, cmd.channels), dtype)
        nchw = x.transpose(2, 0, 1)[None]
        geometry = dict(stride=(cmd.stride_h, cmd.stride_w),
                        padding=(cmd.pad_top, cmd.pad_left, cmd.pad_bottom, cmd.pad_right))
        if cmd.mode == PoolMode.MAX:
            if cmd.count_include_pad or cmd.zero_point:
                raise ExecutionError(f"{self.where}: MAX takes no count_include_pad/zero_point (they must be 0)")
            out = golden.max_pool2d(nchw, (cmd.k_h, cmd.k_w), dilation=(cmd.dilation_h, cmd.dilation_w), **geometry)
        else:
            if (cmd.dilation_h, cmd.dilation_w) != (1, 1):
                raise ExecutionError(f"{self.where}: AVG pooling has no dilation (dilation_h/w must be 1)")
            out = golden.avg_pool2d(nchw, (cmd.k_h, cmd.k_w), count_include_pad=bool(cmd.count_include_pad),
                                    x_zero_point=cmd.zero_point, rounding=Rounding(cmd.rounding).name.lower(),
                                    **geometry)
        self._write(Buffer.OUT, "dst_addr", cmd.dst_addr, out[0].transpose(1, 2, 0))

    def _eltwise(self, cmd: Command) -> None:
        op = EltwiseOp(cmd.op)
        a = self._tensor(Buffer(cmd.a_buf), "a_addr", cmd.a_addr, (cmd.count,), DType(cmd.a_type))
        common = dict(out_zero_point=cmd.out_zero_point, qmin=cmd.qmin, qmax=cmd.qmax,
                      out_dtype=DTYPE_NUMPY[DType(cmd.out_type)],
                      rounding=Rounding(cmd.rounding).name.lower())
        unused = {EltwiseOp.MUL: ("b_multiplier", "b_shift"),
                  EltwiseOp.RESCALE: ("b_buf", "b_addr", "b_type", "b_zero_point", "b_multiplier", "b_shift")}
        for name in unused.get(op, ()):
            if cmd.args[name]:
                raise ExecutionError(f"{self.where}: field {name} = {cmd.args[name]} must be 0 for {op.name}")
        if op == EltwiseOp.RESCALE:
            out = golden.concat([a.copy()], axis=0, zero_points=[cmd.a_zero_point], multipliers=[cmd.a_multiplier],
                                shifts=[cmd.a_shift], **common)
            saturated = None
        else:
            b = self._tensor(Buffer(cmd.b_buf), "b_addr", cmd.b_addr, (cmd.count,), DType(cmd.b_type))
            scale = (dict(multiplier=cmd.a_multiplier, shift=cmd.a_shift) if op == EltwiseOp.MUL else
                     dict(multiplier=(cmd.a_multiplier, cmd.b_multiplier), shift=(cmd.a_shift, cmd.b_shift)))
            out, saturated = golden.eltwise(a.copy(), b.copy(), op.name.lower(), a_zero_point=cmd.a_zero_point,
                                            b_zero_point=cmd.b_zero_point, return_saturated=True, **scale, **common)
        self._write(Buffer.OUT, "dst_addr", cmd.dst_addr, out)
        if saturated is not None:
            self.stats.saturations[self.label] = saturated

    def _wdec(self, cmd: Command) -> None:
        stream = self._span(DRAM, "dram_addr", cmd.dram_addr, cmd.length, None).tobytes()
        shape = (cmd.out_c, cmd.in_c, cmd.k_h, cmd.k_w)
        weights = decode_weight_stream(stream, shape)
        self._write(Buffer.WEIGHT, "wgt_addr", cmd.wgt_addr, weights.transpose(0, 2, 3, 1), byte_address=True)
        self.stats.bytes_moved["DRAM->WDEC"] += cmd.length
        self.stats.bytes_moved["WDEC->WEIGHT"] += weights.size

    def _finish(self, cmd: Command) -> None:
        """Nothing to execute: run() schedules FINISH last and checks that the tokens balance."""

    HANDLERS = {Opcode.LOAD: _load, Opcode.STORE: _store, Opcode.CONV: _conv, Opcode.REQUANT: _requant,
                Opcode.LUT: _lut, Opcode.POOL: _pool, Opcode.ELTWISE: _eltwise, Opcode.WDEC: _wdec,
                Opcode.FINISH: _finish}


def _wrap(values: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap to ``bits`` bits, as a register of that width does."""
    half = 1 << (bits - 1)
    return (values + half) % (1 << bits) - half


def decode_weight_stream(stream: bytes, shape: tuple[int, int, int, int]) -> np.ndarray:
    """WDEC's decoder: one layer's bare nnc() stream of an [O, I, KH, KW] weight tensor in the npu profile
    (what rtl/wdec.py executes; the full chapter-10 syntax is refused as the hardware refuses it) to int8
    levels; levels outside int8 are an error, never a wrap."""
    from aipu import codec

    try:
        levels = codec.decode_profile_stream(stream, shape).levels
    except codec.CodecError as exc:
        raise ValueError(f"weight stream does not decode in the npu profile: {exc}") from None
    info8 = np.iinfo(np.int8)
    if levels.size and (levels.min() < info8.min or levels.max() > info8.max):
        raise ValueError(f"decoded weight levels {levels.min()}..{levels.max()} do not fit int8")
    return levels.astype(np.int8)


def _space_name(space) -> str:
    return space if isinstance(space, str) else space.name


def run(program: Program, memory: Memory, *, seed: int | None = None, check_hazards: bool = True) -> Result:
    """Execute ``program`` on a copy of ``memory``.

    seed None: whenever several units are ready, the lowest-numbered unit runs (a fixed schedule);
    otherwise a ``random.Random(seed)`` picks any ready unit (a legal reordering)."""
    program.validate()
    executor = _Executor(program, memory, check_hazards)
    config = program.config
    rng = random.Random(seed) if seed is not None else None
    queues = program.queues
    heads = {unit: 0 for unit in Unit}
    tokens: dict[tuple[Unit, Unit], deque] = {(a, b): deque() for a in Unit for b in Unit if a != b}
    unit_clock = {unit: (0,) * len(Unit) for unit in Unit}
    trace: list[tuple[Unit, int]] = []

    def remaining(unit: Unit) -> bool:
        return heads[unit] < len(queues[unit])

    def blocker(unit: Unit) -> str | None:
        """Why the unit's head command cannot run now (None: it can)."""
        command = queues[unit][heads[unit]]
        for source in sorted(command.pop):
            if not tokens[(source, unit)]:
                return f"waits for a token {source.name}->{unit.name} (0 available)"
        for target in sorted(command.push):
            if len(tokens[(unit, target)]) >= config.queues.token_depth:
                return (f"cannot push {unit.name}->{target.name}: token queue full "
                        f"({config.queues.token_depth}/{config.queues.token_depth})")
        if command.opcode == Opcode.FINISH:
            busy = [u.name for u in Unit if u != unit and remaining(u)]
            if busy:
                return f"FINISH waits for queues {', '.join(busy)} to drain"
        return None

    units = tuple(Unit)
    left = sum(len(queues[unit]) for unit in units)
    while left:
        if rng is None:       # the fixed schedule needs only the first ready unit
            ready = next(([unit] for unit in units if remaining(unit) and blocker(unit) is None), [])
        else:
            ready = [unit for unit in units if remaining(unit) and blocker(unit) is None]
        if not ready:
            stuck = "; ".join(f"{u.name}[{heads[u]}] {queues[u][heads[u]].opcode.name} {blocker(u)}"
                              for u in Unit if remaining(u))
            raise DeadlockError(f"deadlock after {len(trace)} commands: {stuck}")
        unit = rng.choice(ready) if rng is not None else ready[0]
        index = heads[unit]
        command = queues[unit][index]
        clock = list(unit_clock[unit])
        for source in sorted(command.pop):
            clock = [max(a, b) for a, b in zip(clock, tokens[(source, unit)].popleft())]
        clock[unit] += 1
        clock = tuple(clock)
        executor.execute(unit, index, command, clock)
        unit_clock[unit] = clock
        for target in command.push:
            tokens[(unit, target)].append(clock)
        heads[unit] += 1
        left -= 1
        trace.append((unit, index))
        if command.opcode == Opcode.FINISH:
            left = {f"{a.name}->{b.name}": len(q) for (a, b), q in tokens.items() if q}
            if left:
                raise ExecutionError(f"{unit.name}[{index}] FINISH: unbalanced tokens left in queues {left}")
    return Result(executor.memory, executor.stats, trace, executor.writes)
