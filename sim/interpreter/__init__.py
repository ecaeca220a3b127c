"""Functional interpreter: executes a command program on a memory image, unit queue by unit queue.

Each unit runs its queue in order; a command may run once every token it pops is available and every
token queue it pushes into has room (``queues.token_depth``). Which ready unit runs next is chosen by a
schedule (in unit order, or at random from a seed): a correctly synchronised program gives the same
memory for every schedule. The interpreter detects deadlock (no unit can run), unbalanced tokens at
FINISH, out-of-bounds accesses, and -- with vector clocks -- data races: two accesses to overlapping
bytes, at least one a write, by commands that no token chain orders.
The result logs every write (command, space, byte range or strided pattern, element type) so that a byte
another executor gets wrong can be traced to the command that should have written it.

Everything that does not depend on the data -- field combinations, bounds, store patterns, races, deadlock --
is checked once per program by :func:`prepare`; a :class:`PreparedProgram` then runs on any number of memory
images doing only the data work, which is what makes many runs of one program (accuracy over a data set,
randomised tests) cost little more than the golden model on the same layers.

All arithmetic is delegated to the golden model (:mod:`aipu.sim.golden`); this module only moves bytes. The
compiled run loop (run_loop.py) does the same through tiles.py: the golden kernels on one tile, and for dense
convs the golden GEMM path's windows-times-weights in one exact float32 BLAS call.
"""
from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aipu.sim import golden
from aipu.sim.interpreter import run_loop
from aipu.sim.interpreter.tiles import takes_conv
from aipu.sim.machine.arch import (ACC_BITS, ACC_DTYPE, BUFFER_UNIT_BYTES, DTYPE_BYTES, DTYPE_NUMPY, LUT8_ENTRIES,
                                LUT_ENTRY_DTYPE, PARAM_DTYPE, SOFTMAX_TABLE_DTYPE, Buffer, DType, HardwareConfig,
                                bit_range)
from aipu.sim.machine.isa import EltwiseOp, LutMode, Opcode, PoolMode, RequantMode, Rounding, Unit
from aipu.sim.machine.errors import DeadlockError, ExecutionError, HazardError
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.machine.ordering import Access, RaceDetector, region_bytes, schedule, writes_a_byte_twice

DRAM = "DRAM"
__all__ = ["DRAM", "DeadlockError", "ExecutionError", "HazardError", "PreparedProgram", "Result", "Stats", "Write",
           "decode_weight_stream", "prepare", "run"]
_ACC_MIN, _ACC_MAX = bit_range(ACC_BITS, signed=True)


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
        return region_bytes(self.low, self.high, self.pattern)


@dataclass
class Result:
    memory: Memory
    stats: Stats
    trace: list[tuple[Unit, int]]          # (unit, index in its queue) in execution order
    writes: list[Write] = field(default_factory=list)   # every write, in execution order


@dataclass(frozen=True, slots=True)
class _Step:
    """One command made ready to run: its checks done, its accesses race-checked, its writes listed."""

    unit: Unit
    index: int
    where: str                                   # "CONV[3] CONV": how errors name the command
    execute: Callable[[_State], None] | None     # the data work (None: FINISH has none)
    writes: tuple[Write, ...]
    traffic: tuple[tuple[str, bool, int], ...] = ()   # (space, written, bytes) of every access, for the reports
    row: np.ndarray | None = None                # the same data work as a row of the compiled run loop


