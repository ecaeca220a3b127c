"""numba kernels of the requantizer: the fast path of sim/golden/requant.py.

One pass per element instead of numpy's chain of tensor-sized temporaries (int64 sum, product, quotient,
remainder, masks, clip, cast): the output stage of a depthwise layer otherwise costs several times its
convolution. The arithmetic is docs/arithmetic.md §4 step for step; tests/sim/golden/test_requant_kernels.py
checks every mode against the definitions in sim/golden/requant.py.

Layout: the accumulator as [outer, channels, inner] (any tensor with its channel axis in the middle), the
per-channel parameters as arrays of ``channels`` entries, ``out`` preallocated in the output type. Each
kernel returns how many values the clamp changed.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.golden.rounding import ROUNDING_MODES

# The kernels branch on a mode's position in ROUNDING_MODES: 0 floor, 1 half up, 2 half to even, 3 half away.
ROUNDING_CODES = {mode: code for code, mode in enumerate(ROUNDING_MODES)}
ROUND_HALF_EVEN_BIAS = 1.5 * 2.0 ** 52   # (v + this) - this rounds a float64 |v| < 2**51 half to even, exactly
_COUNT_RUN = 1 << 22                     # values counted in one float32 sum (exact below 2**24)
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_U = np.uint64
_CHANNELS_LAST_BLOCK = 256  # values per block of native_requant_channels_last, at least
# The rows of channels_last_blocks' parameter array
_BLOCK_BIAS, _BLOCK_MULTIPLIER, _BLOCK_SHIFT, _BLOCK_FLOOR_OFFSET, _BLOCK_HALF_UP_OFFSET = range(5)


@numba.njit(cache=True, nogil=True, inline="always")
def _half(shift):
    """Half up's rounding offset for a right shift by ``shift``: 2**(shift-1), 0 where shift is 0."""
    return (np.int64(1) << shift) >> 1


@numba.njit(cache=True, nogil=True, inline="always")
def _shift_right(value, shift, rounding):
    """rounding_shift_right of one int64 (sim/golden/rounding.py) without branches, so that the loops
    vectorise: (value + bump) >> shift, the bump placing the ties. With half = 2**(shift-1): half up adds
    half; half to even adds half - 1 plus the floor quotient's parity (a tie then rounds up exactly when the
    quotient is odd); half away from zero adds half, less one for a negative value (its tie stays at the
    floor). A shift of 0 adds nothing."""
    half = _half(shift)
    shifting = np.int64(shift > 0)
    if rounding == 0:
        bump = np.int64(0)
    elif rounding == 1:
        bump = half
    elif rounding == 2:
        bump = shifting * (half - 1 + ((value >> shift) & 1))
    else:
        bump = half - shifting * np.int64(value < 0)
    return (value + bump) >> shift


