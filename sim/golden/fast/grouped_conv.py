"""numba kernels of conv2d's grouped/depthwise path on NCHW operands (chosen by fast/conv.py); the channels-last
kernel of the NPU's tiles is in channels_last_conv.py.

Every array index in the loops is an unsigned integer: numba wraps a negative signed index around (Python
semantics), and that check on an index it cannot prove non-negative (``start + t``) keeps LLVM from
vectorising the loop. Mixing uint64 with a signed integer gives a float in
numba, hence ``_U`` around every constant that meets one.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.golden.fast.simd import PAIRS, split_pairs
from aipu.sim.golden.fast.conv import _FLOAT32_EXACT

_U = np.uint64
_LANES = 16   # runs are rounded up to this many floats, so no tap loop ends in a scalar remainder
_LINE = 64    # bytes in a cache line, and in an AVX-512 vector


@numba.njit(inline="always", nogil=True)
def _aligned_empty(count, dtype):
    """np.empty(count, dtype) starting on a cache line. numba aligns arrays to 32 bytes: every other buffer
    made so began mid-line, and a 512-bit load from it read two lines."""
    whole = np.empty(count + _LINE, dtype)
    skip = (-whole.ctypes.data % _LINE) // whole.itemsize
    return whole[skip:skip + count]


@numba.njit(inline="always", nogil=True)
def _aligned_zeros(count, dtype):
    zeros = _aligned_empty(count, dtype)
    zeros[:] = 0
    return zeros


@numba.njit(inline="always", nogil=True)
def _split_row(flat_x, source, buf, even, odd, zero_point, pairs):
    """An input row's first ``pairs`` column pairs from ``flat_x[source]`` on, even columns to ``buf[even]`` on
    and odd ones to ``buf[odd]`` on, as x - zero point. Up to 16 - ``pairs`` zeros follow each phase row
    (``buf`` leaves room for them); longer rows are converted 16 pairs at a time, the last 16 ending at the
    row's last pair. A row whose 32-byte read would pass the end of x takes a scalar loop."""
    if pairs >= PAIRS:
        for start in range(0, pairs, PAIRS):
            first = min(_U(start), pairs - _U(PAIRS))
            split_pairs(flat_x, source + _U(2) * first, buf, even + first, odd + first, zero_point, _U(PAIRS))
    elif source + _U(2 * PAIRS) <= _U(flat_x.size):
        split_pairs(flat_x, source, buf, even, odd, zero_point, pairs)
    else:
        for m in range(pairs):
            buf[even + m] = np.float32(flat_x[source + _U(2) * m]) - zero_point
            buf[odd + m] = np.float32(flat_x[source + _U(2) * m + _U(1)]) - zero_point


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
                            # with SIMD shuffles (a strided loop per phase is slower).
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
                    while tap + 9 <= taps:    # nine taps per pass (a 3x3 kernel in one)
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
    not one short loop per row (where the padded-row kernel spends much of its time on small planes); at
    stride 2 each input row is split into its two column phases 16 pairs at a time
    (:func:`_split_row`; the phases lie 16 floats apart for the zeros it writes after a short row).
    Exact under the same float32 bound as :func:`grouped_conv_taps` (a masked column sum is a sum of at
    most KH such products).
    """
    batch, channels, height, width = x.shape
    oh, ow = out.shape[2], out.shape[3]
    taps = kh * kw
    phase_rows = oh + ((kh - 1) * dilation_h) // stride_h
    phase_stride = phase_rows * ow + PAIRS     # a phase's rows, then room for _split_row's zeros
    phase_of = np.empty(kw, np.int64)       # per kernel column: its column phase b ...
    shifts = np.empty(kw, np.int64)         # ... and the phase column it reads for output column 0
    for j in range(kw):
        phase_of[j], shifts[j] = (j * dilation_w - pad_left) % stride_w, (j * dilation_w - pad_left) // stride_w
    lead = max(0, -shifts.min())            # a negative shift reads before the first phase
    buf = _aligned_zeros(lead + stride_h * stride_w * phase_stride + max(0, shifts.max()) + _LANES, np.float32)
    offsets = np.empty(taps, np.uint64)     # where each tap's run begins in ``buf``
    for i in range(kh):
        a, p = (i * dilation_h) % stride_h, (i * dilation_h) // stride_h
        for j in range(kw):
            offsets[i * kw + j] = _U(lead + (a * stride_w + phase_of[j]) * phase_stride + p * ow + shifts[j])
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
                # Input row 2p + a - pt is phase row p of vertical phase a, its column pairs split by
                # _split_row (rows in order: the zeros after a row land where the next one is written)
                for p in range(phase_rows):
                    for a in range(2):
                        row = 2 * p + a - pad_top
                        if 0 <= row < last_row:
                            line, even = x_base + _U(row * width), _U(lead + (2 * a * phase_stride) + p * ow)
                            _split_row(flat_x, line, buf, even, even + _U(phase_stride), zero_point, pairs)
                            if odd_column:
                                buf[even + pairs] = np.float32(flat_x[line + _U(width - 1)]) - zero_point
            else:
                for a in range(stride_h):
                    for p in range(phase_rows):
                        row = p * stride_h + a - pad_top
                        if 0 <= row < last_row:
                            for b in range(stride_w):
                                target = _U(lead + (a * stride_w + b) * phase_stride + p * ow)
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
            if kh == 5 and kw == 5:   # 5x5: columns 0-1, 2-3, then 4 straight to the output
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
