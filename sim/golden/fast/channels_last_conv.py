"""numba kernel of a grouped/depthwise conv on channels-last operands, as the NPU's buffers hold a tile (chosen by
fast/conv.py and the interpreter's tiles; the NCHW kernels are in grouped_conv.py, whose unsigned index
convention and aligned buffers this module shares).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from aipu.sim.golden.fast.grouped_conv import _U, _aligned_empty, _aligned_zeros
from aipu.sim.golden.fast.simd import LANES, load_bytes, load_floats, multiply_add_rotated, store_int32
from aipu.sim.golden.fast.conv import _FLOAT32_EXACT


@numba.njit(inline="always", fastmath=True, error_model="numpy")
def _five_taps(plane, weights, e, s0, s1, s2, s3, s4, w0, w1, w2, w3, w4):
    """Five taps' products at run position ``e`` (plane runs from s0..s4, repeated weights from w0..w4; an
    integer plane is converted as it is read)."""
    return (np.float32(plane[s0 + e]) * weights[w0 + e] + np.float32(plane[s1 + e]) * weights[w1 + e]
            + np.float32(plane[s2 + e]) * weights[w2 + e] + np.float32(plane[s3 + e]) * weights[w3 + e]
            + np.float32(plane[s4 + e]) * weights[w4 + e])


@numba.njit(inline="always", fastmath=True, error_model="numpy")
def _nine_taps(plane, weights, e, s0, s1, s2, s3, s4, s5, s6, s7, s8, w0, w1, w2, w3, w4, w5, w6, w7, w8):
    """Nine taps' products at run position ``e`` (as :func:`_five_taps`)."""
    return (_five_taps(plane, weights, e, s0, s1, s2, s3, s4, w0, w1, w2, w3, w4)
            + np.float32(plane[s5 + e]) * weights[w5 + e] + np.float32(plane[s6 + e]) * weights[w6 + e]
            + np.float32(plane[s7 + e]) * weights[w7 + e] + np.float32(plane[s8 + e]) * weights[w8 + e])


def _deinterleaver(factor):
    """A function that converts ``factor`` interleaved channels: plane[c*plane_size + into + q*lanes + g] =
    flat_x[source + q*pixel_step + g*factor + c] - zero point for the channels c of every group g of ``columns``
    pixels. A group's channels are one loop, which with ``factor`` a constant LLVM reads as interleaved vectors
    (a strided loop per channel ran scalar); a function of its own, since inlined into grouped_channels_last it
    slowed the depthwise tiles."""
    @numba.njit(nogil=True, error_model="numpy")
    def deinterleave(flat_x, source, pixel_step, columns, plane, into, lanes, plane_size, zero_point):
        for q in range(_U(columns)):
            pixel, at = source + q * pixel_step, into + q * lanes
            for g in range(lanes):
                for c in range(_U(factor)):
                    plane[c * plane_size + at + g] = np.float32(flat_x[pixel + g * _U(factor) + c]) - zero_point
    return deinterleave


_DEINTERLEAVE_2, _DEINTERLEAVE_4, _DEINTERLEAVE_8 = (_deinterleaver(factor) for factor in (2, 4, 8))


def _interleaver(factor):
    """A function that writes ``factor`` rows of a run's sums into every ``factor``-th output: out[at + p*factor
    + o] = rows[o*run + p]. With ``factor`` a constant LLVM stores them as interleaved vectors; one row at a
    time, a strided loop, ran scalar."""
    @numba.njit(nogil=True, error_model="numpy")
    def interleave(rows, run, out, at):
        for p in range(run):
            for o in range(_U(factor)):
                out[at + p * _U(factor) + o] = rows[o * run + p]
    return interleave


_INTERLEAVE_2, _INTERLEAVE_4, _INTERLEAVE_8 = (_interleaver(factor) for factor in (2, 4, 8))


@numba.njit(nogil=True, error_model="numpy")
def _interleave(rows, run, per_group, out, at):
    """out[at + p*per_group + o] = rows[o*run + p]: each output's row of sums into its channel of every pixel."""
    if per_group == 2:
        _INTERLEAVE_2(rows, run, out, at)
    elif per_group == 4:
        _INTERLEAVE_4(rows, run, out, at)
    elif per_group == 8:
        _INTERLEAVE_8(rows, run, out, at)
    else:
        for p in range(run):
            for o in range(_U(per_group)):
                out[at + p * _U(per_group) + o] = rows[o * run + p]