@numba.njit(cache=True, nogil=True, error_model="numpy")
def native_requant(acc, bias, multiplier, shift, negative_multiplier, negative_shift, leaky, rounding, count,
                   zero_point, qmin, qmax, out):
    """clamp(round((acc + bias) * M >> N) + zp); sums below 0 take the negative pair when ``leaky``. Returns
    how many values the clamp changed, or 0 where neither ``count`` nor ``leaky`` (Leaky always counts).
    ValueError where a multiplier leaves int32 or a zero point, bias and multiplier could leave int64
    (:func:`_folded_offset`; never with the NPU's fields).

    The loop is inlined once per mode, each copy with the mode's flags as constants: a loop that chose the
    rounding per value (selects between the bumps; where Leaky is off, a per-value shift count too), or counted
    where not asked to, ran slower. Leaky always counting keeps the copies at 12 (each copy lengthens the
    compile), plus two for half up and floor clamped to out's own type range without counting, where the
    clamp is one saturating narrowing. Floor and half up without the negative pair take the folded loop
    (:func:`_folded_requant_loop`). Each copy is reached by its own branch: copies that held both loops behind
    a constant condition took far longer to compile."""
    m, n, zp = multiplier, shift, zero_point
    if leaky:
        m_n, n_n = negative_multiplier, negative_shift
        if rounding == 0:
            return _native_requant_loop(acc, bias, m, n, m_n, n_n, True, 0, True, zp, qmin, qmax, out)
        if rounding == 1:
            return _native_requant_loop(acc, bias, m, n, m_n, n_n, True, 1, True, zp, qmin, qmax, out)
        if rounding == 2:
            return _native_requant_loop(acc, bias, m, n, m_n, n_n, True, 2, True, zp, qmin, qmax, out)
        return _native_requant_loop(acc, bias, m, n, m_n, n_n, True, 3, True, zp, qmin, qmax, out)
    if rounding == 0:
        return _folded_requant(acc, bias, m, n, 0, count, zp, qmin, qmax, out)
    if rounding == 1:
        return _folded_requant(acc, bias, m, n, 1, count, zp, qmin, qmax, out)
    if rounding == 2:
        if count:
            return _native_requant_loop(acc, bias, m, n, m, n, False, 2, True, zp, qmin, qmax, out)
        return _native_requant_loop(acc, bias, m, n, m, n, False, 2, False, zp, qmin, qmax, out)
    if count:
        return _native_requant_loop(acc, bias, m, n, m, n, False, 3, True, zp, qmin, qmax, out)
    return _native_requant_loop(acc, bias, m, n, m, n, False, 3, False, zp, qmin, qmax, out)


@numba.njit(nogil=True, error_model="numpy", inline="always")
def _folded_requant(acc, bias, m, n, rounding, count, zp, qmin, qmax, out):
    """native_requant's branch to its folded loop with ``rounding`` a constant."""
    if count:
        return _folded_requant_loop(acc, bias, m, n, rounding, True, zp, qmin, qmax, out, False)
    info = np.iinfo(out.dtype)
    if qmin == info.min and qmax == info.max:
        return _folded_requant_loop(acc, bias, m, n, rounding, False, zp, qmin, qmax, out, True)
    return _folded_requant_loop(acc, bias, m, n, rounding, False, zp, qmin, qmax, out, False)


@numba.njit(nogil=True, error_model="numpy", inline="always")
def _native_requant_loop(acc, bias, multiplier, shift, negative_multiplier, negative_shift, leaky, rounding,
                         count, zero_point, qmin, qmax, out):
    """native_requant's loop where it does not fold (the negative pair, or half to even and half away);
    ``leaky``, ``rounding`` and ``count`` are constants where it is inlined."""
    outer, channels, inner = acc.shape
    saturated = 0
    for o in range(outer):
        for c in range(channels):
            b, m, n = bias[c], multiplier[c], shift[c]
            m_negative, n_negative = (negative_multiplier[c], negative_shift[c]) if leaky else (m, n)
            values, results = acc[o, c], out[o, c]
            for i in range(_U(inner)):      # 1-D views, an unsigned index, no branches: SIMD
                total = np.int64(values[i]) + b
                negative = total < 0
                value = _shift_right(total * (m_negative if negative else m), n_negative if negative else n,
                                     rounding) + zero_point
                kept = min(max(value, qmin), qmax)
                results[i] = kept
                if count:
                    saturated += kept != value
    return saturated


@numba.njit(nogil=True, error_model="numpy", inline="always")
def _folded_requant_loop(acc, bias, multiplier, shift, rounding, count, zero_point, qmin, qmax, out, to_type):
    """native_requant's loop for floor and half up without the negative pair: the bias, the rounding offset and
    the zero point folded into one offset per channel, as the channels-last loop does: (acc * M + offset) >> N,
    the product of two sign-extended 32-bit values one multiplication a lane (vpmuldq) where (acc + bias) * M
    took an int64 one (vpmullq, three uops on these cores)."""
    outer, channels, inner = acc.shape
    info = np.iinfo(out.dtype)
    # The offsets and their checks before the loop: with the multiplier's range check in sight, LLVM drops
    # the sign extension below as a no-op and multiplies in int64 again.
    offsets = np.empty(channels, np.int64)
    for c in range(channels):
        offsets[c] = _folded_offset(bias[c], multiplier[c], shift[c], zero_point, rounding)
    saturated = 0
    for o in range(outer):
        for c in range(channels):
            m, n, offset = (multiplier[c] << 32) >> 32, shift[c], offsets[c]
            values, results = acc[o, c], out[o, c]
            for i in range(_U(inner)):      # 1-D views, an unsigned index, no branches: SIMD
                value = (np.int64(values[i]) * m + offset) >> n
                kept = _clamped(value, qmin, qmax, np.int64(info.min), np.int64(info.max), to_type)
                results[i] = kept
                if count:
                    saturated += kept != value
    return saturated


