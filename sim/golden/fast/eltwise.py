"""numba kernels of the elementwise unit and of concat's rescale: the fast path of sim/golden/eltwise.py, and the
parameters they take for checked arguments.

The definition's numpy form of docs/arithmetic.md §8 builds an int64 tensor for every step. These loops make one
pass in 32-bit lanes (twice as many per vector as int64, and a 32-bit multiply where x86 has no fast 64-bit one),
which needs the up to 48-bit sum taken apart. Every rounding here is

    u = round((X * 2**e + Y) / 2**(e + L))      with |X|, |Y| < 2**24 unless said otherwise,

and the nested floor division floor((X * 2**e + Y + h) / 2**(e + L)) = floor((X + floor((Y + h) / 2**e)) / 2**L)
evaluates it exactly from 32-bit values:

* add/sub: X = d M of the input with the smaller shift (L = its N), Y = +-d M of the other (e = the difference
  of the shifts, at most MAX_ALIGN = 22): t_a +- t_b = X 2**e + Y. |d M| <= 255 * 65535 < 2**24. Where
  X 2**e + Y (offsets included) fits int32 for every operand value and no tie rule applies, add_one_sum
  divides it as one sum (eltwise.py checks the bound at the types' corners).
* mul: P = d_a d_b (|P| <= 255**2) and M = M_hi 2**e + M_lo with e = min(8, N): X = P M_hi, Y = P M_lo, both below
  2**24 when e = 8; when N < 8, L = 0 and u = X + round(Y / 2**N) with |X| < 2**31 for N >= 1. With N = 0 the
  product is not rounded and |P| is capped at 2**17 / M + 1 first: beyond that every output saturates anyway,
  on the same side.
* max/min: rounding is monotonic, so round(max(t_a, t_b) / 2**N) = max(round(d_a M_a / 2**N_a), round(d_b M_b /
  2**N_b)): two single terms (Y = 0, e = 0), as is concat's rescale round(d M / 2**N). A term without shift is
  rounded as 2 d M / 2**1, which has no ties, so that both terms share one tie rule.

The rounding offset h goes into X (h = 2**(N-1) = 2**(L-1) * 2**e when L >= 1) or into Y (L = 0: h = 2**(e-1)),
so that half up is the plain floor above (floor mode: h = 0). An exact half (a tie) is c + h = 0 mod 2**N, that
is Y + h = 0 mod 2**e and X + floor((Y + h) / 2**e) = 0 mod 2**L; half to even and half away from zero step back
from half up's result there when it is odd, or not positive. Since |X + floor(Y / 2**e)| < 2**25 whenever L > 0,
a shift L beyond 26 changes neither the result (0, or -1 for floor) nor the ties (none), so the caller caps it
there: every shift is below 32 (masked with 31, which lets LLVM keep it in 32 bits) and every value fits int32.

tests/sim/golden/test_eltwise_kernels.py checks every op, rounding, type and broadcast against the definitions
in sim/golden/eltwise.py. Layout: operands as flat arrays of the output's size (broadcasts materialised;
mul_per_run takes b with a value per run of values as it is) of one type, int8 or uint8 (sim/golden/eltwise.py lifts
the int8 operand of a mixed pair to uint8), which numba compiles a kernel for (loading an int8 sign-extends it:
no XOR of the raw byte, which would cost 15-20 % here); out flat, of the output's type. The integer parameters
come as one int32 array (typing a dozen numpy scalars would cost numba's dispatch more than a small tensor's
arithmetic), so that numba's arithmetic, which widens to int64, narrows back to 32-bit lanes. The rounding's tie
rule, the saturation count and whether the clamp is the output type's own range are constants of each loop (nine
copies): LLVM does not unswitch loops this large itself, and their branches inside the loop cost more than the
arithmetic; a clamp to the type's range is one saturating narrowing instruction where [qmin, qmax] takes two more.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.machine.arch import MAC_OPERAND_MAX

_U = np.uint64
_I32 = np.int32
_RUN = 1 << 30              # values per run, so that a run's saturation count fits its int32 counter
#: values mul_per_run computes at a time: a constant count, which LLVM makes whole vectors of with no remainder
#: loop (a plain loop per run, with its scalar remainder, was slower than mul on a repeated copy); no run is
#: shorter
PER_RUN_BLOCK = 16
NO_TIE, TIE_TO_EVEN, TIE_AWAY_FROM_ZERO = 0, 1, 2      # what a rounding does on an exact half, after half up


@numba.njit(cache=True, nogil=True, inline="always")
def _rounded(x, y, e, low, tie_rule):
    """floor((x + floor(y / 2**e)) / 2**low), x and y holding the rounding offset; then the tie rule (which must
    be NO_TIE when e = low = 0: nothing is rounded)."""
    s = _I32(x + (y >> (e & 31)))
    u = _I32(s >> (low & 31))
    if tie_rule == NO_TIE:
        return u
    tie = ((y & _I32((1 << (e & 31)) - 1)) == 0) & ((s & _I32((1 << (low & 31)) - 1)) == 0)
    if tie_rule == TIE_TO_EVEN:
        return _I32(u - (tie & ((u & 1) == 1)))
    return _I32(u - (tie & (u <= 0)))


@numba.njit(cache=True, nogil=True, inline="always")
def _specialised(loop, a, b, out, parameters, tie_rule, count):
    """The saturation count of loop((a, b, out, parameters), tie_rule, count, to_type) over runs of _RUN values
    (of whole repeats where b holds a value per ``repeat`` of them), with tie_rule, count and to_type constants
    of each loop. to_type: nothing is counted, the zero point (the third last parameter) is 0 -- the caller
    folds it into the rounding's sum where it can -- and qmin and qmax (the last two) are out's type range, a
    clamp of one saturating narrowing."""
    info = np.iinfo(out.dtype)
    to_type = not count and parameters[-3] == 0 and parameters[-2] == info.min and parameters[-1] == info.max
    repeat = out.size // b.size if b.size else 1
    step = max(_RUN // repeat, 1) * repeat
    saturated = 0
    for start in range(0, out.size, step):
        run = (a[start:start + step], b[start // repeat:(start + step) // repeat], out[start:start + step], parameters)
        if count:
            saturated += _tie_rule_constant(loop, run, tie_rule, True, False)
        elif to_type:
            _tie_rule_constant(loop, run, tie_rule, False, True)
        else:
            _tie_rule_constant(loop, run, tie_rule, False, False)
    return saturated


@numba.njit(cache=True, nogil=True, inline="always")
def _tie_rule_constant(loop, run, tie_rule, count, to_type):
    """loop(run, tie_rule, count, to_type) with tie_rule a constant too."""
    if tie_rule == NO_TIE:
        return loop(run, NO_TIE, count, to_type)
    if tie_rule == TIE_TO_EVEN:
        return loop(run, TIE_TO_EVEN, count, to_type)
    return loop(run, TIE_AWAY_FROM_ZERO, count, to_type)


@numba.njit(cache=True, nogil=True, inline="always")
def _plus(u, zero_point, to_type):
    """u + the zero point, which is 0 where ``to_type`` (no add at all then)."""
    return u if to_type else _I32(u + zero_point)


@numba.njit(cache=True, nogil=True, inline="always")
def _clamped(v, o, qmin, qmax, to_type):
    """v clamped to [qmin, qmax], or to o's type range as constants (one saturating narrowing) if ``to_type``."""
    if to_type:
        info = np.iinfo(o.dtype)
        return min(max(v, _I32(info.min)), _I32(info.max))
    return min(max(v, qmin), qmax)