_REPEAT_FLOATS = 256     # a virtual tap's repeated weights span about this many floats
SUM_LINES = 2            # after an output's virtual taps: their weights' sum and their magnitudes' sum


@numba.njit(cache=True, nogil=True, error_model="numpy")
def repeated_group_weights(ws, groups):
    """:func:`grouped_channels_last`'s weight operand from ws float32 [K, KH*KW, C/G] (weights minus their zero
    point, in w's layout): for output o of every group and virtual tap v = c*KH*KW + t, the ``groups``
    weights ws[g*Kg + o, t, c] repeated over whole pixels to about _REPEAT_FLOATS floats, then SUM_LINES
    lines of the same length: per lane, the sum of o's virtual taps' weights and of their magnitudes (exact
    integers in float32 up to 65793 taps), [Kg, C/G*KH*KW + SUM_LINES, m*G]. A layer's tiles share it: made
    once, not per tile."""
    k, taps, group_c = ws.shape
    per_group = k // groups
    copies = max(1, _REPEAT_FLOATS // max(groups, 1))
    virtual = group_c * taps
    repeated = _aligned_zeros(per_group * (virtual + SUM_LINES) * copies * groups, np.float32).reshape(
        (per_group, virtual + SUM_LINES, copies * groups))
    # Each line's first pixel (its ``groups`` entries) and the sums over it, then copies of that pixel (not a
    # copy loop per value and sums over whole lines).
    for o in range(per_group):
        sums, magnitudes = repeated[o, virtual], repeated[o, virtual + 1]
        for c in range(group_c):
            for t in range(taps):
                line = repeated[o, c * taps + t]
                for g in range(groups):
                    line[g] = ws[g * per_group + o, t, c]
                for g in range(groups):     # vectorised across the groups: no chain of dependent adds
                    sums[g] += line[g]
                    magnitudes[g] += abs(line[g])
        for line in range(virtual + SUM_LINES):
            row = repeated[o, line]
            if groups >= LANES:     # whole pixels, vectorised
                for copy in range(_U(1), _U(copies)):
                    for g in range(_U(groups)):
                        row[copy * _U(groups) + g] = row[g]
            else:                   # pixels shorter than a vector: each value down the line
                for g in range(_U(groups)):
                    value = row[g]
                    for copy in range(_U(1), _U(copies)):
                        row[copy * _U(groups) + g] = value
    return repeated


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def grouped_channels_last(x, x_zero_point, repeated, windowed, kh, kw, stride_h, stride_w, pad_top, pad_left,
                          dilation_h, dilation_w, out):
    """out[n, y, x', g*Kg + o] = sum over c, i, j of ws[g*Kg + o, i*KW + j, c] * (x - zp)[n, y*sh + i*dh - pt,
    x'*sw + j*dw - pl, g*Cg + c], taps outside x being 0: a grouped conv (depthwise with Cg = 1) on
    channels-last operands, as the NPU's buffers hold a tile.

    x: int8/uint8 [N, H, W, C] C-contiguous; ``repeated``: the weights as :func:`repeated_group_weights` makes
    them, [Kg, Cg*KH*KW + SUM_LINES, m*G]; ``windowed``: as :func:`window_weights` makes them (no lines
    where the window kernel does not take the conv); out: int32 [N, OH, OW, K] C-contiguous. The padded input is
    converted once into one float32 plane per channel c of a group, its G lanes per pixel the groups' c-th
    channels, its rows split by column phase, ``plane[c, r, b, q, g] = padded[r, q*sw + b, g*Cg + c]``,
    which :func:`_tap_passes` reads. Only the planes' padding is zeroed, not the whole planes. Exact under
    the same float32 bound as :func:`grouped_conv_taps`.

    A depthwise conv of stride 1 across with no top or left padding and its windows inside x (the
    interpreter's tiles, whose LOAD wrote the padding) needs no planes: x's rows are the runs the taps read,
    converted as they are read, and the zero point comes off as -zp * (sum of the tap weights) per channel
    (repeated_group_weights' sum line), the pass's starting value. Exact where the sum of the terms'
    magnitudes stays within 2**24 (|w| * (|x| + |zp|) per tap; at most 25 * 255 * 510 for a 5x5 kernel),
    else the tile is converted (on tiles of few output rows the planes would hold every input row once per
    tile). Such a tile with a 3x3 or 5x5 depthwise
    kernel, or a 3x3 one in groups of 4 channels and 4 outputs, of at least 16 channels, at stride 1 or 2
    across (any dilation whose windows lie one or two tap columns apart), is summed 16 channels at a time by
    :func:`_window_taps`, under the same bound (its starts from window_weights' sum line); strided across,
    other such tiles are converted.
    """
    batch, height, width_in, channels = x.shape
    oh, ow, k = out.shape[1], out.shape[2], out.shape[3]
    per_group, virtual = repeated.shape[0], repeated.shape[1] - SUM_LINES
    groups = k // per_group
    group_c = channels // groups
    lanes, step = _U(groups), _U(group_c)
    taps = kh * kw
    phase_w = (ow - 1) + ((kw - 1) * dilation_w) // stride_w + 1
    rows = (oh - 1) * stride_h + (kh - 1) * dilation_h + 1
    block = _U(repeated.shape[2])
    weights = repeated.ravel()
    # Views are made once: numba counts each view's references atomically, which a view per row (x[n, y])
    # would pay for every row. Rows are offsets into the flat arrays.
    flat_x, flat_out = x.ravel(), out.ravel()
    x_row, out_image = _U(width_in * channels), _U(oh * ow * k)
    inside = (pad_top == 0 and pad_left == 0 and rows <= height            # every window inside x
              and (ow - 1) * stride_w + (kw - 1) * dilation_w < width_in)
    # Exact where every output's sum of |w| * (|x| + |zp|) over its taps is within 2**24: then any partial sum,
    # in any order, is an exact float32 integer.
    info = np.iinfo(x.dtype)
    x_bound = max(np.float64(info.max), -np.float64(info.min)) + abs(np.float64(x_zero_point))
    zero_point = np.float32(x_zero_point)
    window_lines = windowed.shape[0] == taps * group_c + SUM_LINES and windowed.shape[1] == k
    if (inside and (per_group == 1 if group_c == 1 else window_lines)
            and kh == kw and (kh == 3 or (kh == 5 and group_c == 1)) and channels >= LANES
            and stride_w // math.gcd(stride_w, dilation_w) <= 2):
        # the window kernel's weight lines: a depthwise kernel's are the repeated ones (its first K entries)
        window, apart = (weights, block) if group_c == 1 else (windowed.ravel(), _U(k))
        sums = _U(taps * group_c) * apart
        starts = _aligned_empty(_U(k), np.float32)        # output k's sum starts at -zp * its weights' sum
        inexact = False
        for o in range(_U(k)):      # no early exit: the loop vectorises
            starts[o] = window[sums + o] * -zero_point
            inexact |= np.float64(window[sums + apart + o]) * x_bound > _FLOAT32_EXACT
        if not inexact:
            for n in range(batch):
                _window_taps(flat_x, _U(n * height) * x_row, x_row, window, apart, starts, group_c, kh, stride_h,
                             stride_w, dilation_h, dilation_w, oh, ow, _U(channels), flat_out, _U(n) * out_image)
            return
    # _tap_passes' row and scratch (not made for the window kernel: a tenth of a small tile's time)
    row = _aligned_empty(block, np.float32)
    scratch = _aligned_empty(_U(ow) * lanes * _U(per_group) if per_group > 1 else _U(0), np.int32)
    if group_c == 1 and inside and stride_w == 1:
        lines = _U(virtual + SUM_LINES)
        starts = _aligned_empty(_U(per_group) * block, np.float32)    # output o's sums start at -zp * its weights' sum
        inexact = False
        for o in range(_U(per_group)):
            sums = (o * lines + _U(virtual)) * block
            for e in range(block):      # no early exit: the loop vectorises
                starts[o * block + e] = weights[sums + e] * -zero_point
                inexact |= np.float64(weights[sums + block + e]) * x_bound > _FLOAT32_EXACT
        if not inexact:
            offsets = np.empty(virtual, np.uint64)
            for i in range(kh):
                for j in range(kw):
                    offsets[i * kw + j] = _U(i * dilation_h) * x_row + _U(j * dilation_w) * lanes
            for n in range(batch):
                _tap_passes(flat_x, _U(n * height) * x_row, x_row, offsets, starts, weights, block, per_group,
                            virtual, oh, ow, k, stride_h, lanes, row, scratch, flat_out, _U(n) * out_image)
            return
    row_size = _U(stride_w * phase_w) * lanes
    plane_size = _U(rows) * row_size
    offsets = np.empty(virtual, np.uint64)          # where a virtual tap reads, from its output row's first row
    for c in range(group_c):
        for j in range(kw):
            column, phase = divmod(j * dilation_w, stride_w)
            for i in range(kh):
                offsets[c * taps + i * kw + j] = (_U(c) * plane_size + _U(i * dilation_h) * row_size
                                                  + _U(phase * phase_w + column) * lanes)
    # Per column phase b: the phase columns [first, last) that hold x, from input column first * sw + b - pl.
    first_q, last_q = np.empty(stride_w, np.int64), np.empty(stride_w, np.int64)
    for b in range(stride_w):
        first_q[b] = min(phase_w, max(0, -((b - pad_left) // stride_w)))
        last_q[b] = max(first_q[b], min(phase_w, (width_in - 1 - b + pad_left) // stride_w + 1))
    plane = _aligned_empty(step * plane_size, np.float32)
    for n in range(batch):
        for r in range(rows):
            y = r - pad_top
            for c in range(group_c):
                base = _U(c) * plane_size + _U(r) * row_size
                if y < 0 or y >= height:
                    for e in range(row_size):
                        plane[base + e] = 0.0
                    continue
                x_at = _U(n * height + y) * x_row
                for b in range(stride_w):
                    phase = base + _U(b * phase_w) * lanes
                    first, last = _U(first_q[b]) * lanes, _U(last_q[b]) * lanes
                    for e in range(first):
                        plane[phase + e] = 0.0
                    for e in range(last, _U(phase_w) * lanes):
                        plane[phase + e] = 0.0
                    if stride_w == 1 and group_c == 1:      # the row's pixels are one contiguous run
                        pixels = _U(first_q[0] - pad_left) * lanes
                        for e in range(last - first):
                            plane[phase + first + e] = np.float32(flat_x[x_at + pixels + e]) - zero_point
                        continue
                    if group_c == 2 or group_c == 4 or group_c == 8:   # channel 0's pass converts them all
                        if c == 0:
                            source = x_at + _U(first_q[b] * stride_w + b - pad_left) * _U(channels)
                            pixel_step, columns, into = _U(stride_w * channels), last_q[b] - first_q[b], phase + first
                            operands = (flat_x, source, pixel_step, columns, plane, into, lanes, plane_size,
                                        zero_point)
                            if group_c == 2:
                                _DEINTERLEAVE_2(*operands)
                            elif group_c == 4:
                                _DEINTERLEAVE_4(*operands)
                            else:
                                _DEINTERLEAVE_8(*operands)
                        continue
                    for q in range(first_q[b], last_q[b]):
                        pixel = _U(q * stride_w + b - pad_left) * _U(channels) + _U(c)
                        at = phase + _U(q) * lanes
                        for g in range(lanes):
                            plane[at + g] = np.float32(flat_x[x_at + pixel + g * step]) - zero_point
        _tap_passes(plane, _U(0), row_size, offsets, None, weights, block, per_group, virtual, oh, ow, k, stride_h,
                    lanes, row, scratch, flat_out, _U(n) * out_image)


@numba.njit(inline="always", nogil=True, error_model="numpy")
def _column3(flat_x, at, down):
    """A window column: the converted 16-channel vectors of 3 taps ``down`` apart from ``at``."""
    return load_bytes(flat_x, at), load_bytes(flat_x, at + down), load_bytes(flat_x, at + _U(2) * down)


@numba.njit(inline="always", nogil=True, error_model="numpy")
def _column5(flat_x, at, down):
    """A window column of 5 taps."""
    return (load_bytes(flat_x, at), load_bytes(flat_x, at + down), load_bytes(flat_x, at + _U(2) * down),
            load_bytes(flat_x, at + _U(3) * down), load_bytes(flat_x, at + _U(4) * down))


@numba.njit(inline="always", nogil=True, error_model="numpy")
def _sum3(column, weights, at, rows_apart, apart, group, total):
    """total + a 3-row window column's products with its taps' weights (see :func:`_window_chain`)."""
    total = multiply_add_rotated(column[0], weights, at, apart, group, total)
    total = multiply_add_rotated(column[1], weights, at + rows_apart, apart, group, total)
    return multiply_add_rotated(column[2], weights, at + _U(2) * rows_apart, apart, group, total)


@numba.njit(inline="always", nogil=True, error_model="numpy")
def _sum5(column, weights, at, rows_apart, apart, group, total):
    """total + a 5-row window column's products with its taps' weights."""
    total = multiply_add_rotated(column[0], weights, at, apart, group, total)
    total = multiply_add_rotated(column[1], weights, at + rows_apart, apart, group, total)
    total = multiply_add_rotated(column[2], weights, at + _U(2) * rows_apart, apart, group, total)
    total = multiply_add_rotated(column[3], weights, at + _U(3) * rows_apart, apart, group, total)
    return multiply_add_rotated(column[4], weights, at + _U(4) * rows_apart, apart, group, total)


def _window_chain(kernel, shift, group):
    """The sums of one chain of output pixels (see :func:`_window_taps`) with a ``kernel`` x ``kernel`` (3 or
    5) window sliding ``shift`` (1 or 2) columns a pixel, in groups of ``group`` channels, all constants:
    with the first two variables, LLVM kept the window's columns in fewer registers and spilt them. Tap t's
    weight line for rotation r is at (t * group + r) * ``apart`` (window_weights' lines, or the repeated ones
    of a depthwise kernel, where group is 1)."""
    column, column_sum = (_column3, _sum3) if kernel == 3 else (_column5, _sum5)
    kept = kernel - shift                      # columns a pixel shares with the previous one

    @numba.njit(inline="always", nogil=True, error_model="numpy")
    def chain_sums(operands):
        flat_x, at, across, down, step, weights, v, apart, start, flat_out, out_at, out_step, pixels = operands
        tap = _U(group) * apart                # from a tap's weight lines to the next tap's
        rows_apart = _U(kernel) * tap          # from a kernel row's to the next row's
        c0 = column(flat_x, at, down)
        c1 = column(flat_x, at + across, down) if kept > 1 else c0
        c2 = column(flat_x, at + _U(2) * across, down) if kept > 2 else c0
        c3 = column(flat_x, at + _U(3) * across, down) if kept > 3 else c0
        for _ in range(pixels):
            if kernel == 3:
                if kept < 2:
                    c1 = column(flat_x, at + across, down)
                c2 = column(flat_x, at + _U(2) * across, down)
                total = column_sum(c0, weights, v, rows_apart, apart, group, start)
                total = column_sum(c1, weights, v + tap, rows_apart, apart, group, total)
                total = column_sum(c2, weights, v + _U(2) * tap, rows_apart, apart, group, total)
                c0, c1 = (c1, c2) if shift == 1 else (c2, c2)
            else:
                if kept < 4:
                    c3 = column(flat_x, at + _U(3) * across, down)
                c4 = column(flat_x, at + _U(4) * across, down)
                total = column_sum(c0, weights, v, rows_apart, apart, group, start)
                total = column_sum(c1, weights, v + tap, rows_apart, apart, group, total)
                total = column_sum(c2, weights, v + _U(2) * tap, rows_apart, apart, group, total)
                total = column_sum(c3, weights, v + _U(3) * tap, rows_apart, apart, group, total)
                total = column_sum(c4, weights, v + _U(4) * tap, rows_apart, apart, group, total)
                c0, c1, c2, c3 = (c1, c2, c3, c4) if shift == 1 else (c2, c3, c4, c4)
            store_int32(flat_out, out_at, total)
            at += step
            out_at += out_step

    return chain_sums


# depthwise 3x3 and 5x5 at either shift; groups of 4 (ResNeXt's first stage) 3x3. Each is a large inlined
# loop: more of them lengthen grouped_channels_last's compile.
_DEPTHWISE_3_BY_1, _DEPTHWISE_3_BY_2, _DEPTHWISE_5_BY_1, _DEPTHWISE_5_BY_2 = (
    _window_chain(kernel, shift, 1) for kernel in (3, 5) for shift in (1, 2))
_GROUPS_OF_4_BY_1, _GROUPS_OF_4_BY_2 = (_window_chain(3, shift, 4) for shift in (1, 2))
WINDOW_GROUPS = (4,)     # channels a group (and outputs) of the grouped convs the window kernel takes


@numba.njit(cache=True, nogil=True, error_model="numpy")
def window_weights(ws, groups):
    """The window kernel's weight operand for a grouped conv (ws float32 [K, KH*KW, C/G], weights minus their
    zero point) whose groups have as many outputs as inputs, C/G in WINDOW_GROUPS: [KH*KW*C/G + SUM_LINES,
    K], line t*C/G + r entry k the weight of output k's input channel (k + r) mod C/G of its group at tap t
    (the rotation :func:`simd.multiply_add_rotated` brings that channel to lane k), then per output the sum
    of its weights and of their magnitudes. [0, K] for other convs: a depthwise kernel reads the repeated
    weights' lines (their first K entries are these), the others do not take the window kernel. Made once
    per layer, as the repeated weights."""
    k, taps, group_c = ws.shape
    if k // groups != group_c or group_c not in WINDOW_GROUPS:
        return np.empty((0, k), np.float32)
    virtual = taps * group_c
    lines = _aligned_zeros((virtual + SUM_LINES) * k, np.float32).reshape((virtual + SUM_LINES, k))
    sums, magnitudes = lines[virtual], lines[virtual + 1]
    for t in range(taps):
        for r in range(group_c):
            line = lines[t * group_c + r]
            for first in range(0, k, group_c):
                for o in range(group_c):
                    c = o + r
                    line[first + o] = ws[first + o, t, c - group_c if c >= group_c else c]
            for o in range(k):      # every channel of a group once over its rotations
                sums[o] += line[o]
                magnitudes[o] += abs(line[o])
    return lines


@numba.njit(nogil=True, error_model="numpy")
def _window_taps(flat_x, x_first, x_row, weights, apart, starts, group, kh, stride_h, stride_w, dilation_h,
                 dilation_w, oh, ow, lanes, flat_out, out_first):
    """grouped_channels_last's sums of one image of a tile (a 3x3 or 5x5 depthwise kernel, or a 3x3 one in
    groups of 4 channels and 4 outputs; its windows inside x; at least 16 channels) from x as it lies, 16
    channels at a time in explicit vectors (simd.py): the pixels of an output row whose windows lie whole tap
    columns apart form chains, and along a chain a window of converted input columns slides by ``shift``
    columns a pixel, so each input vector is converted once per output row and kernel row instead of once
    per tap (a fifth to a third of the conversions). ``weights``: the taps' weight lines, ``apart`` floats
    apart (the repeated weights' for a depthwise kernel, window_weights' for groups of 4); the zero point
    comes off as the per-channel ``starts``. The channels' last vector may overlap the one before it (a whole
    number of groups: those outputs are written twice, equal)."""
    spacing = math.gcd(stride_w, dilation_w)
    chains, shift = dilation_w // spacing, stride_w // spacing      # pixels a chain steps, columns it slides
    across, down = _U(dilation_w) * lanes, _U(dilation_h) * x_row    # from a tap to the next across, down
    step, out_step = _U(shift) * across, _U(chains) * lanes
    for first in range(_U(0), lanes, _U(LANES)):
        v = min(first, lanes - _U(LANES))
        start = load_floats(starts, v)
        for y in range(oh):
            for chain in range(min(chains, ow)):
                at = x_first + _U(y * stride_h) * x_row + _U(chain * stride_w) * lanes + v
                out_at = out_first + _U(y * ow + chain) * lanes + v
                pixels = (ow - chain + chains - 1) // chains
                operands = (flat_x, at, across, down, step, weights, v, apart, start, flat_out, out_at, out_step,
                            pixels)
                if group == 4 and shift == 1:
                    _GROUPS_OF_4_BY_1(operands)
                elif group == 4:
                    _GROUPS_OF_4_BY_2(operands)
                elif kh == 3 and shift == 1:
                    _DEPTHWISE_3_BY_1(operands)
                elif kh == 3:
                    _DEPTHWISE_3_BY_2(operands)
                elif shift == 1:
                    _DEPTHWISE_5_BY_1(operands)
                else:
                    _DEPTHWISE_5_BY_2(operands)


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def _tap_passes(source, first_row, row_size, offsets, starts, weights, block, per_group, virtual, oh, ow, k, stride_h,
                lanes, row, scratch, flat_out, out_first):
    """grouped_channels_last's sums of one image from ``source`` (its float32 planes, or x itself), rows of
    ``row_size`` from ``first_row``: each virtual tap v reads one contiguous run of OW*G values per output
    row from ``offsets[v]`` on, multiplied element by element with its repeated weights, so the vector loops
    run over pixels and groups together however few groups a tile has; ``starts`` (None: 0) are the sums'
    starting values, per output o a block. The run is taken in blocks as long as the repeated weights (not
    repeated along whole rows, which would cost a small tile much). Nine virtual taps (a 3x3
    depthwise kernel) are one pass straight to the output, 25 (5x5) five passes; others add passes of up to
    nine in a float32 row. With several outputs per group, output o's row goes to row o of ``scratch``,
    whose rows :func:`_interleave` then writes into every Kg-th channel."""
    run, out_row = _U(ow) * lanes, _U(ow * k)
    scattered = per_group > 1
    target = scratch if scattered else flat_out     # where a pass's outputs go
    for y in range(oh):
        out_at = out_first + _U(y) * out_row
        for o in range(per_group):
            start = _U(o) * run if scattered else out_at
            wb = _U(o * (virtual + SUM_LINES)) * block       # output o's weights
            first = _U(o) * block               # and starting values
            for begin in range(_U(0), run, block):
                count = min(block, run - begin)
                line = first_row + _U(y * stride_h) * row_size + begin
                if virtual == 9:    # 3x3: one pass, straight to the output
                    s0, s1, s2 = line + offsets[0], line + offsets[1], line + offsets[2]
                    s3, s4, s5 = line + offsets[3], line + offsets[4], line + offsets[5]
                    s6, s7, s8 = line + offsets[6], line + offsets[7], line + offsets[8]
                    w1, w2, w3, w4 = wb + block, wb + _U(2) * block, wb + _U(3) * block, wb + _U(4) * block
                    w5, w6, w7, w8 = wb + _U(5) * block, wb + _U(6) * block, wb + _U(7) * block, wb + _U(8) * block
                    if starts is None:
                        for e in range(count):
                            target[start + begin + e] = np.int32(_nine_taps(source, weights, e, s0, s1, s2, s3, s4,
                                                                            s5, s6, s7, s8, wb, w1, w2, w3, w4, w5,
                                                                            w6, w7, w8))
                    else:
                        for e in range(count):
                            target[start + begin + e] = np.int32(starts[first + e] + _nine_taps(
                                source, weights, e, s0, s1, s2, s3, s4, s5, s6, s7, s8, wb, w1, w2, w3, w4, w5, w6,
                                w7, w8))
                    continue
                if virtual == 25:   # 5x5: five taps a pass, the first setting the row, the last converting
                    # it (rather than 9 + 9 + 3 + 3 + 1 taps after zeroing the row)
                    for i in range(5):
                        t = 5 * i
                        s0, s1, s2 = line + offsets[t], line + offsets[t + 1], line + offsets[t + 2]
                        s3, s4 = line + offsets[t + 3], line + offsets[t + 4]
                        w0, w1, w2 = wb + _U(t) * block, wb + _U(t + 1) * block, wb + _U(t + 2) * block
                        w3, w4 = wb + _U(t + 3) * block, wb + _U(t + 4) * block
                        if i == 0:
                            if starts is None:
                                for e in range(count):
                                    row[e] = _five_taps(source, weights, e, s0, s1, s2, s3, s4, w0, w1, w2, w3, w4)
                            else:
                                for e in range(count):
                                    row[e] = starts[first + e] + _five_taps(source, weights, e, s0, s1, s2, s3, s4,
                                                                            w0, w1, w2, w3, w4)
                        elif i < 4:
                            for e in range(count):
                                row[e] += _five_taps(source, weights, e, s0, s1, s2, s3, s4, w0, w1, w2, w3, w4)
                        else:
                            for e in range(count):
                                target[start + begin + e] = np.int32(row[e] + _five_taps(
                                    source, weights, e, s0, s1, s2, s3, s4, w0, w1, w2, w3, w4))
                    continue
                # Nine taps per pass (rather than three). Where every tap is in such a pass (3x3 kernels of
                # several channels a group), the first pass sets the row and the last one writes the output:
                # no passes of their own that zero the row and convert it.
                nines = virtual % 9 == 0        # 18 or more here: 9 took the one-pass branch above
                if not nines:
                    if starts is None:
                        row[:] = 0.0
                    else:
                        for e in range(count):
                            row[e] = starts[first + e]
                t = 0
                while t + 9 <= virtual:
                    s0, s1, s2 = line + offsets[t], line + offsets[t + 1], line + offsets[t + 2]
                    s3, s4, s5 = line + offsets[t + 3], line + offsets[t + 4], line + offsets[t + 5]
                    s6, s7, s8 = line + offsets[t + 6], line + offsets[t + 7], line + offsets[t + 8]
                    w0, w1, w2 = wb + _U(t) * block, wb + _U(t + 1) * block, wb + _U(t + 2) * block
                    w3, w4, w5 = wb + _U(t + 3) * block, wb + _U(t + 4) * block, wb + _U(t + 5) * block
                    w6, w7, w8 = wb + _U(t + 6) * block, wb + _U(t + 7) * block, wb + _U(t + 8) * block
                    if nines and t == 0:
                        if starts is None:
                            for e in range(count):
                                row[e] = _nine_taps(source, weights, e, s0, s1, s2, s3, s4, s5, s6, s7, s8, w0, w1,
                                                    w2, w3, w4, w5, w6, w7, w8)
                        else:
                            for e in range(count):
                                row[e] = starts[first + e] + _nine_taps(source, weights, e, s0, s1, s2, s3, s4, s5,
                                                                        s6, s7, s8, w0, w1, w2, w3, w4, w5, w6, w7, w8)
                    elif nines and t + 9 == virtual:
                        for e in range(count):
                            target[start + begin + e] = np.int32(row[e] + _nine_taps(
                                source, weights, e, s0, s1, s2, s3, s4, s5, s6, s7, s8, w0, w1, w2, w3, w4, w5, w6,
                                w7, w8))
                    else:
                        for e in range(count):
                            row[e] += _nine_taps(source, weights, e, s0, s1, s2, s3, s4, s5, s6, s7, s8, w0, w1, w2,
                                                 w3, w4, w5, w6, w7, w8)
                    t += 9
                while t + 3 <= virtual:       # three taps per pass: a third of the row's loads and stores
                    s0, s1, s2 = line + offsets[t], line + offsets[t + 1], line + offsets[t + 2]
                    w0, w1, w2 = wb + _U(t) * block, wb + _U(t + 1) * block, wb + _U(t + 2) * block
                    for e in range(count):
                        row[e] += (np.float32(source[s0 + e]) * weights[w0 + e]
                                   + np.float32(source[s1 + e]) * weights[w1 + e]
                                   + np.float32(source[s2 + e]) * weights[w2 + e])
                    t += 3
                while t < virtual:
                    s0, w0 = line + offsets[t], wb + _U(t) * block
                    for e in range(count):
                        row[e] += np.float32(source[s0 + e]) * weights[w0 + e]
                    t += 1
                if not nines:
                    for e in range(count):
                        target[start + begin + e] = np.int32(row[e])
        if scattered:
            _interleave(scratch, run, per_group, flat_out, out_at)