@numba.njit(nogil=True, error_model="numpy", inline="always")
def _clamped(value, qmin, qmax, low, high, to_type):
    """value clamped to [qmin, qmax], or where ``to_type`` to [low, high], the output type's range as constants
    (one saturating narrowing). Scalars only: numba kept the reference counts of an array passed to an inlined
    helper inside the loop, which then stayed scalar."""
    if to_type:
        return min(max(value, low), high)
    return min(max(value, qmin), qmax)


@numba.njit(nogil=True, error_model="numpy", inline="always")
def _folded_offset(bias, multiplier, shift, zero_point, rounding):
    """bias * M + zp * 2**N + the rounding offset of floor (0) or half up (2**(N-1), 0 where N = 0), after
    checking that (acc * M + it) >> N is exact in int64 for every int32 acc (as channels_last_blocks does)."""
    if not (_INT32_MIN <= multiplier <= _INT32_MAX and 0 <= shift < 63):
        raise ValueError("requant kernels: a multiplier outside int32 or a shift outside [0, 62]")
    power = np.float64(np.int64(1) << shift)      # 2.0 ** shift would call pow
    reach = (abs(np.float64(zero_point)) * power + abs(np.float64(bias) * np.float64(multiplier))
             + 2.0 ** 31 * abs(np.float64(multiplier)) + power)
    if reach >= 2.0 ** 63:
        raise ValueError("requant kernels: zero point, bias and multiplier could leave int64")
    offset = np.int64(bias) * np.int64(multiplier) + (np.int64(zero_point) << shift)
    return offset + _half(shift) if rounding == 1 else offset


def _channels_last_loop(rounding):
    """native_requant_channels_last's loop over blocks with ``rounding`` a constant: a function of its own per
    mode (a mode read at run time, or the loop inlined per mode as native_requant's, ran slower). Floor and
    half up add their rounding offset r, the bias times M and the zero point times 2**N as one per-lane
    constant: (acc * M + bias * M + r + zp * 2**N) >> N = floor(((acc + bias) * M + r) / 2**N) + zp, exact in
    int64 (channels_last_blocks bounds it), which saves forming the sum, the offset and the zero point's add
    per value. The multiplier, an int32 value in an int64 lane, is sign-extended from its low half in the
    code: LLVM then multiplies the two 32-bit halves in one instruction on the lane as loaded."""
    @numba.njit(nogil=True, error_model="numpy")
    def loop(values, results, total, block, blocks, zero_point, qmin, qmax):
        saturated = 0
        block_bias, block_multiplier, block_shift = blocks[_BLOCK_BIAS], blocks[_BLOCK_MULTIPLIER], blocks[_BLOCK_SHIFT]
        offsets = blocks[_BLOCK_FLOOR_OFFSET + min(rounding, 1)]
        for begin in range(_U(0), total, block):
            for e in range(min(block, total - begin)):     # a flat unsigned index: SIMD
                if rounding <= 1:
                    product = np.int64(values[begin + e]) * ((block_multiplier[e] << 32) >> 32)
                    value = (product + offsets[e]) >> block_shift[e]
                else:
                    value = _shift_right((np.int64(values[begin + e]) + block_bias[e]) * block_multiplier[e],
                                         block_shift[e], rounding) + zero_point
                kept = min(max(value, qmin), qmax)
                results[begin + e] = kept
                saturated += kept != value
        return saturated
    return loop


