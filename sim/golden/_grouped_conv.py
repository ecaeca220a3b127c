"""numba kernel of conv2d's grouped/depthwise path (kept apart so that importing the golden model stays cheap)."""
from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def grouped_conv_taps(phases, ws, stride_h, stride_w, dilation_h, dilation_w, out_width, out):
    """out[n, g, o, y, x] = sum over c, i, j of ws[g, o, c, i, j] * x[n, g, c, y*sh + i*dh, x*sw + j*dw].

    ``phases[n, g, c, a, b, p, q] = x[n, g, c, p*sh + a, q*sw + b]`` is the input split by stride phase and
    ``out`` (zeros) is [N, G, Kg, OH, Q], as wide as a phase: then every tap is one multiply-add over a long
    contiguous run (SIMD), and only columns x < out_width are meaningful. Float32 arithmetic, exact only
    under the bound conv2d checks (module docstring of conv.py).
    """
    batch, groups, kg, oh, width = out.shape
    cg, kh, kw = ws.shape[2], ws.shape[3], ws.shape[4]
    phase_size = phases.shape[5] * width
    run = (oh - 1) * width + out_width  # ends at the last wanted column: never reads past the phase
    for n in range(batch):
        for g in range(groups):
            for o in range(kg):
                plane = out[n, g, o].reshape(oh * width)
                for c in range(cg):
                    for i in range(kh):
                        row_offset, phase_h = divmod(i * dilation_h, stride_h)
                        for j in range(kw):
                            column_offset, phase_w = divmod(j * dilation_w, stride_w)
                            start = row_offset * width + column_offset
                            source = phases[n, g, c, phase_h, phase_w].reshape(phase_size)[start:start + run]
                            weight = ws[g, o, c, i, j]
                            for t in range(run):
                                plane[t] += weight * source[t]
