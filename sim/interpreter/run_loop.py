"""The interpreter's compiled run loop: consecutive LOAD, STORE, CONV and REQUANT commands of a prepared program
run in one numba call, instead of one Python call of 5-15 µs each (a depthwise layer is hundreds of small
commands, each a few µs of data work).

Each such command is a row of integers made once, when the program is prepared (:func:`load_row` and the
others): what its checked fields and addresses resolve to. :func:`run_rows` executes rows in order on the
memory of one run. It moves the bytes itself and computes through the golden model's tile kernels
(:mod:`aipu.sim.interpreter.tiles`), and keeps the ACC register's bookkeeping of the interpreter (D6: which
entries hold a sum that did not fit). Where a command is not one the loop can finish exactly as the Python
step would -- a kernel path the tile kernels refuse, an entry marked as wrapped, a sum that would not fit, a
parameter record outside its range -- it stops *before* that command changes anything and returns its
position: the interpreter runs the command's Python step, which computes it or raises the error that names
the problem, and resumes the loop after it.
"""
from __future__ import annotations

import numpy as np

from aipu.sim.golden.fast.simd import copy_bytes
from aipu.sim.interpreter.tiles import (ACC_MAX, ACC_MIN, conv_tile, jit, record_operands, requant_operands,
                                        weight_operands)
from aipu.sim.machine.arch import Buffer, DType

DRAM_SPACE = len(Buffer)       # spaces are passed as (the buffers in Buffer order..., DRAM)
ROW_WIDTH = 26
LOAD, STORE, CONV, REQUANT = 1, 2, 3, 4
_ACT, _WEIGHT, _ACC, _OUT, _PARAM = (int(Buffer.ACT), int(Buffer.WEIGHT), int(Buffer.ACC), int(Buffer.OUT),
                                    int(Buffer.PARAM))
_INT8, _UINT8 = int(DType.INT8), int(DType.UINT8)
_U = np.uint64


def _row(kind: int, *fields: int) -> np.ndarray:
    row = np.zeros(ROW_WIDTH, np.int64)
    row[0], row[1:1 + len(fields)] = kind, fields
    return row


def load_row(space: int, start: int, rows: int, cols: int, elem_bytes: int, top: int, left: int, pattern: tuple,
             pad_value: int) -> np.ndarray:
    """DRAM through ``pattern`` (base, (y, x, run bytes), (y stride, x stride, 1)) into ``rows`` x ``cols``
    elements of a buffer from byte ``start``, the data at (top, left) and ``pad_value`` around it."""
    base, (y_size, x_size, run_bytes), (y_stride, x_stride, _) = pattern
    return _row(LOAD, space, start, rows, cols, elem_bytes, top, left, pad_value, base, y_size, x_size, run_bytes,
                y_stride, x_stride)


def store_row(start: int, pattern: tuple) -> np.ndarray:
    """OUT's bytes from ``start``, [y][x][run bytes], to DRAM through ``pattern`` (in LOAD's columns)."""
    base, (y_size, x_size, run_bytes), (y_stride, x_stride, _) = pattern
    return _row(STORE, 0, start, 0, 0, 0, 0, 0, 0, base, y_size, x_size, run_bytes, y_stride, x_stride)


def conv_row(in_start: int, in_shape: tuple, in_type: DType, wgt_start: int, w_shape: tuple, w_zero_point: int,
             x_zero_point: int, stride: tuple, padding: tuple, dilation: tuple, out_hw: tuple, acc_first: int,
             accumulate: bool) -> np.ndarray:
    """ACT [H][W][C] from byte ``in_start`` convolved with WEIGHT [K][KH][KW][C/G] from ``wgt_start`` into
    ACC entries from ``acc_first`` ([OH][OW][K]), added to what they hold when ``accumulate``. Columns 6-11
    (the weights and their zero point) are what the loop's weight operands are kept by."""
    return _row(CONV, in_start, *in_shape, int(in_type), wgt_start, *w_shape, w_zero_point, x_zero_point, *stride,
                *padding, *dilation, *out_hw, acc_first, int(accumulate))


def requant_row(acc_first: int, pixels: int, channels: int, param_index: int, out_start: int, out_type: DType,
                stage) -> np.ndarray:
    """ACC entries [pixels][channels] from ``acc_first`` requantized with the PARAM records from
    ``param_index`` as ``stage`` (a golden.RequantStage) says, into OUT from byte ``out_start``."""
    return _row(REQUANT, acc_first, pixels, channels, param_index, out_start, int(out_type), stage.float32_scale,
                stage.leaky, stage.rounding, stage.out_zero_point, stage.qmin, stage.qmax)