_FLOOR_LOOP, _HALF_UP_LOOP, _HALF_EVEN_LOOP, _HALF_AWAY_LOOP = (_channels_last_loop(code) for code in range(4))


@numba.njit(cache=True, nogil=True)
def channels_last_blocks(bias, multiplier, shift, zero_point):
    """:func:`native_requant_channels_last`'s parameter operands for outputs of zero point ``zero_point``: one
    int64 array [5, block] of the per-channel bias, multiplier and shift repeated over whole pixels to a block
    of at least _CHANNELS_LAST_BLOCK values (from that many channels a block is one pixel), and the offsets
    bias * M + zp * 2**N + the rounding offset of floor (0) and of half up (2**(N-1), 0 where N = 0); and the
    zero point. One array, not five: the run loop passes it down per tile, and each array passed costs
    reference counts. A layer's tiles share them: made once, not per call. ValueError where a multiplier leaves
    int32 (the loop multiplies 32-bit halves) or an offset could leave int64 with an int32 accumulator added in
    (:func:`_folded_offset`):
    |zp| * 2**N + |bias * M| + 2**31 |M| + 2**N must stay below 2**63 (2**62 + 3 * 2**47 at most with the
    NPU's fields: docs/arithmetic.md §4.1)."""
    channels = bias.size
    block = channels * max(1, _CHANNELS_LAST_BLOCK // max(channels, 1))
    blocks = np.empty((5, block), np.int64)
    for c in range(channels):
        m, n = np.int64(multiplier[c]), np.int64(shift[c])
        blocks[_BLOCK_BIAS, c], blocks[_BLOCK_MULTIPLIER, c], blocks[_BLOCK_SHIFT, c] = bias[c], m, n
        offset = _folded_offset(bias[c], m, n, zero_point, 0)
        blocks[_BLOCK_FLOOR_OFFSET, c], blocks[_BLOCK_HALF_UP_OFFSET, c] = offset, offset + _half(n)
    filled = channels       # then whole copies of the first pixel, doubling (not an index modulo per entry)
    while filled < block:
        step = min(filled, block - filled)
        blocks[:, filled:filled + step] = blocks[:, :step]
        filled += step
    return blocks, np.int64(zero_point)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def native_requant_channels_last(acc, blocks, blocks_zero_point, rounding, zero_point, qmin, qmax, out):
    """:func:`native_requant` without the negative pair on acc [pixels, channels] as the NPU's ACC holds a
    tile, with no transposes, its parameters as :func:`channels_last_blocks` repeats them for ``channels``.
    The values are taken as one flat run in blocks of whole pixels as long as the parameters: the vector
    loop then runs long however few channels a tile has (a loop over one pixel's channels is short).
    Blocks made for another channel count or zero point are refused, not read out of step."""
    pixels, channels = acc.shape
    total = _U(pixels) * _U(channels)
    if total == 0:
        return 0
    if blocks.shape[1] != channels * max(1, _CHANNELS_LAST_BLOCK // channels):
        raise ValueError("native_requant_channels_last: parameter blocks not made for the tile's channel count")
    if blocks_zero_point != zero_point:
        raise ValueError("native_requant_channels_last: parameter blocks made for another zero point")
    values, results = acc.ravel(), out.ravel()
    block = min(total, _U(blocks.shape[1]))
    if rounding == 0:
        return _FLOOR_LOOP(values, results, total, block, blocks, zero_point, qmin, qmax)
    if rounding == 1:
        return _HALF_UP_LOOP(values, results, total, block, blocks, zero_point, qmin, qmax)
    if rounding == 2:
        return _HALF_EVEN_LOOP(values, results, total, block, blocks, zero_point, qmin, qmax)
    return _HALF_AWAY_LOOP(values, results, total, block, blocks, zero_point, qmin, qmax)


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"nnan", "nsz", "reassoc"})
def float32_requant(acc, bias, scale, count, zero_point, qmin, qmax, out):
    """clamp(round_half_even(fp32(fp32(acc + bias) * scale)) + zp, qmin, qmax) in 32-bit lanes, or -1 (``out``
    then unspecified) if some acc + bias does not fit int32: the caller then runs ``float32_requant_wide``.
    The clamped values are counted only when ``count`` (else 0 is returned): the loop is inlined once with
    counting and once without (where each channel's run is short, counting costs most).

    acc + bias is formed in int32 (a sum outside it is found from the channel's extreme values); its conversion
    to float32 is the one RNE rounding of the exact sum. The saturated values are counted as a float sum of
    ones, one per value the clamp changed (a select, which beat an integer count and a sum of
    |rounded - clamped|): integers, exact in any order (hence ``reassoc``) while a run of one
    channel stays below 2**24, which ``_COUNT_RUN`` keeps. No NaN arises (finite sums times a positive finite
    scale), hence ``nnan``; an overflow to +-inf clamps.
    """
    if count:
        return _float32_requant_loop(acc, bias, scale, True, zero_point, qmin, qmax, out)
    return _float32_requant_loop(acc, bias, scale, False, zero_point, qmin, qmax, out)


