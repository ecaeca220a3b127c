"""numba kernel of conv2d's grouped/depthwise path (kept apart so that importing the golden model stays cheap)."""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def grouped_conv_taps(x, x_zero_point, ws, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w, out):
    """out[n, g*Kg + o, y, x'] = sum over c, i, j of ws[g, o, c, i, j] * (x - zp)[n, g*Cg + c, y*sh + i*dh - pt,
    x'*sw + j*dw - pl], taps outside x being 0.

    Per input channel, x - zp and its padding are written into a small float32 buffer split by stride phase,
    ``phases[a, b, p, q] = padded[p*sh + a, q*sw + b]``; the output planes of the group accumulate in float32
    buffers as wide as a phase, so every tap is one multiply-add over a long contiguous run (SIMD). Only the
    first OW columns are stored in ``out`` (int32). Float32 arithmetic: exact only under the bound conv2d
    checks (module docstring of conv.py).
    """
    batch, channels, height, width_in = x.shape
    groups, kg, cg, kh, kw = ws.shape
    oh, ow = out.shape[2], out.shape[3]
    phase_h = (oh - 1) + ((kh - 1) * dilation_h) // stride_h + 1
    width = (ow - 1) + ((kw - 1) * dilation_w) // stride_w + 1
    run = (oh - 1) * width + ow  # ends at the last wanted column: never reads past a phase
    phases = np.empty((stride_h, stride_w, phase_h * width), np.float32)
    planes = np.empty((kg, run), np.float32)
    for n in range(batch):
        for g in range(groups):
            planes[:] = 0.0
            for c in range(cg):
                channel = g * cg + c
                for a in range(stride_h):
                    for b in range(stride_w):
                        for p in range(phase_h):
                            row = p * stride_h + a - pad_top
                            for q in range(width):
                                column = q * stride_w + b - pad_left
                                inside = 0 <= row < height and 0 <= column < width_in
                                value = x[n, channel, row, column] - x_zero_point if inside else 0
                                phases[a, b, p * width + q] = value
                for o in range(kg):
                    for i in range(kh):
                        row_offset, phase_row = divmod(i * dilation_h, stride_h)
                        for j in range(kw):
                            column_offset, phase_column = divmod(j * dilation_w, stride_w)
                            start = row_offset * width + column_offset
                            source = phases[phase_row, phase_column, start:start + run]
                            weight = ws[g, o, c, i, j]
                            for t in range(run):
                                planes[o, t] += weight * source[t]
            for o in range(kg):
                for y in range(oh):
                    for x_out in range(ow):
                        out[n, g * kg + o, y, x_out] = np.int32(planes[o, y * width + x_out])


@numba.njit(cache=True, nogil=True)
def depthwise_taps(padded, x_zero_point, taps, stride_h, stride_w, dilation_h, dilation_w, out):
    """out[n, c, y, x'] = sum over i, j of taps[i, j, c] * (padded[n, y*sh + i*dh, x'*sw + j*dw, c] - zp).

    Depthwise (one input and one output channel per group) in channels-last order: every tap is one
    multiply-add over the contiguous channels of a pixel (SIMD across channels), so no per-channel set-up is
    repeated and strides cost nothing. ``padded`` holds the zero point in its padding; float32 arithmetic,
    exact under the bound conv2d checks (module docstring of conv.py).
    """
    batch, channels, oh, ow = out.shape
    kh, kw = taps.shape[0], taps.shape[1]
    zero_point = np.float32(x_zero_point)
    acc = np.empty(channels, np.float32)
    for n in range(batch):
        for y in range(oh):
            for x_out in range(ow):
                acc[:] = 0.0
                for i in range(kh):
                    row = y * stride_h + i * dilation_h
                    for j in range(kw):
                        pixel = padded[n, row, x_out * stride_w + j * dilation_w]
                        weights = taps[i, j]
                        for c in range(channels):
                            acc[c] += weights[c] * (np.float32(pixel[c]) - zero_point)
                for c in range(channels):       # NCHW: consecutive pixels share the lines these writes touch
                    out[n, c, y, x_out] = np.int32(acc[c])