@jit
def run_rows(table, first, last, spaces, records, wrapped, any_wrapped, saturated):
    """Execute rows [first, last) of ``table`` on ``spaces`` (uint8 arrays: the buffers, then DRAM), with the
    PARAM buffer as ``records`` and the ACC entries marked as wrapped (none where not ``any_wrapped``: the
    marks are then not read, the loop itself marks none); a REQUANT's saturated count goes to
    ``saturated`` at its row's offset from ``first``. Returns ``last``, or the row at which it stopped (see
    the module docstring)."""
    acc = spaces[_ACC].view(np.int32)
    # The weight operands of the last CONV, kept while no LOAD writes WEIGHT: a layer's tiles share them.
    weights_key = np.full(7, -1, np.int64)        # wgt_addr, K, KH, KW, C/G, zero point, groups
    weights, arranged, windowed = np.empty((0, 0, 0, 0), np.int8), np.empty((0, 0), np.float32), \
        np.empty((0, 0), np.float32)
    largest = np.float32(0.0)
    # The operands of the last REQUANT's parameter records, kept while no LOAD writes PARAM.
    records_key = np.full(5, -1, np.int64)         # param_index, channels, float32 scale, leaky, zero point
    parameters = record_operands(records[:0], False, False, 0)
    for position in range(first, last):
        row = table[position]
        kind = row[0]
        if kind == LOAD:
            _load(row, spaces[row[1]], spaces[DRAM_SPACE])
            if row[1] == _WEIGHT:
                weights_key[0] = -1
            elif row[1] == _PARAM:
                records_key[0] = -1
        elif kind == STORE:
            _store(row, spaces[_OUT], spaces[DRAM_SPACE])
        elif kind == CONV:
            wgt_start, k, kh, kw, group_c = row[6], row[7], row[8], row[9], row[10]
            groups = row[4] // group_c
            if not ((weights_key[:6] == row[6:12]).all() and weights_key[6] == groups):
                weights = spaces[_WEIGHT][wgt_start:wgt_start + k * kh * kw * group_c].view(np.int8).reshape(
                    (k, kh, kw, group_c))
                arranged, windowed, largest = weight_operands(weights, row[11], groups)
                weights_key[:6] = row[6:12]
                weights_key[6] = groups
            if not _conv(row, spaces[_ACT], weights, arranged, windowed, largest, acc, wrapped, any_wrapped):
                return position
        elif kind == REQUANT:
            param_index, channels = row[4], row[3]
            if not (records_key[0] == param_index and records_key[1] == channels and records_key[2] == row[7]
                    and records_key[3] == row[8] and records_key[4] == row[10]):
                parameters = record_operands(records[param_index:param_index + channels], row[7] != 0, row[8] != 0,
                                             row[10])
                records_key[0], records_key[1], records_key[2], records_key[3] = param_index, channels, row[7], row[8]
                records_key[4] = row[10]
            count = _requant(row, acc, parameters, spaces[_OUT], wrapped, any_wrapped)
            if count < 0:
                return position
            saturated[position - first] = count
        else:
            return position
    return last


@jit
def _load(row, target, dram):
    start, rows, cols, elem_bytes, top, left, pad_value = row[2], row[3], row[4], row[5], row[6], row[7], row[8]
    base, y_size, x_size, run_bytes, y_stride, x_stride = row[9], row[10], row[11], row[12], row[13], row[14]
    if rows != y_size or cols != x_size:      # padded: the pad value around the data
        row_bytes = cols * run_bytes
        _fill(target, start, top * row_bytes, elem_bytes, pad_value)
        _fill(target, start + (top + y_size) * row_bytes, (rows - top - y_size) * row_bytes, elem_bytes, pad_value)
        right = (cols - left - x_size) * run_bytes
        for y in range(top, top + y_size):
            _fill(target, start + y * row_bytes, left * run_bytes, elem_bytes, pad_value)
            _fill(target, start + (y + 1) * row_bytes - right, right, elem_bytes, pad_value)
    for y in range(y_size):
        _copy_runs(dram, base + y * y_stride, x_stride, target, start + ((top + y) * cols + left) * run_bytes,
                   run_bytes, x_size, run_bytes)