def _add_loop_of(one_sum):
    """add's loop, or add_one_sum's where ``one_sum`` (a constant of the loop)."""
    @numba.njit(nogil=True, inline="always")
    def loop(run, tie_rule, count, to_type):
        f, s, o, parameters = run
        if one_sum:     # a constant: the other form's unpacking is pruned
            k_f, k_s, c, shift, zero_point, qmin, qmax = parameters
        else:
            k_f, c_f, k_s, c_s, e, low, zero_point, qmin, qmax = parameters
        clamped = _I32(0)
        for i in range(_U(o.size)):
            if one_sum:
                u = _I32(_I32(_I32(f[i]) * k_f + _I32(s[i]) * k_s + c) >> (shift & 31))
            else:
                u = _rounded(_I32(_I32(f[i]) * k_f + c_f), _I32(_I32(s[i]) * k_s + c_s), e, low, tie_rule)
            v = _plus(u, zero_point, to_type)
            kept = _clamped(v, o, qmin, qmax, to_type)
            o[i] = kept
            if count:
                clamped = _I32(clamped + (v != kept))
        return clamped
    return loop


_ADD_LOOP, _ADD_ONE_SUM_LOOP = _add_loop_of(False), _add_loop_of(True)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def add(first, second, parameters, tie_rule, out, count):
    """add/sub: X = first * k_f + c_f, Y likewise of ``second`` (zero points, signs and the rounding offset folded
    into k and c); returns the saturation count if ``count``.
    parameters: k_f, c_f, k_s, c_s, e, low, zero_point, qmin, qmax."""
    return _specialised(_ADD_LOOP, first, second, out, parameters, tie_rule, count)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def add_one_sum(first, second, parameters, tie_rule, out, count):
    """add/sub where X * 2**e + Y itself fits int32 for every operand value (the caller checks it) and no tie
    rule applies (floor, half up): floor((first * k_f + second * k_s + c) / 2**shift), the nested division's
    terms taken together (k_f = the first term's k * 2**e, c = its c * 2**e + the second's c): one shift and
    one add fewer a value than :func:`add`. parameters: k_f, k_s, c, shift, zero_point, qmin, qmax."""
    return _specialised(_ADD_ONE_SUM_LOOP, first, second, out, parameters, tie_rule, count)