class _State:
    """The memory of one run, as the steps see it."""

    __slots__ = ("spaces", "acc", "_exact_acc", "wrapped", "any_wrapped", "stats", "loop_spaces", "records")

    def __init__(self, memory: Memory, stats: Stats) -> None:
        self.spaces = {DRAM: memory.dram, **memory.buffers}
        self.loop_spaces = (*map(memory.buffers.__getitem__, _BUFFERS), memory.dram)   # as run_loop takes them
        self.records = memory.buffers[Buffer.PARAM].view(PARAM_DTYPE)
        self.acc = memory.buffers[Buffer.ACC].view(ACC_DTYPE)
        # The wrapping ACC register (D6) holds the exact sum of every entry whose sum fits it; where a sum did
        # not fit, ``wrapped`` marks the entry and ``exact_acc`` holds its exact sum, checked where it is
        # consumed. Preloaded ACC content is exact.
        self._exact_acc: np.ndarray | None = None      # made when a sum first does not fit (most runs: never)
        self.wrapped = np.zeros(self.acc.shape, np.bool_)
        self.any_wrapped = False       # whether an entry was ever marked: the run loop reads no marks until then
        self.stats = stats

    @property
    def exact_acc(self) -> np.ndarray:
        if self._exact_acc is None:
            self._exact_acc = np.zeros(self.acc.shape, np.int64)
        return self._exact_acc

    def accumulate(self, first: int, sums: np.ndarray, add: bool) -> None:
        """ACC entries [first, first + sums.size) = sums (+ what they hold, when ``add``), in sums' shape.
        Sums of type int32 fit the register by type; wider ones are checked."""
        entries = slice(first, first + sums.size)
        if add:
            prior = np.where(self.wrapped[entries], self.exact_acc[entries], self.acc[entries])
            sums = prior.reshape(sums.shape) + sums
        self.acc[entries].reshape(sums.shape)[...] = sums     # int64 -> int32 keeps the low 32 bits: it wraps
        fits = sums.dtype.itemsize <= ACC_DTYPE.itemsize or (_ACC_MIN <= sums.min() and sums.max() <= _ACC_MAX)
        if not fits:
            self.exact_acc[entries].reshape(sums.shape)[...] = sums
            self.any_wrapped = True
        self.wrapped[entries] = not fits

    def unfit_sum(self, first: int, last: int) -> int | None:
        """The exact sum of largest magnitude among ACC entries [first, last) that does not fit the register."""
        marked = np.flatnonzero(self.wrapped[first:last])
        if not marked.size:
            return None
        exact = self.exact_acc[first + marked]
        unfit = exact[(exact < _ACC_MIN) | (exact > _ACC_MAX)]
        return int(unfit[np.argmax(np.abs(unfit))]) if unfit.size else None


_BUFFERS = tuple(Buffer)
_View = tuple   # (space, first byte, end byte, numpy type, shape): a typed view of one run's memory


def _view(state: _State, view: _View) -> np.ndarray:
    space, start, stop, dtype, shape = view
    return state.spaces[space][start:stop].view(dtype).reshape(shape)


def _strided_view(state: _State, pattern: tuple) -> np.ndarray:
    """DRAM through a DMA pattern (base, shape [y][x][run bytes], byte strides)."""
    base, shape, strides = pattern
    return np.ndarray(shape, np.uint8, state.spaces[DRAM], base, strides)


