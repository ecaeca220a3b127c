"""numba kernels of conv2d's grouped/depthwise path, on NCHW operands and on channels-last tiles (kept apart so
that importing the golden model stays cheap).

Every array index in the loops is an unsigned integer: numba wraps a negative signed index around (Python
semantics), and that check on an index it cannot prove non-negative (``start + t``) keeps LLVM from
vectorising the loop, at a cost of 10-15x (measured). Mixing uint64 with a signed integer gives a float in
numba, hence ``_U`` around every constant that meets one.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.golden.conv import _FLOAT32_EXACT

_U = np.uint64
_LANES = 16   # runs are rounded up to this many floats, so no tap loop ends in a scalar remainder
_LINE = 64    # bytes in a cache line, and in an AVX-512 vector


@numba.njit(inline="always", nogil=True)
def _aligned_empty(count, dtype):
    """np.empty(count, dtype) starting on a cache line. numba aligns arrays to 32 bytes: every other buffer
    made so began mid-line, and a 512-bit load from it read two lines (a 3x3 tile of 32 groups of 4 took
    21.5 instead of 16.9 us with its weights so placed, measured)."""
    whole = np.empty(count + _LINE, dtype)
    skip = (-whole.ctypes.data % _LINE) // whole.itemsize
    return whole[skip:skip + count]


@numba.njit(inline="always", nogil=True)
def _aligned_zeros(count, dtype):
    zeros = _aligned_empty(count, dtype)
    zeros[:] = 0
    return zeros


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def grouped_conv_taps(x, x_zero_point, ws, kh, kw, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w,
                      out):
    """out[n, g*Kg + o, y, x'] = sum over c, i, j of ws[g*Kg + o, (c*KH + i)*KW + j] * (x - zp)[n, g*Cg + c,
    y*sh + i*dh - pt, x'*sw + j*dw - pl], taps outside x being 0.

    x: int8/uint8 [N, C, H, W] C-contiguous; ws: float32 [K, Cg*KH*KW] (weights minus their zero point);
    out: int32 [N, K, OH, OW] C-contiguous. Per input channel, x - zp and its padding are written into a
    float32 buffer split by stride phase, ``phases[a, b, p, q] = padded[p*sh + a, q*sw + b]``; the output
    planes of the group accumulate in float32 buffers as wide as a phase, so every tap is one multiply-add
    over a long contiguous run (SIMD), for any stride and dilation. Only the first OW columns of each row
    are stored in ``out``. Float32 arithmetic with fastmath: every partial sum is an integer the caller has
    bounded by 2**24 (module docstring of conv.py), so no order of the additions and no fused multiply-add
    can round; the phases start as zeros and the padding is never written, so it stays 0.
    """
    batch, channels, height, width_in = x.shape
    k_total, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    taps = kh * kw
    cg = ws.shape[1] // taps
    groups = channels // cg
    kg = k_total // groups
    phase_h = (oh - 1) + ((kh - 1) * dilation_h) // stride_h + 1
    width = (ow - 1) + ((kw - 1) * dilation_w) // stride_w + 1
    phase_size = phase_h * width
    run = _U(((oh - 1) * width + ow + _LANES - 1) // _LANES * _LANES)  # ends at or after the last wanted column
    phases = _aligned_zeros(stride_h * stride_w * phase_size + _LANES, np.float32)  # a rounded run stays inside
    planes = _aligned_empty(kg * run, np.float32)
    zero_point = np.float32(x_zero_point)
    starts = np.empty(taps, np.uint64)      # where each tap's run begins in ``phases``
    for i in range(kh):
        row_offset, phase_row = divmod(i * dilation_h, stride_h)
        for j in range(kw):
            column_offset, phase_column = divmod(j * dilation_w, stride_w)
            starts[i * kw + j] = ((phase_row * stride_w + phase_column) * phase_size + row_offset * width
                                  + column_offset)
    # Per column phase b: the first phase column inside x, the input column it reads, and how many follow.
    first_q = np.empty(stride_w, np.uint64)
    first_column = np.empty(stride_w, np.uint64)
    columns = np.empty(stride_w, np.uint64)
    for b in range(stride_w):
        first = max(0, -((b - pad_left) // stride_w))
        last = max(first, min(width, (width_in - 1 - b + pad_left) // stride_w + 1))
        first_q[b], first_column[b], columns[b] = first, first * stride_w + b - pad_left, last - first
    flat_x, flat_out = x.ravel(), out.ravel()
    step = _U(stride_w)
    pairs = _U(max(0, min(width_in // 2, width - (pad_left + 1) // 2)))   # stride 2: column pairs to convert
    x_plane, out_plane = _U(height * width_in), _U(oh * ow)
    for n in range(batch):
        for g in range(groups):
            planes[:] = 0.0
            for c in range(cg):
                x_base = _U(n * channels + g * cg + c) * x_plane
                for a in range(stride_h):
                    for p in range(phase_h):
                        row = p * stride_h + a - pad_top
                        if row < 0 or row >= height:
                            continue
                        row_base = x_base + _U(row * width_in)
                        if stride_w == 2:
                            # Both column phases in one loop over the row's column pairs: LLVM reads the pairs
                            # with SIMD shuffles (a strided loop per phase took 1.6x the layer's time, measured).
                            # Input column 2m + e is padded column 2m + e + pl: phase (e + pl) % 2, entry
                            # m + (e + pl) // 2; ``pairs`` keeps both entries inside a phase row.
                            even = _U((a * 2 + pad_left % 2) * phase_size + p * width + pad_left // 2)
                            odd = _U((a * 2 + (pad_left + 1) % 2) * phase_size + p * width + (pad_left + 1) // 2)
                            for m in range(pairs):
                                phases[even + m] = np.float32(flat_x[row_base + _U(2) * m]) - zero_point
                                phases[odd + m] = np.float32(flat_x[row_base + _U(2) * m + _U(1)]) - zero_point
                            for column in range(2 * pairs, width_in):     # an odd width's last column
                                entry = (column + pad_left) // 2
                                if entry < width:
                                    target = _U((a * 2 + (column + pad_left) % 2) * phase_size + p * width + entry)
                                    phases[target] = np.float32(flat_x[row_base + _U(column)]) - zero_point
                            continue
                        for b in range(stride_w):
                            target = _U((a * stride_w + b) * phase_size + p * width) + first_q[b]
                            source = row_base + first_column[b]
                            if stride_w == 1:      # constant strides let LLVM vectorise the copy
                                for q in range(columns[b]):
                                    phases[target + q] = np.float32(flat_x[source + q]) - zero_point
                            else:
                                for q in range(columns[b]):
                                    phases[target + q] = np.float32(flat_x[source + step * q]) - zero_point
                for o in range(kg):
                    plane = _U(o) * run
                    weights = ws[g * kg + o, c * taps:(c + 1) * taps]
                    tap = 0
                    while tap + 9 <= taps:    # nine taps per pass (a 3x3 kernel in one): 3-17 % faster (measured)
                        w0, w1, w2, w3 = weights[tap], weights[tap + 1], weights[tap + 2], weights[tap + 3]
                        w4, w5, w6, w7, w8 = (weights[tap + 4], weights[tap + 5], weights[tap + 6], weights[tap + 7],
                                              weights[tap + 8])
                        s0, s1, s2, s3 = starts[tap], starts[tap + 1], starts[tap + 2], starts[tap + 3]
                        s4, s5, s6, s7, s8 = (starts[tap + 4], starts[tap + 5], starts[tap + 6], starts[tap + 7],
                                              starts[tap + 8])
                        for t in range(run):
                            planes[plane + t] += (w0 * phases[s0 + t] + w1 * phases[s1 + t] + w2 * phases[s2 + t]
                                                  + w3 * phases[s3 + t] + w4 * phases[s4 + t] + w5 * phases[s5 + t]
                                                  + w6 * phases[s6 + t] + w7 * phases[s7 + t] + w8 * phases[s8 + t])
                        tap += 9
                    while tap + 3 <= taps:    # three taps per pass: a third of the loads and stores of the plane
                        w0, w1, w2 = weights[tap], weights[tap + 1], weights[tap + 2]
                        s0, s1, s2 = starts[tap], starts[tap + 1], starts[tap + 2]
                        for t in range(run):
                            planes[plane + t] += w0 * phases[s0 + t] + w1 * phases[s1 + t] + w2 * phases[s2 + t]
                        tap += 3
                    for rest in range(tap, taps):
                        weight, start = weights[rest], starts[rest]
                        for t in range(run):
                            planes[plane + t] += weight * phases[start + t]
            for o in range(kg):
                plane = _U(o) * run
                out_base = _U(n * k_total + g * kg + o) * out_plane
                for y in range(oh):
                    source = plane + _U(y * width)
                    target = out_base + _U(y * ow)
                    for q in range(_U(ow)):
                        flat_out[target + q] = np.int32(planes[source + q])


def flat_depthwise_fits(width, ow, kw, stride_w, pad_left, dilation_w):
    """Whether :func:`depthwise_flat` can take a layer: a kernel column that reads to the right of its output
    column (shift > 0) must find its column phase no wider than the output, so that the phase's rows,
    stored OW apart, never run into the next row where a mask does not cut them off."""
    for j in range(kw):
        phase, shift = (j * dilation_w - pad_left) % stride_w, (j * dilation_w - pad_left) // stride_w
        if shift > 0 and (width - phase + stride_w - 1) // stride_w > ow:
            return False
    return True


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def depthwise_flat(x, x_zero_point, ws, kh, kw, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w, out):
    """out[n, c, y, x'] = sum over i, j of ws[c, i*KW + j] * (x - zp)[n, c, y*sh + i*dh - pt, x'*sw + j*dw - pl],
    taps outside x being 0: a depthwise conv (one input channel per output channel) on NCHW operands, for
    the layers :func:`flat_depthwise_fits` accepts.

    x: int8/uint8 [N, C, H, W]; ws: float32 [C, KH*KW] (weights minus their zero point); out: int32
    [N, C, OH, OW]. Unlike :func:`grouped_conv_taps`, the rows are not padded: each stride phase of a
    channel, ``phase[a, b, p, k] = (x - zp)[p*sh + a - pt, k*sw + b]``, is stored with rows exactly OW
    apart, so output pixel t = y*OW + x' of every tap reads phase entry t + a constant, and one run over the
    whole output plane does a tap for every pixel. Where that run crosses a row edge it reads the
    neighbouring row's pixel instead of padding; a 0/1 mask per kernel column (periodic in OW, built once)
    cancels those products. The planes' conversion and the output are single loops over the plane too,
    not one short loop per row (the padded-row kernel spent 40-60 % of its time there on 14x14 and 28x28
    planes, measured). Exact under the same float32 bound as :func:`grouped_conv_taps` (a masked column sum
    is a sum of at most KH such products).
    """
    batch, channels, height, width = x.shape
    oh, ow = out.shape[2], out.shape[3]
    taps = kh * kw
    phase_rows = oh + ((kh - 1) * dilation_h) // stride_h
    phase_size = phase_rows * ow
    phase_of = np.empty(kw, np.int64)       # per kernel column: its column phase b ...
    shifts = np.empty(kw, np.int64)         # ... and the phase column it reads for output column 0
    for j in range(kw):
        phase_of[j], shifts[j] = (j * dilation_w - pad_left) % stride_w, (j * dilation_w - pad_left) // stride_w
    lead = max(0, -shifts.min())            # a negative shift reads before the first phase
    buf = _aligned_zeros(lead + stride_h * stride_w * phase_size + max(0, shifts.max()) + _LANES, np.float32)
    offsets = np.empty(taps, np.uint64)     # where each tap's run begins in ``buf``
    for i in range(kh):
        a, p = (i * dilation_h) % stride_h, (i * dilation_h) // stride_h
        for j in range(kw):
            offsets[i * kw + j] = _U(lead + (a * stride_w + phase_of[j]) * phase_size + p * ow + shifts[j])
    run = _U(oh * ow)
    masks = _aligned_empty(kw * oh * ow, np.float32).reshape((kw, oh, ow))
    for j in range(kw):
        columns = (width - phase_of[j] + stride_w - 1) // stride_w
        for column in range(ow):
            masks[j, :, column] = np.float32(0 <= column + shifts[j] < columns)
    masks = masks.reshape(kw, oh * ow)
    center_unmasked = kw == 3 and masks[1].min() == 1.0
    acc = _aligned_zeros(run, np.float32)       # zeros: the 5x5 passes scale it by 0 before it is written
    zero_point = np.float32(x_zero_point)
    flat_x, flat_out = x.ravel(), out.ravel()
    last_row = max(0, min(height, phase_rows * stride_h - pad_top))    # input rows 0 to last_row - 1 are read
    pairs = _U(min(width // 2, ow))          # stride 2: column pairs of an input row that are read
    odd_column = width % 2 == 1 and width // 2 < ow
    for n in range(batch):
        for c in range(channels):
            x_base = _U((n * channels + c) * height * width)
            if stride_h == 1 and stride_w == 1 and ow == width:     # the read rows are one contiguous run
                target = _U(lead + pad_top * width)
                for e in range(_U(last_row * width)):
                    buf[target + e] = np.float32(flat_x[x_base + e]) - zero_point
            elif stride_h == 2 and stride_w == 2:
                # Input rows 2p - pt and 2p + 1 - pt are phase row p of vertical phases 0 and 1: one loop over
                # both rows' column pairs when both are read (a loop per row took 1.4x as long, measured).
                for p in range(phase_rows):
                    row = 2 * p - pad_top
                    even = _U(lead + p * ow)
                    source = x_base + _U(row * width)
                    if 0 <= row and row + 1 < last_row:
                        below = source + _U(width)
                        odd, even_below, odd_below = (even + _U(phase_size), even + _U(2 * phase_size),
                                                      even + _U(3 * phase_size))
                        for m in range(pairs):
                            buf[even + m] = np.float32(flat_x[source + _U(2) * m]) - zero_point
                            buf[odd + m] = np.float32(flat_x[source + _U(2) * m + _U(1)]) - zero_point
                            buf[even_below + m] = np.float32(flat_x[below + _U(2) * m]) - zero_point
                            buf[odd_below + m] = np.float32(flat_x[below + _U(2) * m + _U(1)]) - zero_point
                        if odd_column:
                            buf[even + pairs] = np.float32(flat_x[source + _U(width - 1)]) - zero_point
                            buf[even_below + pairs] = np.float32(flat_x[below + _U(width - 1)]) - zero_point
                        continue
                    for a in range(2):
                        if 0 <= row + a < last_row:
                            line, target = source + _U(a * width), even + _U(2 * a * phase_size)
                            for m in range(pairs):
                                buf[target + m] = np.float32(flat_x[line + _U(2) * m]) - zero_point
                                buf[target + _U(phase_size) + m] = (np.float32(flat_x[line + _U(2) * m + _U(1)])
                                                                    - zero_point)
                            if odd_column:
                                buf[target + pairs] = np.float32(flat_x[line + _U(width - 1)]) - zero_point
            else:
                for a in range(stride_h):
                    for p in range(phase_rows):
                        row = p * stride_h + a - pad_top
                        if 0 <= row < last_row:
                            for b in range(stride_w):
                                target = _U(lead + (a * stride_w + b) * phase_size + p * ow)
                                source = x_base + _U(row * width + b)
                                for k in range(_U(min(ow, (width - b + stride_w - 1) // stride_w))):
                                    buf[target + k] = np.float32(flat_x[source + _U(stride_w) * k]) - zero_point
            weights, target = ws[c], _U((n * channels + c)) * run
            if kh == 3 and center_unmasked:     # 3x3 (MobileNets' kernel): one pass, straight to the output
                w0, w1, w2, w3, w4, w5, w6, w7, w8 = (weights[0], weights[1], weights[2], weights[3], weights[4],
                                                      weights[5], weights[6], weights[7], weights[8])
                s0, s1, s2, s3, s4, s5, s6, s7, s8 = (offsets[0], offsets[1], offsets[2], offsets[3], offsets[4],
                                                      offsets[5], offsets[6], offsets[7], offsets[8])
                m0, m2 = masks[0], masks[2]
                for t in range(run):
                    flat_out[target + t] = np.int32(m0[t] * (w0 * buf[s0 + t] + w3 * buf[s3 + t] + w6 * buf[s6 + t])
                                                    + (w1 * buf[s1 + t] + w4 * buf[s4 + t] + w7 * buf[s7 + t])
                                                    + m2[t] * (w2 * buf[s2 + t] + w5 * buf[s5 + t] + w8 * buf[s8 + t]))
                continue
            if kh == 5 and kw == 5:   # 5x5: columns 0-1, 2-3, then 4 straight to the output (12 % faster, measured)
                for first in (0, 2):
                    m0, m1 = masks[first], masks[first + 1]
                    a0, a1, a2, a3, a4 = (weights[first], weights[first + 5], weights[first + 10],
                                          weights[first + 15], weights[first + 20])
                    b0, b1, b2, b3, b4 = (weights[first + 1], weights[first + 6], weights[first + 11],
                                          weights[first + 16], weights[first + 21])
                    s0, s1, s2, s3, s4 = (offsets[first], offsets[first + 5], offsets[first + 10],
                                          offsets[first + 15], offsets[first + 20])
                    r0, r1, r2, r3, r4 = (offsets[first + 1], offsets[first + 6], offsets[first + 11],
                                          offsets[first + 16], offsets[first + 21])
                    keep = np.float32(first > 0)     # the first pass starts the sums
                    for t in range(run):
                        acc[t] = keep * acc[t] + (
                            m0[t] * (a0 * buf[s0 + t] + a1 * buf[s1 + t] + a2 * buf[s2 + t] + a3 * buf[s3 + t]
                                     + a4 * buf[s4 + t])
                            + m1[t] * (b0 * buf[r0 + t] + b1 * buf[r1 + t] + b2 * buf[r2 + t] + b3 * buf[r3 + t]
                                       + b4 * buf[r4 + t]))
                m4 = masks[4]
                a0, a1, a2, a3, a4 = weights[4], weights[9], weights[14], weights[19], weights[24]
                s0, s1, s2, s3, s4 = offsets[4], offsets[9], offsets[14], offsets[19], offsets[24]
                for t in range(run):
                    flat_out[target + t] = np.int32(acc[t] + m4[t] * (a0 * buf[s0 + t] + a1 * buf[s1 + t]
                                                                      + a2 * buf[s2 + t] + a3 * buf[s3 + t]
                                                                      + a4 * buf[s4 + t]))
                continue
            acc[:] = 0.0
            for j in range(kw):        # any other kernel: per column, its taps up to five per pass
                m = masks[j]
                i = 0
                while i + 5 <= kh:
                    a0, a1, a2, a3, a4 = (weights[i * kw + j], weights[(i + 1) * kw + j], weights[(i + 2) * kw + j],
                                          weights[(i + 3) * kw + j], weights[(i + 4) * kw + j])
                    s0, s1, s2, s3, s4 = (offsets[i * kw + j], offsets[(i + 1) * kw + j], offsets[(i + 2) * kw + j],
                                          offsets[(i + 3) * kw + j], offsets[(i + 4) * kw + j])
                    for t in range(run):
                        acc[t] += m[t] * (a0 * buf[s0 + t] + a1 * buf[s1 + t] + a2 * buf[s2 + t] + a3 * buf[s3 + t]
                                          + a4 * buf[s4 + t])
                    i += 5
                while i + 3 <= kh:
                    a0, a1, a2 = weights[i * kw + j], weights[(i + 1) * kw + j], weights[(i + 2) * kw + j]
                    s0, s1, s2 = offsets[i * kw + j], offsets[(i + 1) * kw + j], offsets[(i + 2) * kw + j]
                    for t in range(run):
                        acc[t] += m[t] * (a0 * buf[s0 + t] + a1 * buf[s1 + t] + a2 * buf[s2 + t])
                    i += 3
                while i < kh:
                    a0, s0 = weights[i * kw + j], offsets[i * kw + j]
                    for t in range(run):
                        acc[t] += m[t] * (a0 * buf[s0 + t])
                    i += 1
            for t in range(run):
                flat_out[target + t] = np.int32(acc[t])


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
    (a strided loop per channel ran scalar: a tile of 32 groups of 4, 3x3, 2 rows took 14-33 % less, measured);
    a function of its own, since inlined into grouped_channels_last it slowed the depthwise tiles by 15-25 %."""
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
    time, a strided loop, ran scalar (an eighth of a 3x3 tile of 32 groups of 4, measured)."""
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
    once (the sums made per tile took a tenth of a 3x3 depthwise tile, measured)."""
    k, taps, group_c = ws.shape
    per_group = k // groups
    copies = max(1, _REPEAT_FLOATS // max(groups, 1))
    virtual = group_c * taps
    repeated = _aligned_zeros(per_group * (virtual + SUM_LINES) * copies * groups, np.float32).reshape(
        (per_group, virtual + SUM_LINES, copies * groups))
    for o in range(per_group):
        sums, magnitudes = repeated[o, virtual], repeated[o, virtual + 1]
        for c in range(group_c):
            for t in range(taps):
                line = repeated[o, c * taps + t]
                for g in range(groups):
                    value = ws[g * per_group + o, t, c]
                    for copy in range(copies):
                        line[copy * groups + g] = value
                for e in range(line.size):
                    sums[e] += line[e]
                    magnitudes[e] += abs(line[e])
    return repeated


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def grouped_channels_last(x, x_zero_point, repeated, kh, kw, stride_h, stride_w, pad_top, pad_left, dilation_h,
                          dilation_w, out):
    """out[n, y, x', g*Kg + o] = sum over c, i, j of ws[g*Kg + o, i*KW + j, c] * (x - zp)[n, y*sh + i*dh - pt,
    x'*sw + j*dw - pl, g*Cg + c], taps outside x being 0: a grouped conv (depthwise with Cg = 1) on
    channels-last operands, as the NPU's buffers hold a tile.

    x: int8/uint8 [N, H, W, C] C-contiguous; ``repeated``: the weights as :func:`repeated_group_weights` makes
    them, [Kg, Cg*KH*KW + SUM_LINES, m*G]; out: int32 [N, OH, OW, K] C-contiguous. The padded input is
    converted once into one float32 plane per channel c of a group, its G lanes per pixel the groups' c-th
    channels, its rows split by column phase, ``plane[c, r, b, q, g] = padded[r, q*sw + b, g*Cg + c]``,
    which :func:`_tap_passes` reads. Only the planes' padding is zeroed, not the whole planes. Exact under
    the same float32 bound as :func:`grouped_conv_taps`.

    A depthwise conv of stride 1 across with no top or left padding and its windows inside x (the
    interpreter's tiles, whose LOAD wrote the padding) needs no planes: x's rows are the runs the taps read,
    converted as they are read, and the zero point comes off as -zp * (sum of the tap weights) per channel
    (repeated_group_weights' sum line), the pass's starting value. Exact where the sum of the terms'
    magnitudes stays within 2**24 (|w| * (|x| + |zp|) per tap; at most 25 * 255 * 510 for a 5x5 kernel),
    else the tile is converted. 1.1-1.2x faster than converting on 3x3 tiles of 2 output rows, whose planes
    hold every input row once per tile; 5x5 alike
    (measured).
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
    row = _aligned_empty(block, np.float32)
    scratch = _aligned_empty(_U(ow) * lanes * _U(per_group) if per_group > 1 else _U(0), np.int32)  # see _tap_passes
    # Views are made once: numba counts each view's references atomically, and a view per row (x[n, y]) cost
    # 5.2 -> 3.75 us on a stride-2 tile of 29 rows (measured). Rows are offsets into the flat arrays.
    flat_x, flat_out = x.ravel(), out.ravel()
    x_row, out_image = _U(width_in * channels), _U(oh * ow * k)
    if group_c == 1 and stride_w == 1 and pad_top == 0 and pad_left == 0 and rows <= height and phase_w <= width_in:
        # Exact where every output's sum of |w| * (|x| + |zp|) over its taps is within 2**24: then any partial
        # sum, in any order, is an exact float32 integer.
        info = np.iinfo(x.dtype)
        x_bound = max(np.float64(info.max), -np.float64(info.min)) + abs(np.float64(x_zero_point))
        lines = _U(virtual + SUM_LINES)
        starts = _aligned_empty(_U(per_group) * block, np.float32)    # output o's sums start at -zp * its weights' sum
        zero_point = np.float32(x_zero_point)
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
    zero_point = np.float32(x_zero_point)
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


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def _tap_passes(source, first_row, row_size, offsets, starts, weights, block, per_group, virtual, oh, ow, k, stride_h,
                lanes, row, scratch, flat_out, out_first):
    """grouped_channels_last's sums of one image from ``source`` (its float32 planes, or x itself), rows of
    ``row_size`` from ``first_row``: each virtual tap v reads one contiguous run of OW*G values per output
    row from ``offsets[v]`` on, multiplied element by element with its repeated weights, so the vector loops
    run over pixels and groups together however few groups a tile has; ``starts`` (None: 0) are the sums'
    starting values, per output o a block. The run is taken in blocks as long as the repeated weights (on a
    2-row tile, repeating them along whole rows cost a fifth of the call, measured). Nine virtual taps (a 3x3
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
                if virtual == 9:    # 3x3: one pass, straight to the output (1.2-1.4x faster, measured)
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
                    # it (15 % faster than 9 + 9 + 3 + 3 + 1 taps after zeroing the row, measured)
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
                # Nine taps per pass (2-17 % faster than three, measured). Where every tap is in such a pass
                # (3x3 kernels of several channels a group), the first pass sets the row and the last one
                # writes the output: no passes of their own that zero the row and convert it (3-5 % of a 3x3
                # tile of 32 groups of 4, measured).
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