@jit
def _fill(target, start, nbytes, elem_bytes, value):
    """``nbytes`` bytes from ``start`` set to ``value``, an element of ``elem_bytes`` (1 or 2, little-endian)."""
    at = _U(start)
    if elem_bytes == 1:
        low = np.uint8(value & 0xFF)
        for b in range(_U(nbytes)):
            target[at + b] = low
        return
    pair = target[start:start + nbytes].view(np.uint16)
    element = np.uint16(value & 0xFFFF)
    for e in range(_U(nbytes // 2)):
        pair[e] = element


@jit
def _store(row, out, dram):
    start, base, y_size, x_size, run_bytes, y_stride, x_stride = (row[2], row[9], row[10], row[11], row[12],
                                                                  row[13], row[14])
    for y in range(y_size):
        _copy_runs(out, start + y * x_size * run_bytes, run_bytes, dram, base + y * y_stride, x_stride, x_size,
                   run_bytes)


@jit
def _copy_runs(source, source_start, source_step, target, target_start, target_step, runs, run_bytes):
    """``runs`` runs of ``run_bytes`` bytes, each ``source_step`` / ``target_step`` bytes after the previous one
    (source and target distinct arrays). Unsigned indices (no wrap-around checks); runs of 16 bytes or more
    as whole vectors (16-byte runs 144 bytes apart, a 16-channel tile of 144 channels: 1.6-2.6 -> 0.75 us
    for 1682 runs; 128-byte runs 1.3x faster, measured), shorter ones a loop per run length: numpy-style
    slice copies cost about 100 ns each, and a channel of a tile is a 1-byte run per pixel."""
    source_at, target_at = _U(source_start), _U(target_start)
    if source_step == run_bytes and target_step == run_bytes:      # one contiguous run
        for b in range(_U(runs * run_bytes)):
            target[target_at + b] = source[source_at + b]
    elif run_bytes == 1:
        for r in range(_U(runs)):
            target[target_at + r * _U(target_step)] = source[source_at + r * _U(source_step)]
    elif run_bytes >= 16:     # whole vectors, the last one ending at the run's end (overlapping: a copy again)
        chunk = 64 if run_bytes >= 64 else 16
        for r in range(_U(runs)):
            from_at, to_at = source_at + r * _U(source_step), target_at + r * _U(target_step)
            for first in range(0, run_bytes, chunk):
                at = _U(min(first, run_bytes - chunk))
                if chunk == 64:
                    copy_bytes(target, to_at + at, source, from_at + at, 64)
                else:
                    copy_bytes(target, to_at + at, source, from_at + at, 16)
    else:
        for r in range(_U(runs)):
            from_at, to_at = source_at + r * _U(source_step), target_at + r * _U(target_step)
            for b in range(_U(run_bytes)):
                target[to_at + b] = source[from_at + b]


@jit
def _conv(row, act, weights, arranged, windowed, largest, acc, wrapped, any_wrapped):
    in_start, height, width, channels, in_type = row[1], row[2], row[3], row[4], row[5]
    x_zero_point, k = row[12], row[7]
    stride_h, stride_w, pad_top, pad_left = row[13], row[14], row[15], row[16]
    dilation_h, dilation_w, oh, ow, first, accumulate = row[19], row[20], row[21], row[22], row[23], row[24]
    x = act[in_start:in_start + height * width * channels]
    entries = _U(oh * ow * k)
    held, marks = acc[first:first + entries], wrapped[first:first + entries]
    # Without accumulate the sums go straight into ACC: conv_tile leaves its output alone when it refuses.
    sums = np.empty((oh, ow, k), np.int32) if accumulate else held.reshape((oh, ow, k))
    operands = (weights, arranged, windowed, largest)
    if in_type == _INT8:
        done = conv_tile(x.view(np.int8).reshape((height, width, channels)), x_zero_point, *operands, stride_h,
                         stride_w, pad_top, pad_left, dilation_h, dilation_w, sums)
    else:
        done = conv_tile(x.reshape((height, width, channels)), x_zero_point, *operands, stride_h, stride_w, pad_top,
                         pad_left, dilation_h, dilation_w, sums)
    if not done:
        return False
    if accumulate:
        flat = sums.ravel()
        refused = False
        for e in range(entries):      # no early exit: the loop vectorises
            total = np.int64(held[e]) + flat[e]
            refused |= marks[e] | (total < ACC_MIN) | (total > ACC_MAX)
        if refused:
            return False
        for e in range(entries):
            held[e] += flat[e]
    elif any_wrapped:
        marks[:] = False
    return True


@jit
def _requant(row, acc, parameters, out, wrapped, any_wrapped):
    first, pixels, channels, out_type = row[1], row[2], row[3], row[6]
    out_start, float32_scale, leaky, rounding = row[5], row[7] != 0, row[8] != 0, row[9]
    zero_point, qmin, qmax = row[10], row[11], row[12]
    entries = pixels * channels
    marked = np.uint8(0)
    if any_wrapped:
        marks = wrapped[first:first + entries].view(np.uint8)
        for e in range(_U(entries)):      # no early exit: the loop vectorises (entries are rarely marked)
            marked |= marks[e]
    fields, scale, blocks, blocks_zero_point, valid = parameters
    if marked or not valid:
        return -1
    tile = acc[first:first + entries].reshape((pixels, channels))
    if out_type == _INT8:
        results = out[out_start:out_start + entries].view(np.int8).reshape((pixels, channels))
        return requant_operands(tile, fields, scale, blocks, blocks_zero_point, float32_scale, leaky, rounding,
                                zero_point, qmin, qmax, results)
    if out_type == _UINT8:
        return requant_operands(tile, fields, scale, blocks, blocks_zero_point, float32_scale, leaky, rounding,
                                zero_point, qmin, qmax, out[out_start:out_start + entries].reshape((pixels, channels)))
    results = out[out_start:out_start + 2 * entries].view(np.int16).reshape((pixels, channels))
    return requant_operands(tile, fields, scale, blocks, blocks_zero_point, float32_scale, leaky, rounding, zero_point,
                            qmin, qmax, results)