class _Preparer:
    """Turns each command into a :class:`_Step`, once per program: every check that does not depend on the data
    (field combinations, bounds, store patterns, races between accesses), and the counts the run reports
    that do not depend on it either (MACs, bytes moved). What remains for the run is the data work."""

    def __init__(self, config: HardwareConfig, dram_bytes: int, check_hazards: bool) -> None:
        self.sizes = {DRAM: dram_bytes, **{buffer: config.buffer(buffer).bytes for buffer in Buffer}}
        self.races = RaceDetector() if check_hazards else None
        self.stats = Stats()
        self.unit, self.index, self.clock = Unit.LOAD, 0, ()
        self.label = self.where = ""
        self.writes: list[Write] = []
        self.traffic: list[tuple[str, bool, int]] = []
        self.row: np.ndarray | None = None

    def step(self, unit: Unit, index: int, command: Command, clock: tuple[int, ...]) -> _Step:
        self.unit, self.index, self.clock, self.writes, self.traffic, self.row = unit, index, clock, [], [], None
        self.label = f"{unit.name}[{index}]"
        self.where = f"{self.label} {command.opcode.name}"
        try:
            execute = self.HANDLERS[command.opcode](self, command)
        except ExecutionError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            raise ExecutionError(f"{self.where}: {exc}") from exc
        self.stats.commands[unit.name] += 1
        return _Step(unit, index, self.where, execute, tuple(self.writes), tuple(self.traffic), self.row)

    # --- accesses: every byte a command touches is declared through these ---------------------------
    def _span(self, space, field_name: str, address: int, nbytes: int, written: np.dtype | None,
              byte_address: bool = False) -> tuple[int, int]:
        """Bounds-check and race-check a contiguous byte range; return its (first, end) byte. Addresses count
        the buffer's units (int32 entries, parameter records) unless ``byte_address`` (DMA) says bytes.
        ``written``: the element type of a write, None for a read."""
        start = address * (1 if space == DRAM or byte_address else BUFFER_UNIT_BYTES[space])
        if address < 0 or start + nbytes > self.sizes[space]:
            raise ExecutionError(f"{self.where}: field {field_name} = {address:#x}: access of {nbytes} bytes "
                                 f"ends at byte {start + nbytes:#x}, beyond {_space_name(space)} "
                                 f"({self.sizes[space]:#x} bytes)")
        self._record(space, start, start + nbytes, written)
        return start, start + nbytes

    def _record(self, space, low: int, high: int, written: np.dtype | None,
                pattern: tuple[int, ...] | None = None) -> None:
        """Log a write (for tracing a mismatch to its command) and race-check any access."""
        if high <= low:
            return
        self.traffic.append((_space_name(space), written is not None,
                             high - low if pattern is None else pattern[1] * pattern[3] * pattern[5]))
        if written is not None:
            self.writes.append(Write(self.unit, self.index, _space_name(space), low, high, written, pattern))
        if self.races is not None:
            self.races.access(Access(_space_name(space), low, high, written is not None, self.unit, self.index,
                                      self.clock, pattern))

    def _tensor(self, space, field_name: str, address: int, shape, dtype, written: bool = False) -> _View:
        """``shape`` elements of ``dtype`` at ``address``, read (or written)."""
        np_dtype = DTYPE_NUMPY[dtype] if isinstance(dtype, DType) else np.dtype(dtype)
        start, stop = self._span(space, field_name, address, math.prod(shape) * np_dtype.itemsize,
                                 np_dtype if written else None)
        return space, start, stop, np_dtype, tuple(shape)

    def _strided_dram(self, field_name: str, address: int, cmd: Command, write: bool) -> tuple:
        """A DMA pattern [y][x][run bytes] over DRAM (strides are unsigned), bounds- and race-checked."""
        elem = DType(cmd.elem_type)
        run = cmd.run * DTYPE_BYTES[elem]
        pattern = (address, cmd.y_size, cmd.dram_y_stride, cmd.x_size, cmd.dram_x_stride, run)
        end = address + (cmd.y_size - 1) * cmd.dram_y_stride + (cmd.x_size - 1) * cmd.dram_x_stride + run
        if end > self.sizes[DRAM]:
            raise ExecutionError(f"{self.where}: field {field_name} = {address:#x}: strided access reaches byte "
                                 f"{end - 1:#x}, beyond DRAM ({self.sizes[DRAM]:#x} bytes)")
        if write and writes_a_byte_twice(pattern):
            raise ExecutionError(f"{self.where}: dram_y_stride = {cmd.dram_y_stride}, dram_x_stride = "
                                 f"{cmd.dram_x_stride}: the store pattern writes some bytes twice")
        self._record(DRAM, address, end, DTYPE_NUMPY[elem] if write else None, pattern)
        return address, (cmd.y_size, cmd.x_size, run), (cmd.dram_y_stride, cmd.dram_x_stride, 1)

    # --- commands: each returns the run-time part -----------------------------------------------------
    def _load(self, cmd: Command):
        buffer, elem = Buffer(cmd.buffer), DType(cmd.elem_type)
        source = self._strided_dram("dram_addr", cmd.dram_addr, cmd, write=False)
        rows, cols = cmd.y_size + cmd.pad_top + cmd.pad_bottom, cmd.x_size + cmd.pad_left + cmd.pad_right
        info = np.iinfo(DTYPE_NUMPY[elem])
        if not info.min <= cmd.pad_value <= info.max:
            raise ExecutionError(f"{self.where}: field pad_value = {cmd.pad_value}: outside {elem.name} range")
        run_bytes = source[1][2]
        start, stop = self._span(buffer, "sram_addr", cmd.sram_addr, rows * cols * run_bytes, DTYPE_NUMPY[elem],
                                 byte_address=True)
        self.stats.bytes_moved[f"DRAM->{buffer.name}"] += cmd.y_size * cmd.x_size * run_bytes
        top, left, bottom, right, pad_value = cmd.pad_top, cmd.pad_left, cmd.pad_bottom, cmd.pad_right, cmd.pad_value
        inside = (slice(top, top + cmd.y_size), slice(left, left + cmd.x_size))
        padded = top or left or bottom or right
        self.row = run_loop.load_row(int(buffer), start, rows, cols, DTYPE_BYTES[elem], top, left, source, pad_value)

        def execute(state: _State) -> None:
            target = state.spaces[buffer][start:stop]
            if padded:       # the border, element by element, then the data inside it
                elements = target.view(DTYPE_NUMPY[elem]).reshape(rows, cols, cmd.run)
                elements[:top] = elements[rows - bottom:] = pad_value
                elements[inside[0], :left] = elements[inside[0], cols - right:] = pad_value
            target.reshape(rows, cols, run_bytes)[inside] = _strided_view(state, source)
        return execute

    def _store(self, cmd: Command):
        run_bytes = cmd.run * DTYPE_BYTES[DType(cmd.elem_type)]
        source = self._tensor(Buffer.OUT, "sram_addr", cmd.sram_addr, (cmd.y_size, cmd.x_size, run_bytes), np.uint8)
        target = self._strided_dram("dram_addr", cmd.dram_addr, cmd, write=True)
        self.stats.bytes_moved["OUT->DRAM"] += cmd.y_size * cmd.x_size * run_bytes
        self.row = run_loop.store_row(source[1], target)

        def execute(state: _State) -> None:
            _strided_view(state, target)[...] = _view(state, source)
        return execute

    def _conv(self, cmd: Command):
        if cmd.in_c % cmd.groups or cmd.out_c % cmd.groups:
            raise ExecutionError(f"{self.where}: field groups = {cmd.groups} must divide in_c = {cmd.in_c} "
                                 f"and out_c = {cmd.out_c}")
        group_c = cmd.in_c // cmd.groups
        in_dtype = DTYPE_NUMPY[DType(cmd.in_type)]
        x = self._tensor(Buffer.ACT, "in_addr", cmd.in_addr, (cmd.in_h, cmd.in_w, cmd.in_c), in_dtype)
        w = self._tensor(Buffer.WEIGHT, "wgt_addr", cmd.wgt_addr, (cmd.out_c, cmd.k_h, cmd.k_w, group_c), np.int8)
        geometry = golden.conv_geometry((1, cmd.in_c, cmd.in_h, cmd.in_w), in_dtype,
                                        (cmd.out_c, group_c, cmd.k_h, cmd.k_w), np.int8,
                                        x_zero_point=cmd.in_zero_point, w_zero_point=cmd.w_zero_point,
                                        stride=(cmd.stride_h, cmd.stride_w), dilation=(cmd.dilation_h, cmd.dilation_w),
                                        groups=cmd.groups)
        shape = (*geometry.out_hw, cmd.out_c)          # [out_h][out_w][out_c]
        entries = math.prod(shape)
        if cmd.accumulate:
            self._tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (entries,), ACC_DTYPE)
        self._tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (entries,), ACC_DTYPE, written=True)
        self.stats.macs += entries * group_c * cmd.k_h * cmd.k_w
        first, accumulate = cmd.acc_addr, cmd.accumulate
        if takes_conv(cmd.in_c, cmd.out_c, cmd.k_h, cmd.k_w, cmd.groups):
            self.row = run_loop.conv_row(x[1], x[4], DType(cmd.in_type), w[1], w[4], cmd.w_zero_point,
                                         cmd.in_zero_point,
                                         geometry.stride, geometry.padding, geometry.dilation, geometry.out_hw,
                                         first, bool(accumulate))

        def execute(state: _State) -> None:
            sums = golden.conv_sums_channels_last(_view(state, x)[None], _view(state, w), geometry, wide=True)[0]
            state.accumulate(first, sums, accumulate)
        return execute

    def _requant(self, cmd: Command):
        acc = self._tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (cmd.pixels, cmd.channels), ACC_DTYPE)
        params = self._tensor(Buffer.PARAM, "param_index", cmd.param_index, (cmd.channels,), PARAM_DTYPE)
        float32_scale = cmd.mode == RequantMode.FLOAT32
        if float32_scale and cmd.leaky:
            raise ExecutionError(f"{self.where}: field leaky = 1 is not supported in FLOAT32 mode")
        out_dtype = DTYPE_NUMPY[DType(cmd.out_type)]
        out = self._tensor(Buffer.OUT, "out_addr", cmd.out_addr, (cmd.pixels, cmd.channels), out_dtype, written=True)
        first, last = cmd.acc_addr, cmd.acc_addr + cmd.pixels * cmd.channels
        stage = golden.requant_stage(float32_scale=float32_scale, leaky=bool(cmd.leaky),
                                     rounding=Rounding(cmd.rounding).name.lower(), out_zero_point=cmd.out_zero_point,
                                     qmin=cmd.qmin, qmax=cmd.qmax, out_dtype=out_dtype)
        where, label = self.where, self.label
        self.row = run_loop.requant_row(first, cmd.pixels, cmd.channels, cmd.param_index, out[1], DType(cmd.out_type),
                                        stage)

        def execute(state: _State) -> None:
            worst = state.unfit_sum(first, last)
            if worst is not None:
                raise ExecutionError(f"{where}: accumulator sum {worst} does not fit int{ACC_BITS}; the register "
                                     f"wrapped (docs/arithmetic.md D6: the compiler must prove the bound)")
            records = _view(state, params)
            reserved = records["reserved"]
            if np.count_nonzero(reserved):
                raise ExecutionError(f"{where}: parameter record {cmd.param_index + int(np.argmax(reserved != 0))} "
                                     "has non-zero reserved bits")
            _view(state, out)[...], state.stats.saturations[label] = golden.requantize_records(
                _view(state, acc), records, stage)
        return execute

    def _lut(self, cmd: Command):
        in_type, out_type = DType(cmd.in_type), DType(cmd.out_type)
        x = self._tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.count,), in_type)
        out_dtype = DTYPE_NUMPY[out_type]
        direct = cmd.mode == LutMode.DIRECT8
        if direct:
            if cmd.table_log2 or cmd.index_shift or cmd.input_min or cmd.qmin or cmd.qmax:
                raise ExecutionError(f"{self.where}: DIRECT8 takes no table_log2/index_shift/input_min/qmin/qmax "
                                     "(they must be 0)")
            table = self._tensor(Buffer.LUT, "table_addr", cmd.table_addr, (LUT8_ENTRIES,), LUT_ENTRY_DTYPE)
        else:
            table = self._tensor(Buffer.LUT, "table_addr", cmd.table_addr, ((1 << cmd.table_log2) + 1,),
                                 LUT_ENTRY_DTYPE)
        # The LUT unit streams in one pass: a destination overlapping the source must not run ahead of it.
        out_bytes, in_bytes = cmd.count * out_dtype.itemsize, cmd.count * DTYPE_BYTES[in_type]
        overlaps = (cmd.src_buf == Buffer.OUT and cmd.src_addr < cmd.dst_addr + out_bytes
                    and cmd.dst_addr < cmd.src_addr + in_bytes)
        if overlaps and (cmd.dst_addr > cmd.src_addr or out_bytes > in_bytes):
            raise ExecutionError(f"{self.where}: field dst_addr = {cmd.dst_addr:#x} overlaps the source at "
                                 f"{cmd.src_addr:#x} ahead of it or with wider elements (docs/rtl-lut.md)")
        out = self._tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.count,), out_dtype, written=True)
        info = np.iinfo(out_dtype)
        where, label = self.where, self.label

        def execute(state: _State) -> None:
            values = _view(state, x).copy()
            entries = _view(state, table)
            if direct:
                if entries.min() < info.min or entries.max() > info.max:
                    raise ExecutionError(f"{where}: table entries {int(entries.min())}..{int(entries.max())} "
                                         f"do not fit out_type {out_type.name}")
                _view(state, out)[...] = golden.lut8(values, entries.astype(out_dtype))
            else:
                _view(state, out)[...], state.stats.lut_out_of_range[label] = golden.lut16(
                    values, entries.copy(), index_shift=cmd.index_shift, input_min=cmd.input_min, out_dtype=out_dtype,
                    qmin=cmd.qmin, qmax=cmd.qmax, return_clipped=True)
        return execute

    def _softmax(self, cmd: Command):
        in_dtype, out_dtype = DTYPE_NUMPY[DType(cmd.in_type)], DTYPE_NUMPY[DType(cmd.out_type)]
        x = self._tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.rows, cmd.length), in_dtype)
        table = self._tensor(Buffer.LUT, "table_addr", cmd.table_addr, (LUT8_ENTRIES,), SOFTMAX_TABLE_DTYPE)
        out = self._tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.rows, cmd.length), out_dtype, written=True)
        if cmd.src_buf == Buffer.OUT and x[1] < out[2] and out[1] < x[2]:    # a row is read whole before written
            raise ExecutionError(f"{self.where}: field dst_addr = {cmd.dst_addr:#x} overlaps the source at "
                                 f"{cmd.src_addr:#x}")
        where = self.where
        stage = dict(multiplier=cmd.multiplier, shift=cmd.shift, out_zero_point=cmd.out_zero_point, qmin=cmd.qmin,
                     qmax=cmd.qmax, out_dtype=out_dtype)
        golden.softmax(np.zeros((1, 1), in_dtype), np.ones(LUT8_ENTRIES, SOFTMAX_TABLE_DTYPE), **stage)  # the fields

        def execute(state: _State) -> None:
            try:
                _view(state, out)[...] = golden.softmax(_view(state, x), _view(state, table), **stage)
            except ValueError as exc:        # the table's entries are data: checked when the command runs
                raise ExecutionError(f"{where}: {exc}") from exc
        return execute

    def _pool(self, cmd: Command):
        dtype = DTYPE_NUMPY[DType(cmd.dtype)]
        x = self._tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.in_h, cmd.in_w, cmd.channels), dtype)
        geometry = dict(kernel=(cmd.k_h, cmd.k_w), stride=(cmd.stride_h, cmd.stride_w),
                        padding=(cmd.pad_top, cmd.pad_left, cmd.pad_bottom, cmd.pad_right))
        if cmd.mode == PoolMode.MAX:
            if cmd.count_include_pad or cmd.zero_point:
                raise ExecutionError(f"{self.where}: MAX takes no count_include_pad/zero_point (they must be 0)")
            pool = functools.partial(golden.max_pool2d, dilation=(cmd.dilation_h, cmd.dilation_w), **geometry)
        else:
            if (cmd.dilation_h, cmd.dilation_w) != (1, 1):
                raise ExecutionError(f"{self.where}: AVG pooling has no dilation (dilation_h/w must be 1)")
            pool = functools.partial(golden.avg_pool2d, count_include_pad=bool(cmd.count_include_pad),
                                     x_zero_point=cmd.zero_point, rounding=Rounding(cmd.rounding).name.lower(),
                                     **geometry)
        # The geometry's checks and the output shape, from the golden model on zeros of the input's shape.
        shape = pool(np.zeros((1, cmd.channels, cmd.in_h, cmd.in_w), dtype)).shape[1:]
        out = self._tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (shape[1], shape[2], shape[0]), dtype, written=True)

        def execute(state: _State) -> None:
            _view(state, out)[...] = pool(_view(state, x).transpose(2, 0, 1)[None])[0].transpose(1, 2, 0)
        return execute

    def _eltwise(self, cmd: Command):
        op = EltwiseOp(cmd.op)
        a = self._tensor(Buffer(cmd.a_buf), "a_addr", cmd.a_addr, (cmd.count,), DType(cmd.a_type))
        common = dict(out_zero_point=cmd.out_zero_point, qmin=cmd.qmin, qmax=cmd.qmax,
                      out_dtype=DTYPE_NUMPY[DType(cmd.out_type)], rounding=Rounding(cmd.rounding).name.lower())
        unused = {EltwiseOp.MUL: ("b_multiplier", "b_shift"),
                  EltwiseOp.RESCALE: ("b_buf", "b_addr", "b_type", "b_zero_point", "b_multiplier", "b_shift")}
        for name in unused.get(op, ()):
            if cmd.args[name]:
                raise ExecutionError(f"{self.where}: field {name} = {cmd.args[name]} must be 0 for {op.name}")
        label = self.label
        if op == EltwiseOp.RESCALE:
            out = self._tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.count,), common["out_dtype"], written=True)

            def execute(state: _State) -> None:
                _view(state, out)[...] = golden.concat(
                    [_view(state, a).copy()], axis=0, zero_points=[cmd.a_zero_point], multipliers=[cmd.a_multiplier],
                    shifts=[cmd.a_shift], **common)
            return execute
        b = self._tensor(Buffer(cmd.b_buf), "b_addr", cmd.b_addr, (cmd.count,), DType(cmd.b_type))
        out = self._tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.count,), common["out_dtype"], written=True)
        scale = (dict(multiplier=cmd.a_multiplier, shift=cmd.a_shift) if op == EltwiseOp.MUL else
                 dict(multiplier=(cmd.a_multiplier, cmd.b_multiplier), shift=(cmd.a_shift, cmd.b_shift)))

        def execute(state: _State) -> None:
            _view(state, out)[...], state.stats.saturations[label] = golden.eltwise(
                _view(state, a).copy(), _view(state, b).copy(), op.name.lower(), a_zero_point=cmd.a_zero_point,
                b_zero_point=cmd.b_zero_point, return_saturated=True, **scale, **common)
        return execute

    def _wdec(self, cmd: Command):
        start, stop = self._span(DRAM, "dram_addr", cmd.dram_addr, cmd.length, None)
        shape = (cmd.out_c, cmd.in_c, cmd.k_h, cmd.k_w)
        out = self._tensor(Buffer.WEIGHT, "wgt_addr", cmd.wgt_addr, (cmd.out_c, cmd.k_h, cmd.k_w, cmd.in_c), np.int8,
                           written=True)
        self.stats.bytes_moved["DRAM->WDEC"] += cmd.length
        self.stats.bytes_moved["WDEC->WEIGHT"] += math.prod(shape)

        def execute(state: _State) -> None:
            stream = state.spaces[DRAM][start:stop].tobytes()
            _view(state, out)[...] = decode_weight_stream(stream, shape).transpose(0, 2, 3, 1)
        return execute

    def _finish(self, cmd: Command) -> None:
        """Nothing to execute: the schedule puts FINISH last and checks that the tokens balance."""

    HANDLERS = {Opcode.LOAD: _load, Opcode.STORE: _store, Opcode.CONV: _conv, Opcode.REQUANT: _requant,
                Opcode.LUT: _lut, Opcode.POOL: _pool, Opcode.ELTWISE: _eltwise, Opcode.WDEC: _wdec,
                Opcode.FINISH: _finish, Opcode.SOFTMAX: _softmax}