@numba.njit(cache=True, nogil=True, inline="always")
def _product_rounded(p, terms, tie_rule, to_type):
    """mul's value of the product p = (a - z_a)(b - z_b) before the clamp to the output's range."""
    product_max, m_high, h_x, m_low, h_y, e, low, zero_point = terms
    p = min(max(p, _I32(-product_max)), product_max)
    return _plus(_rounded(_I32(p * m_high + h_x), _I32(p * m_low + h_y), e, low, tie_rule), zero_point, to_type)


@numba.njit(cache=True, nogil=True, inline="always")
def _mul_terms(parameters):
    """mul's parameters as (z_a, z_b, the terms of _product_rounded, qmin, qmax)."""
    z_a, z_b, product_max, m_high, h_x, m_low, h_y, e, low, zero_point, qmin, qmax = parameters
    return z_a, z_b, (product_max, m_high, h_x, m_low, h_y, e, low, zero_point), qmin, qmax


@numba.njit(cache=True, nogil=True, inline="always")
def _mul_loop(run, tie_rule, count, to_type):
    a, b, o, parameters = run
    z_a, z_b, terms, qmin, qmax = _mul_terms(parameters)
    clamped = _I32(0)
    for i in range(_U(o.size)):
        v = _product_rounded(_I32((_I32(a[i]) - z_a) * (_I32(b[i]) - z_b)), terms, tie_rule, to_type)
        kept = _clamped(v, o, qmin, qmax, to_type)
        o[i] = kept
        if count:
            clamped = _I32(clamped + (v != kept))
    return clamped