@numba.njit(nogil=True, error_model="numpy", fastmath={"nnan", "nsz", "reassoc"}, inline="always")
def _float32_requant_loop(acc, bias, scale, count, zero_point, qmin, qmax, out):
    """float32_requant's loop; ``count`` is a constant where it is inlined."""
    outer, channels, inner = acc.shape
    low, high = np.float32(qmin - zero_point), np.float32(qmax - zero_point)
    zp = np.int32(zero_point)
    saturated = 0
    for o in range(outer):
        for c in range(channels):
            b, s = bias[c], scale[c]
            values, results = acc[o, c], out[o, c]
            smallest, largest = np.int32(0), np.int32(0)   # the sum for 0 fits int32: a neutral start
            for begin in range(0, inner, _COUNT_RUN):
                clamped_away = np.float32(0.0)
                for i in range(np.uint64(begin), np.uint64(min(inner, begin + _COUNT_RUN))):  # unsigned: SIMD
                    value = values[i]
                    smallest, largest = min(smallest, value), max(largest, value)
                    rounded = np.rint(np.float32(np.int32(value + b)) * s)
                    kept = min(max(rounded, low), high)
                    if count:
                        clamped_away += np.float32(1.0) if rounded != kept else np.float32(0.0)
                    results[i] = np.int32(kept) + zp
                saturated += np.int64(clamped_away)
            if not (_INT32_MIN <= np.int64(smallest) + b and np.int64(largest) + b <= _INT32_MAX):
                return -1
    return saturated


@numba.njit(cache=True, nogil=True)
def float32_requant_wide(acc, bias, scale, zero_point, qmin, qmax, out):
    """float32_requant for any acc + bias (|.| < 2**33), in float64 throughout so that every step has a
    packed instruction on AVX2 (it has none for int64 <-> float): acc + bias is an exact float64, its
    conversion to float32 the same single RNE rounding as from the integer; the product is clamped to one
    beyond the output range before rounding, which keeps it where ``ROUND_HALF_EVEN_BIAS`` rounds exactly
    (rounding is monotonic: the result and the count are unchanged); ``bias`` int32."""
    outer, channels, inner = acc.shape
    low, high = np.float64(qmin - zero_point), np.float64(qmax - zero_point)
    saturated = 0
    for o in range(outer):
        for c in range(channels):
            for i in range(inner):
                product = np.float32(np.float64(acc[o, c, i]) + np.float64(bias[c])) * scale[c]
                value = min(max(np.float64(product), low - 1.0), high + 1.0)
                rounded = (value + ROUND_HALF_EVEN_BIAS) - ROUND_HALF_EVEN_BIAS
                saturated += (rounded < low) | (rounded > high)
                out[o, c, i] = np.int32(min(max(rounded, low), high)) + zero_point
    return saturated
