"""The golden arithmetic on one NPU tile, as numba functions the compiled run loop calls: a CONV command's sums
and a REQUANT command's outputs on operands in the layout the NPU's buffers hold them.

The interpreter's compiled run loop (run_loop.py) calls these so that a program of many small commands
does not return to Python per command. They use the kernels :func:`conv_sums_channels_last` and
:func:`requantize_records` use (sim/golden/fast/grouped_conv.py, channels_last_conv.py, requant.py), or compute
as those do (a dense conv's GEMM in exact float32 chunks, the native requantizer on channels-last tiles).
Where a case is not theirs -- a grouped conv with wide groups or partial sums float32 would not hold
exactly, a dense sum outside int32, a parameter record field outside its range -- they return a refusal,
never a different answer, and the caller takes the general path, which computes it or raises the error
that names the problem.
tests/sim/test_tiles.py checks both against those functions.

These and the run loop call kernels of other modules and freeze constants of sim/machine/arch.py, so they
cache in a directory keyed by all those sources (:data:`jit`), not by their own file alone as numba does.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from aipu.codec.compiled.jit_cache import SourceKeyedJit

from aipu.sim.golden.fast.channels_last_conv import (SUM_LINES, grouped_channels_last, repeated_group_weights,
                                                  window_weights)
from aipu.sim.golden.fast.grouped_conv import grouped_conv_taps
from aipu.sim.golden.fast.requant import (channels_last_blocks, float32_requant, float32_requant_wide,
                                              native_requant, native_requant_channels_last)
from aipu.sim.golden.fast.conv import _DIRECT_MAX_GROUP_CHANNELS, _FLOAT32_EXACT, takes_channels_last
from aipu.sim.machine.arch import ACC_DTYPE, BIAS_BITS, MULTIPLIER_MAX, SHIFT_MAX, bit_range

# The decorator of the tile kernels and of run_loop.py: numba.njit(cache=True, nogil=True), its cache
# keyed by every source they are built from.
jit = SourceKeyedJit(Path(__file__).resolve().parent.parent, ("golden/*.py", "golden/fast/*.py", "machine/*.py",
                                                            "interpreter/run_loop.py", "interpreter/tiles.py"))
_BIAS_MIN, _BIAS_MAX = bit_range(BIAS_BITS, signed=True)
ACC_MIN, ACC_MAX = int(np.iinfo(ACC_DTYPE).min), int(np.iinfo(ACC_DTYPE).max)   # what an ACC entry holds
_U = np.uint64
# The rows of record_operands' fields
_BIAS, _MULTIPLIER, _SHIFT, _NEGATIVE_MULTIPLIER, _NEGATIVE_SHIFT = range(5)
_BLOCK = 16           # _transpose's block side (8-24 measured alike; 64 was 6x slower on 256 x 128)
_takes_channels_last = jit(takes_channels_last)


def takes_conv(in_c: int, out_c: int, kh: int, kw: int, groups: int) -> bool:
    """Whether :func:`conv_tile` is the way to compute convs of these shapes: every dense conv (one float32
    BLAS call per chunk of the reduction that float32 holds exactly), and the grouped and depthwise convs of
    the tap kernels (up to _DIRECT_MAX_GROUP_CHANNELS per group; wider groups are left to
    conv_sums_channels_last's batched GEMM)."""
    return groups == 1 or in_c // groups <= _DIRECT_MAX_GROUP_CHANNELS


@jit
def weight_operands(w, w_zero_point, groups):
    """The multiplier operands of int8 weights w [K, KH, KW, C/G] of a conv of ``groups`` groups, float32 w -
    zero point (exact: sim/golden/fast/conv.py) arranged for the kernel that takes them: [KH*KW*C, K] for a dense conv
    (the GEMM's operand, whose row ranges are its reduction chunks; transposed as bytes, then converted: 57.5 ->
    28.5 us on 32 x 3 x 3 x 256 weights), the channels-last kernel's repeated weights where it takes the conv
    (repeated_group_weights), else [K, C/G*KH*KW] (the tap kernel's); the channels-last window kernel's
    (window_weights; no lines where it cannot take the conv); and their largest magnitude. A layer's tiles
    share their weights: the caller makes these once for all of them."""
    k, kh, kw, group_c = w.shape
    taps, depth = kh * kw, w.size // max(k, 1)
    values = w.ravel()
    largest = np.int32(0)
    for e in range(_U(values.size)):
        largest = max(largest, abs(np.int32(values[e]) - np.int32(w_zero_point)))
    windowed = np.empty((0, k), np.float32)
    if groups == 1:
        by_depth = np.empty(values.size, np.int8)
        _transpose(values, k, depth, by_depth)
        arranged = _minus_zero_point(by_depth, w_zero_point).reshape((depth, k))
        return arranged, windowed, np.float32(largest)
    flat = _minus_zero_point(values, w_zero_point)
    if _takes_channels_last(groups, group_c):
        by_tap = flat.reshape((k, taps, group_c))
        arranged = repeated_group_weights(by_tap, groups).reshape((k // groups, -1))
        windowed = window_weights(by_tap, groups)
    else:                                    # per output channel [taps, C/G] -> [C/G, taps]
        arranged = np.empty((k, depth), np.float32)
        for o in range(_U(k)):
            _transpose(flat[o * _U(depth):(o + _U(1)) * _U(depth)], taps, group_c, arranged[o])
    return arranged, windowed, np.float32(largest)


@jit
def _minus_zero_point(values, zero_point):
    """float32 values - zero point, flat (a loop of its own: it vectorises alone)."""
    flat = np.empty(values.size, np.float32)
    offset = np.float32(zero_point)
    for e in range(_U(values.size)):
        flat[e] = np.float32(values[e]) - offset
    return flat


@jit
def conv_tile(x, x_zero_point, w, ws_arranged, ws_windowed, weight_max, stride_h, stride_w, pad_top, pad_left,
              dilation_h, dilation_w, out):
    """out[y, x', k] = the conv sums of channels-last x [H, W, C] (int8/uint8) and the weights w [K, KH, KW, C/G]
    (only their shape read here: their operands come as ``ws_arranged`` and ``ws_windowed`` for the kernels, of
    largest magnitude ``weight_max``, :func:`weight_operands`), groups G = C / (C/G), padding bottom/right implied
    by out's shape [OH, OW, K]
    (int32). Returns False, with ``out`` untouched, where a grouped conv's partial sums do not all fit one
    exact float32 pass (conv_sums_channels_last then takes its GEMM path), or a dense conv's sums leave int32."""
    height, width, channels = x.shape
    k, kh, kw, group_c = w.shape
    oh, ow = out.shape[0], out.shape[1]
    groups = channels // group_c
    info = np.iinfo(x.dtype)
    x_max = max(np.int64(info.max) - x_zero_point, x_zero_point - np.int64(info.min))
    if groups == 1:
        return _gemm_conv(x, x_zero_point, x_max, ws_arranged, weight_max, kh, kw, stride_h, stride_w, pad_top,
                          pad_left, dilation_h, dilation_w, out)
    if group_c > _DIRECT_MAX_GROUP_CHANNELS or group_c * kh * kw * x_max * weight_max > _FLOAT32_EXACT:
        return False      # a wide group, or partial sums one float32 pass would not hold exactly
    if _takes_channels_last(groups, group_c):
        grouped_channels_last(x.reshape((1, height, width, channels)), x_zero_point,
                              ws_arranged.reshape((k // groups, group_c * kh * kw + SUM_LINES, -1)), ws_windowed, kh,
                              kw, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w,
                              out.reshape((1, oh, ow, k)))
        return True
    planes = np.empty((1, channels, height, width), x.dtype)     # the tap kernel's NCHW operands
    _transpose(x.ravel(), height * width, channels, planes.ravel())
    sums = np.empty((1, k, oh, ow), np.int32)
    grouped_conv_taps(planes, x_zero_point, ws_arranged, kh, kw, stride_h, stride_w, pad_top, pad_left, dilation_h,
                      dilation_w, sums)
    _transpose(sums.ravel(), k, oh * ow, out.ravel())
    return True


@jit
def _gemm_conv(x, x_zero_point, x_bound, ws_by_depth, weight_max, kh, kw, stride_h, stride_w, pad_top, pad_left,
               dilation_h, dilation_w, out):
    """conv_tile's dense case as conv_sums_channels_last computes it: the windows' rows [OH*OW, KH*KW*C] times
    the weights [KH*KW*C, K], one float32 BLAS call per chunk of the reduction in which every partial sum
    is an exact float32 integer (sim/golden/fast/conv.py), the chunks' sums added in int64. A chunk is a run of
    whole taps, or a slice of one tap's channels where a tap alone is too long. ``x_bound``: the largest
    |x - zero point| x's type allows; the tile's own largest is looked up only where that bound needs
    chunks. False (``out`` untouched) where a sum leaves int32."""
    channels = x.shape[2]
    k = ws_by_depth.shape[1]
    oh, ow = out.shape[0], out.shape[1]
    taps = kh * kw
    zero_point = np.float32(x_zero_point)
    x_max = np.float64(x_bound)
    if x_max * weight_max * taps * channels > _FLOAT32_EXACT:
        x_max = 0.0                                        # the tile's largest operand (padding taps are 0)
        values = x.ravel()
        for e in range(_U(values.size)):
            x_max = max(x_max, abs(np.float64(values[e]) - x_zero_point))
    per_pass = taps * channels if x_max * weight_max == 0 else int(_FLOAT32_EXACT // (x_max * weight_max))
    taps_per_chunk = max(1, per_pass // channels)
    slice_c = min(channels, per_pass)
    single = taps_per_chunk >= taps and slice_c == channels
    totals = np.zeros((0, k), np.int64) if single else np.zeros((oh * ow, k), np.int64)
    for t0 in range(0, taps, taps_per_chunk):
        t1 = min(taps, t0 + taps_per_chunk)
        for c0 in range(0, channels, slice_c):
            c1 = min(channels, c0 + slice_c)
            rows = np.zeros((oh * ow, (t1 - t0) * (c1 - c0)), np.float32)     # taps in the padding stay 0
            _window_rows(x, zero_point, t0, t1, c0, c1, kw, stride_h, stride_w, pad_top, pad_left, dilation_h,
                         dilation_w, ow, rows)
            sums = np.dot(rows, ws_by_depth[t0 * channels + c0:(t1 - 1) * channels + c1])
            if single:
                target, flat = out.ravel(), sums.ravel()
                for e in range(_U(flat.size)):
                    target[e] = np.int32(flat[e])
                return True
            totals += sums.astype(np.int64)
    target, flat = out.ravel(), totals.ravel()
    for e in range(_U(flat.size)):
        if flat[e] < ACC_MIN or flat[e] > ACC_MAX:
            return False
    for e in range(_U(flat.size)):
        target[e] = np.int32(flat[e])
    return True


@jit
def _window_rows(x, zero_point, t0, t1, c0, c1, kw, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w, ow,
                 rows):
    """rows [OH*OW, (t1 - t0) * (c1 - c0)] = x [H, W, C] - zero point at taps [t0, t1) and channels [c0, c1) of
    each output pixel's window (taps in the padding left as they are). Where dilation_w is 1, the chunk's taps
    of one kernel row inside x are one contiguous run of x, copied as one (a 3-channel stem's copy per tap was
    3 values long; a chunk that slices the channels has one tap). Flat unsigned offsets: a numba view per
    tap costs more than such a copy."""
    height, width, channels = x.shape
    source, target = x.ravel(), rows.ravel()
    lanes = c1 - c0
    depth = _U((t1 - t0) * lanes)
    for y in range(rows.shape[0] // ow):
        for q in range(ow):
            first = _U(y * ow + q) * depth
            t = t0
            while t < t1:
                i, j = t // kw, t % kw
                line = y * stride_h + i * dilation_h - pad_top
                taps = min(kw - j, t1 - t) if dilation_w == 1 else 1     # this kernel row's taps in the chunk
                column = q * stride_w + j * dilation_w - pad_left
                inside_from, inside_to = max(column, 0), min(column + taps, width)
                if 0 <= line < height and inside_from < inside_to:
                    at = _U(((line * width + inside_from) * channels) + c0)
                    to = first + _U((t - t0 + inside_from - column) * lanes)
                    for e in range(_U((inside_to - inside_from) * lanes)):
                        target[to + e] = np.float32(source[at + e]) - zero_point
                t += taps


@jit
def record_operands(records, float32_scale, leaky, zero_point):
    """The per-channel operands of parameter records (arch.PARAM_DTYPE) for a stage of these fields and output
    zero point: ``fields`` int64 [5, channels] (bias, multiplier, shift, negative multiplier and shift), the
    scale (float32), the first three as native_requant_channels_last takes them (channels_last_blocks: an
    array and its zero point), and whether every field the stage uses is in its range and every reserved field
    is 0 (requantize_records and the interpreter's step name what is not). A layer's tiles share their records:
    the run loop makes these once for all of them. Few arrays: each one the run loop passes to a tile costs
    reference counts."""
    channels = records.shape[0]
    fields = np.empty((5, channels), np.int64)
    scale = np.empty(channels, np.float32)
    valid = True
    for c in range(channels):
        record = records[c]
        fields[_BIAS, c] = record.bias
        fields[_MULTIPLIER, c], fields[_SHIFT, c] = record.multiplier, record.shift
        fields[_NEGATIVE_MULTIPLIER, c], fields[_NEGATIVE_SHIFT, c] = record.negative_multiplier, \
            record.negative_shift
        scale[c] = record.scale
        valid &= record.reserved == 0 and _BIAS_MIN <= fields[_BIAS, c] <= _BIAS_MAX
        if float32_scale:
            valid &= 0 < scale[c] < np.inf
        else:
            valid &= fields[_MULTIPLIER, c] <= MULTIPLIER_MAX and fields[_SHIFT, c] <= SHIFT_MAX and (not leaky or (
                fields[_NEGATIVE_MULTIPLIER, c] <= MULTIPLIER_MAX and fields[_NEGATIVE_SHIFT, c] <= SHIFT_MAX))
    if valid and not (float32_scale or leaky):      # the stage native_requant_channels_last serves
        blocks, blocks_zero_point = channels_last_blocks(fields[_BIAS], fields[_MULTIPLIER], fields[_SHIFT],
                                                         zero_point)
    else:       # unused: fields out of range (refused) or of another stage need not fit its int64 offsets
        zeros = np.zeros(channels, np.int64)
        blocks, blocks_zero_point = channels_last_blocks(zeros, zeros, zeros, zero_point)
    return fields, scale, blocks, blocks_zero_point, valid


@jit
def requant_tile(acc, records, float32_scale, leaky, rounding, zero_point, qmin, qmax, out):
    """out [P, C] = the requantizer on acc int32 [P, C] with one parameter record (arch.PARAM_DTYPE) per channel,
    as :func:`requantize_records` computes it for a stage of these fields; returns the saturated count, or -1,
    with ``out`` untouched, if a record field is outside its range or a reserved one is not 0."""
    fields, scale, blocks, blocks_zero_point, valid = record_operands(records, float32_scale, leaky, zero_point)
    if not valid:
        return -1
    return requant_operands(acc, fields, scale, blocks, blocks_zero_point, float32_scale, leaky, rounding,
                            zero_point, qmin, qmax, out)


@jit
def requant_operands(acc, fields, scale, blocks, blocks_zero_point, float32_scale, leaky, rounding, zero_point, qmin,
                     qmax, out):
    """:func:`requant_tile` on the operands :func:`record_operands` made of valid records."""
    pixels, channels = acc.shape
    if not (float32_scale or leaky):
        return native_requant_channels_last(acc, blocks, blocks_zero_point, rounding, zero_point, qmin, qmax, out)
    # The other kernels take [1, C, P], their inner loop running long: [P, 1] is that already.
    transposed, results = acc.reshape((1, channels, pixels)), out.reshape((1, channels, pixels))
    if channels > 1:
        transposed, results = np.empty((1, channels, pixels), np.int32), np.empty((1, channels, pixels), out.dtype)
        _transpose(acc.ravel(), pixels, channels, transposed.ravel())
    bias = fields[_BIAS]
    if float32_scale:
        saturated = float32_requant(transposed, bias.astype(np.int32), scale, True, zero_point, qmin, qmax, results)
        if saturated < 0:
            saturated = float32_requant_wide(transposed, bias.astype(np.int32), scale, zero_point, qmin, qmax,
                                             results)
    else:       # leaky
        saturated = native_requant(transposed, bias, fields[_MULTIPLIER], fields[_SHIFT], fields[_NEGATIVE_MULTIPLIER],
                                   fields[_NEGATIVE_SHIFT], True, rounding, True, zero_point, qmin, qmax, results)
    if channels > 1:
        _transpose(results.ravel(), channels, pixels, out.ravel())
    return saturated


@jit
def _transpose(source, rows, columns, target):
    """target [columns, rows] = source [rows, columns] (flat, C order), in blocks of _BLOCK x _BLOCK that stay in
    cache (256 x 128 float32 weights: 95 -> 12 us against a row-by-row copy); bytes in target's order, which numba makes
    vectors of (2-4x faster than blocks on 32 x 2304, 144 x 784, 784 x 144 and 256 x 196 bytes; on 32-bit values
    faster on some shapes, 1.5-1.9x slower on others: 3136 x 64, 196 x 256, 12544 x 32). Unsigned indices: numba's wrap-around of negative ones costs more than the copy (a tile is a
    few thousand values)."""
    if rows == 1 or columns == 1:
        for e in range(_U(rows * columns)):
            target[e] = source[e]
        return
    if source.itemsize == 1:
        for c in range(_U(columns)):
            for r in range(_U(rows)):
                target[c * _U(rows) + r] = source[r * _U(columns) + c]
        return
    for r0 in range(0, rows, _BLOCK):
        for c0 in range(0, columns, _BLOCK):
            for r in range(_U(r0), _U(min(rows, r0 + _BLOCK))):
                for c in range(_U(c0), _U(min(columns, c0 + _BLOCK))):
                    target[c * _U(rows) + r] = source[r * _U(columns) + c]