DECODED_STREAMS_KEPT = 256     # weight tiles whose decoded levels the interpreter keeps


@functools.lru_cache(maxsize=DECODED_STREAMS_KEPT)
def decode_weight_stream(stream: bytes, shape: tuple[int, int, int, int]) -> np.ndarray:
    """WDEC's decoder: one layer's bare nnc() stream of an [O, I, KH, KW] weight tensor in the npu profile
    (what rtl/wdec.py executes; the full chapter-10 syntax is refused as the hardware refuses it) to int8
    levels (read-only); levels outside int8 are an error, never a wrap. The last DECODED_STREAMS_KEPT results
    are kept: a network run on many inputs decodes each of its weight tiles once."""
    from aipu import codec

    try:
        levels = codec.decode_profile_compiled(stream, shape).levels
    except codec.CodecError as exc:
        raise ValueError(f"weight stream does not decode in the npu profile: {exc}") from None
    info8 = np.iinfo(np.int8)
    if levels.size and (levels.min() < info8.min or levels.max() > info8.max):
        raise ValueError(f"decoded weight levels {levels.min()}..{levels.max()} do not fit int8")
    levels = levels.astype(np.int8)
    levels.flags.writeable = False
    return levels


def _space_name(space) -> str:
    return space if isinstance(space, str) else space.name