@numba.njit(cache=True, nogil=True, inline="always")
def _mul_per_run_loop(run, tie_rule, count, to_type):
    """mul over runs of o.size // b.size values, each with one value of b, in blocks of PER_RUN_BLOCK values;
    counts nothing (``count`` is False)."""
    a, b, o, parameters = run
    z_a, z_b, terms, qmin, qmax = _mul_terms(parameters)
    repeat, width = _U(o.size // b.size if b.size else 0), _U(PER_RUN_BLOCK)
    for j in range(_U(b.size)):
        d_b = _I32(_I32(b[j]) - z_b)
        stop = j * repeat + repeat
        for block in range(j * repeat, stop, width):
            first = min(block, stop - width)    # the last block moved back within the run, overlapping
            for k in range(width):
                v = _product_rounded(_I32((_I32(a[first + k]) - z_a) * d_b), terms, tie_rule, to_type)
                o[first + k] = _clamped(v, o, qmin, qmax, to_type)
    return 0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def mul(a, b, parameters, tie_rule, out, count):
    """mul: P = clamp((a - z_a)(b - z_b), +-product_max), X = P m_high + h_x, Y = P m_low + h_y.
    parameters: z_a, z_b, product_max, m_high, h_x, m_low, h_y, e, low, zero_point, qmin, qmax."""
    return _specialised(_mul_loop, a, b, out, parameters, tie_rule, count)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def mul_per_run(a, b, parameters, tie_rule, out):
    """mul where b holds one value for each run of out.size // b.size >= PER_RUN_BLOCK values of a (a value per
    channel, as a squeeze-excite scale), without a saturation count: b's difference taken once a run, and no
    copy of b repeated to a's size (a count per block of values would cost more than that copy)."""
    if b.size and (out.size % b.size or out.size // b.size < PER_RUN_BLOCK):
        raise ValueError("mul_per_run: out.size is not a multiple of at least PER_RUN_BLOCK of b.size")
    _specialised(_mul_per_run_loop, a, b, out, parameters, tie_rule, False)


@numba.njit(cache=True, nogil=True, inline="always")
def _max_min_loop(run, tie_rule, count, to_type):
    a, b, o, parameters = run
    is_max, k_a, c_a, low_a, k_b, c_b, low_b, zero_point, qmin, qmax = parameters
    zero = _I32(0)
    clamped = _I32(0)
    for i in range(_U(o.size)):
        u_a = _rounded(_I32(_I32(a[i]) * k_a + c_a), zero, zero, low_a, tie_rule)
        u_b = _rounded(_I32(_I32(b[i]) * k_b + c_b), zero, zero, low_b, tie_rule)
        v = _plus(max(u_a, u_b) if is_max else min(u_a, u_b), zero_point, to_type)
        kept = _clamped(v, o, qmin, qmax, to_type)
        o[i] = kept
        if count:
            clamped = _I32(clamped + (v != kept))
    return clamped


@numba.njit(cache=True, nogil=True, error_model="numpy")
def max_min(a, b, parameters, tie_rule, out, count):
    """max (is_max 1) or min of the two single terms round((a * k_a + c_a) / 2**low_a) and the same of b.
    parameters: is_max, k_a, c_a, low_a, k_b, c_b, low_b, zero_point, qmin, qmax."""
    return _specialised(_max_min_loop, a, b, out, parameters, tie_rule, count)


@numba.njit(cache=True, nogil=True, inline="always")
def _rescale_loop(run, tie_rule, count, to_type):
    x, _, o, parameters = run
    k, c, low, zero_point, qmin, qmax = parameters
    zero = _I32(0)
    for i in range(_U(o.size)):
        v = _plus(_rounded(_I32(_I32(x[i]) * k + c), zero, zero, low, tie_rule), zero_point, to_type)
        o[i] = _clamped(v, o, qmin, qmax, to_type)
    return 0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def rescale(x, parameters, tie_rule, out):
    """concat's requant of flat ``x``: round((x * k + c) / 2**low) + zero point, clamped.
    parameters: k, c, low, zero_point, qmin, qmax."""
    _specialised(_rescale_loop, x, x, out, parameters, tie_rule, False)


# The kernels' parameters for checked arguments: plain Python, which sim/golden/eltwise.py calls once per set of
# arguments and caches.

def tie_rule_of(rounding: str, shift: int) -> int:
    """What the kernels do on an exact half after rounding it up: nothing for floor (no offset, no ties) and
    where the shift is 0 (nothing is rounded)."""
    rules = {"floor": NO_TIE, "half_up": NO_TIE, "half_to_even": TIE_TO_EVEN,
             "half_away_from_zero": TIE_AWAY_FROM_ZERO}
    return rules[rounding] if shift else NO_TIE


def _offsets(e: int, low: int, rounding: str) -> tuple[int, int, int]:
    """(h_x, h_y, low) to round (X * 2**e + Y) / 2**(e + low) in the kernels: half up's offset on X or on Y, and
    ``low`` capped where it stops mattering (module docstring)."""
    low = min(low, 26)
    if rounding == "floor" or e + low == 0:
        return 0, 0, low
    return (1 << (low - 1), 0, low) if low else (0, 1 << (e - 1), low)


def _single_term(zero_point: int, multiplier: int, shift: int, rounding: str) -> tuple[int, int, int]:
    """(k, c, low) with which the kernels round (x - zero_point) * M / 2**N as (x * k + c) / 2**low; N = 0 as
    2 M / 2**1, which has no ties (the kernels' tie rule then needs no exception)."""
    if shift == 0:
        multiplier, shift = 2 * multiplier, 1
    h, _, low = _offsets(0, shift, rounding)
    return multiplier, h - zero_point * multiplier, low


def _int32(*values) -> np.ndarray:
    return np.array(values, np.int32)


def _folded(tie_rule: int, low: int, zero_point: int) -> int:
    """What of the output zero point goes into the rounding's sum X (zero_point * 2**low, then added to X, the
    zero point becoming 0): floor((X + zp 2**L) / 2**L) = floor(X / 2**L) + zp, where no tie rule looks at the
    rounded value's sign or parity and X stays far inside int32 (|X + floor(Y / 2**e)| < 2**25 for L >= 1).
    The kernels' uncounted loop then adds nothing after rounding."""
    fold = tie_rule == NO_TIE and low >= 1 and abs(zero_point) << low <= 1 << 30
    return zero_point << low if fold else 0


def _folded_terms(tie_rule: int, terms: list[tuple[int, int, int]], zero_point: int) -> tuple[list, int]:
    """Single terms (k, c, low) with the output zero point folded into each c where every one takes it
    (:func:`_folded`; max, min and concat add it after rounding them), and the zero point left to add."""
    folds = [_folded(tie_rule, low, zero_point) for _, _, low in terms]
    if zero_point and all(folds):
        return [(k, c + fold, low) for (k, c, low), fold in zip(terms, folds)], 0
    return terms, zero_point


def mul_parameters(multiplier: int, shift: int, a_zero_point: int, b_zero_point: int, zero_point: int, qmin: int,
                   qmax: int, rounding: str):
    """(:func:`mul`, its parameters, its tie rule) for mul's checked arguments (:func:`mul_per_run` takes the
    same parameters)."""
    e = min(8, shift)
    h_x, h_y, low = _offsets(e, shift - e, rounding)
    # N = 0 rounds nothing: a product past 2**17 / M saturates every output type, so it is capped there
    product_max = MAC_OPERAND_MAX ** 2 if shift else (1 << 17) // max(multiplier, 1) + 1
    tie_rule = tie_rule_of(rounding, shift)
    folded = _folded(tie_rule, low, zero_point)
    parameters = _int32(a_zero_point, b_zero_point, product_max, multiplier >> e, h_x + folded,
                        multiplier & ((1 << e) - 1), h_y, e, low, zero_point - (folded >> low), qmin, qmax)
    return mul, parameters, tie_rule


def max_min_parameters(is_max: bool, a_term: tuple[int, int, int], b_term: tuple[int, int, int], zero_point: int,
                       qmin: int, qmax: int, rounding: str):
    """(:func:`max_min`, its parameters, its tie rule) for max or min; a term is (zero point, M, N) of an
    operand."""
    tie_rule = tie_rule_of(rounding, 1)
    (term_a, term_b), zero_point = _folded_terms(tie_rule, [_single_term(*a_term, rounding),
                                                            _single_term(*b_term, rounding)], zero_point)
    return max_min, _int32(is_max, *term_a, *term_b, zero_point, qmin, qmax), tie_rule


def add_parameters(sign: int, a_term: tuple, b_term: tuple, zero_point: int, qmin: int, qmax: int, rounding: str):
    """(:func:`add` or :func:`add_one_sum`, its parameters, its tie rule, whether b goes first) for add (``sign``
    1) or sub (-1); a term is (zero point, M, N, (type min, type max)) of an operand. The operand of the smaller
    shift goes first (X, e = the shifts' difference)."""
    (z_a, m_a, n_a, a_range), (z_b, m_b, n_b, b_range) = a_term, b_term
    swap = n_a > n_b
    terms = [(z_a, m_a, n_a, 1, a_range), (z_b, m_b, n_b, sign, b_range)]
    (z_f, m_f, n_f, s_f, first_range), (z_s, m_s, n_s, s_s, second_range) = terms[::-1] if swap else terms
    h_x, h_y, low = _offsets(n_s - n_f, n_f, rounding)
    tie_rule = tie_rule_of(rounding, n_s)
    folded = _folded(tie_rule, low, zero_point)
    k_f, c_f, k_s, c_s, e = s_f * m_f, h_x - s_f * m_f * z_f + folded, s_s * m_s, h_y - s_s * m_s * z_s, n_s - n_f
    if tie_rule == NO_TIE and e + low < 32 and _one_sum_fits(k_f << e, k_s, (c_f << e) + c_s, first_range,
                                                             second_range):
        return (add_one_sum, _int32(k_f << e, k_s, (c_f << e) + c_s, e + low, zero_point - (folded >> low), qmin,
                                    qmax), tie_rule, swap)
    return add, _int32(k_f, c_f, k_s, c_s, e, low, zero_point - (folded >> low), qmin, qmax), tie_rule, swap


def _one_sum_fits(k_f: int, k_s: int, c: int, first_range: tuple[int, int], second_range: tuple[int, int]) -> bool:
    """Whether first * k_f + second * k_s + c stays within int32 for every value of the operands' types (its
    extremes are at their corners): add_one_sum then forms X * 2**e + Y in one sum, one shift and one add fewer
    a value than the nested division."""
    extremes = [f * k_f + s * k_s + c for f in first_range for s in second_range]
    return -(1 << 31) <= min(extremes) and max(extremes) < 1 << 31


def rescale_parameters(zero_point: int, multiplier: int, shift: int, out_zero_point: int, qmin: int, qmax: int,
                       rounding: str):
    """(:func:`rescale`'s parameters, its tie rule) for one input of concat."""
    tie_rule = tie_rule_of(rounding, 1)
    (term,), folded_zero_point = _folded_terms(tie_rule, [_single_term(zero_point, multiplier, shift, rounding)],
                                               out_zero_point)
    return _int32(*term, folded_zero_point, qmin, qmax), tie_rule