@dataclass(frozen=True)
class PreparedProgram:
    """A program checked once for a DRAM size -- fields, bounds, races, deadlock -- and ready to run on any
    number of memory images: only the data work is left for each run."""

    config: HardwareConfig
    dram_bytes: int
    queues: dict[Unit, tuple[Command, ...]]
    steps: dict[tuple[Unit, int], _Step]
    order: tuple[tuple[Unit, int], ...]          # the fixed schedule
    stats: Stats                                 # the counts that do not depend on the data
    loop: _LoopPlan = field(init=False, repr=False, compare=False)   # the fixed schedule's compiled runs

    def __post_init__(self) -> None:
        object.__setattr__(self, "loop", _LoopPlan([self.steps[key] for key in self.order]))

    def run(self, memory: Memory, *, seed: int | None = None, compiled: bool = True,
            in_place: bool = False) -> Result:
        """Execute on a copy of ``memory``, or on ``memory`` itself if ``in_place`` (for an image built for this
        one run: the copy of a whole image, 1.2 MB for a MobileNet layer, costs as much as a quarter of the run;
        a run that raises leaves such an image as far as it got).
        seed None: the fixed schedule (lowest-numbered ready unit first); otherwise a ``random.Random(seed)`` picks
        any ready unit (a legal reordering). ``compiled``: run consecutive LOAD/STORE/CONV/REQUANT commands in the
        compiled loop (run_loop.py); False runs every command's Python step, the straightforward form the tests
        compare it with."""
        if memory.config != self.config:
            raise ValueError(f"memory image is for config {memory.config.config_hash()}, "
                             f"the program for {self.config.config_hash()}")
        if memory.dram.size != self.dram_bytes:
            raise ValueError(f"memory image has {memory.dram.size} bytes of DRAM, the program was prepared for "
                             f"{self.dram_bytes}")
        order = self.order
        if seed is not None:
            order, _, failure = schedule(self.queues, self.config.queues.token_depth, random.Random(seed))
            if failure is not None:      # cannot happen after the fixed schedule passed (see ordering.schedule)
                raise failure
        if not in_place:
            memory = memory.copy()
        stats = Stats(self.stats.macs, Counter(self.stats.bytes_moved), Counter(self.stats.commands))
        state = _State(memory, stats)
        plan = self.loop if order is self.order else _LoopPlan([self.steps[key] for key in order])
        steps = plan.steps
        position = 0
        while position < len(steps):
            end = plan.run_end[position] if compiled else position
            if end > position:
                position = plan.run(position, state)      # the run's end, or the command it stopped at
                if position == end:
                    continue
            _execute(steps[position], state)
            position += 1
        return Result(memory, stats, list(order), list(plan.writes))


def _execute(step: _Step, state: _State) -> None:
    """A command's Python step, its errors named after the command."""
    if step.execute is None:
        return
    try:
        step.execute(state)
    except ExecutionError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise ExecutionError(f"{step.where}: {exc}") from exc


class _LoopPlan:
    """The steps of one schedule, their writes, the steps as rows of the compiled run loop (run_loop.py; a step
    without a row is all zeros), and where each run of consecutive rows ends."""

    def __init__(self, steps: list[_Step]) -> None:
        self.steps = steps
        self.writes = tuple(write for step in steps for write in step.writes)     # in execution order
        self.table = np.zeros((len(steps), run_loop.ROW_WIDTH), np.int64)
        for position, step in enumerate(steps):
            if step.row is not None:
                self.table[position] = step.row
        has_row = self.table[:, 0] != 0
        # run_end[p]: the end of the run of rows that p starts or lies in (p itself where p has no row)
        self.run_end = [0] * len(steps)
        end = len(steps)
        for position in reversed(range(len(steps))):
            if not has_row[position]:
                end = position
            self.run_end[position] = end
        self.requants = np.flatnonzero(self.table[:, 0] == run_loop.REQUANT)
        self.requant_labels = [steps[position].where.split()[0] for position in self.requants]

    def run(self, position: int, state: _State) -> int:
        """Run rows from ``position`` to the end of their run, or to the row the loop stopped at; returns where it
        ended. Each REQUANT's saturation count goes into the stats in execution order."""
        end = self.run_end[position]
        saturated = np.empty(end - position, np.int64)
        stop = run_loop.run_rows(self.table, position, end, state.loop_spaces, state.records, state.wrapped,
                                 state.any_wrapped, saturated)
        first, last = np.searchsorted(self.requants, (position, stop))
        counts = saturated[self.requants[first:last] - position].tolist()
        state.stats.saturations.update(zip(self.requant_labels[first:last], counts))
        return stop


def prepare(program: Program, dram_bytes: int, *, check_hazards: bool = True) -> PreparedProgram:
    """Check ``program`` for memory images of ``dram_bytes`` of DRAM and make it ready to run.

    Errors come in the order the fixed schedule meets them, as the run would have met them."""
    program.validate()
    queues = {unit: tuple(program.queues[unit]) for unit in Unit}
    order, clocks, failure = schedule(queues, program.config.queues.token_depth, None)
    preparer = _Preparer(program.config, dram_bytes, check_hazards)
    steps = {(unit, index): preparer.step(unit, index, queues[unit][index], clock)
             for (unit, index), clock in zip(order, clocks)}
    if failure is not None:
        raise failure
    return PreparedProgram(program.config, dram_bytes, queues, steps, tuple(order), preparer.stats)


def run(program: Program | PreparedProgram, memory: Memory, *, seed: int | None = None,
        check_hazards: bool = True, in_place: bool = False) -> Result:
    """Execute ``program`` on a copy of ``memory``, or on ``memory`` itself if ``in_place`` (a
    :class:`PreparedProgram` skips the checks it has had).

    seed None: whenever several units are ready, the lowest-numbered unit runs (a fixed schedule);
    otherwise a ``random.Random(seed)`` picks any ready unit (a legal reordering)."""
    if isinstance(program, Program):
        if memory.config != program.config:
            raise ValueError(f"memory image is for config {memory.config.config_hash()}, "
                             f"the program for {program.config.config_hash()}")
        program = prepare(program, memory.dram.size, check_hazards=check_hazards)
    return program.run(memory, seed=seed, in_place=in_place)
