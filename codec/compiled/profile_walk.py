"""The npu profile's CTU loop in numba: what WDEC decodes after the headers, in one call per stream.

``codec.npu_profile.decode_profile_stream`` stays the reference (it also counts the cycles rtl/wdec.py
needs); this is the same walk over the compiled engine, for the interpreter, where a network's weights
would otherwise take minutes (the reference spends about 34 µs per weight). Per CTU: the profile's fixed
flags (each must have the value the profile needs), the CU's leaves in Morton order, each
``uni_map_nzflag``, then for a non-zero level ``uni_sign`` (context from the previous level) and
``uni_abs_q``; then ``end_of_last_layer_ctu_flag``. tests/codec/test_npu_profile.py requires the same
levels, bins and refusals from both.

Given a positions trace (aec_decoder.POSITIONS_TRACE_COLUMNS), the walk also records each Morton skip in it
and marks each leaf's bins (TRACE_LEAF), the first leaf of each 8x8x8 cube of (k, z, c) (TRACE_CUBE_FIRST; the
cubes' ids in their order go to ``cubes``), and ``profile_cycles`` turns the trace into the engine's bits per
cycle: the list the reference's ``cycles`` gives the NPU's cycle model, without the reference's cost;
``profile_entries`` the same for an engine of B bins a cycle, with each cycle's marks (MARK_LEVEL: completes a
level, MARK_LEAF: one of a leaf's, MARK_CUBE: the first of a cube's leaves), for WDEC's cube stager.

A stop inside the njit code is a status code: ``status[WALK_ERROR]`` (``WALK_OUTSIDE``: an element off the
profile; ``WALK_END_FLAG``: the end flag disagrees with the CTU count) or the engine's ``state[S_ERROR]``.
"""
from __future__ import annotations

from .aec_decoder import (S_BINS, S_ERROR, S_POS, S_RUN_FROM, S_TRACE_LEN, TRACE_CUBE_FIRST, TRACE_LEAF,
                          TRACE_LEAF_BIN, TRACE_LEAF_KIND, TRACE_LEAF_LAST, TRACE_POS, TRACE_ZERO_RUNS, decode_bypass,
                          decode_decision, decode_u, decode_uegk, end_run, record)
from .contexts import ELEMENT_ROWS, ROW_C_MAX, ROW_CTX, ROW_K, ROW_RULE, Element, inc_coef_sign, inc_nz_neighbours
from .jit_cache import njit

# status[] layout: WALK_CUBES counts the runs of leaves of one cube (the cubes, if each cube's leaves are
# contiguous), WALK_LAST_CUBE is the last leaf's cube key (-1: none yet)
WALK_ERROR, WALK_ELEMENT, WALK_VALUE, WALK_CTU, WALK_POS, WALK_SKIPS, WALK_CUBES, WALK_LAST_CUBE = range(8)
WALK_STATUS_SIZE = 8
CUBE_SHIFT = 3              # a cube is 8 = 1 << CUBE_SHIFT kernels by taps by channels
# profile_entries' marks of an engine cycle
MARK_LEVEL, MARK_LEAF, MARK_CUBE = 1, 2, 4
WALK_NONE, WALK_OUTSIDE, WALK_END_FLAG = 0, 1, 2
# rows of a flag table: (Element, the value the profile needs, the unary element's max_value or -1 for a flag)
FLAG_ELEMENT, FLAG_WANTED, FLAG_MAX = 0, 1, 2
TRACE_SKIP = -3             # a positions trace's ctxIdx of a Morton candidate outside its CU (no bin)
CYCLE_SKIP = -1             # profile_cycles' entry for such a candidate: a cycle of the leaf walk alone


@njit
def _bit_length(value):
    length = 0
    while value > 0:
        value >>= 1
        length += 1
    return length


@njit
def _fixed_flags(state, ctx, data, trace, table, status):
    """Read the elements of ``table`` in order; False (and the status set) at the first one off the profile."""
    for row in range(table.shape[0]):
        element = table[row, FLAG_ELEMENT]
        status[WALK_ELEMENT] = element
        if table[row, FLAG_MAX] < 0:
            value = decode_decision(state, ctx, data, trace, ELEMENT_ROWS[element, ROW_CTX])
        else:
            value = decode_u(state, ctx, data, trace, ELEMENT_ROWS[element, ROW_CTX], ELEMENT_ROWS[element, ROW_RULE],
                             table[row, FLAG_MAX])
        if state[S_ERROR]:
            return False
        if value != table[row, FLAG_WANTED]:
            status[WALK_ERROR], status[WALK_VALUE], status[WALK_POS] = WALK_OUTSIDE, value, state[S_POS]
            return False
    return True


@njit
def _mark_leaf(trace, first, end, new_cube):
    """Rows ``first`` .. ``end - 1`` are one leaf's bins (the last one ends it); ``new_cube``: the first leaf of
    its cube."""
    for row in range(first, end):
        trace[row, TRACE_LEAF] = TRACE_LEAF_BIN
    if end > first:
        trace[end - 1, TRACE_LEAF] = TRACE_LEAF_LAST
        if new_cube:
            trace[first, TRACE_LEAF] |= TRACE_CUBE_FIRST


@njit
def _next_cube(status, cubes, k, z, c):
    """Whether the leaf at (k, z, c) begins a run of its cube's leaves (another cube than the previous leaf's);
    the run's cube (k >> 3, z >> 3, c >> 3) goes to ``cubes`` while it has room."""
    kb, zb, cb = k >> CUBE_SHIFT, z >> CUBE_SHIFT, c >> CUBE_SHIFT
    key = (kb << 42) | (zb << 21) | cb
    if key == status[WALK_LAST_CUBE]:
        return False
    status[WALK_LAST_CUBE] = key
    if status[WALK_CUBES] < cubes.shape[0]:
        cubes[status[WALK_CUBES], 0], cubes[status[WALK_CUBES], 1], cubes[status[WALK_CUBES], 2] = kb, zb, cb
    status[WALK_CUBES] += 1
    return True


@njit
def _leaves(state, ctx, data, trace, levels, c0, k0, height, width, zdepth, k_w, status, cubes):
    """One CU's leaves in Morton order (z bit above y above x), written to ``levels`` [O, I, KH, KW]; a
    candidate outside the CU skips its whole out-of-range subtree (counted in status[WALK_SKIPS]). Each
    leaf's bins are one cascade run, cut where a bin needs zero-run steps (counted in the state's S_RUNS).
    With a positions trace, the leaves' cubes are followed (``_next_cube``)."""
    depth = max(_bit_length(zdepth - 1), _bit_length(height - 1), _bit_length(width - 1))
    total = 1 << (3 * depth)
    index = 0
    previous = 0
    abs_row = ELEMENT_ROWS[Element.uni_abs_q]
    while index < total:
        z = y = x = 0
        for bit in range(depth):
            z |= ((index >> (3 * bit + 2)) & 1) << bit
            y |= ((index >> (3 * bit + 1)) & 1) << bit
            x |= ((index >> (3 * bit)) & 1) << bit
        outside = -1
        if z >= zdepth:
            outside = _bit_length(z ^ (zdepth - 1)) - 1
        if y >= height:
            outside = max(outside, _bit_length(y ^ (height - 1)) - 1)
        if x >= width:
            outside = max(outside, _bit_length(x ^ (width - 1)) - 1)
        if outside >= 0:
            status[WALK_SKIPS] += 1
            if trace.shape[1] > TRACE_POS:
                record(state, trace, TRACE_SKIP, 0)
            index = (index | ((1 << (3 * outside)) - 1)) + 1
            continue
        value = 0
        first_row = state[S_TRACE_LEN]
        state[S_RUN_FROM] = state[S_BINS]
        status[WALK_ELEMENT] = Element.uni_map_nzflag
        nonzero = decode_decision(state, ctx, data, trace, ELEMENT_ROWS[Element.uni_map_nzflag, ROW_CTX]
                                  + inc_nz_neighbours(0, 0))
        if nonzero and not state[S_ERROR]:
            status[WALK_ELEMENT] = Element.uni_sign
            sign = decode_decision(state, ctx, data, trace,
                                   ELEMENT_ROWS[Element.uni_sign, ROW_CTX] + inc_coef_sign(previous))
            if state[S_ERROR]:
                return
            status[WALK_ELEMENT] = Element.uni_abs_q
            magnitude = decode_uegk(state, ctx, data, trace, abs_row[ROW_CTX], abs_row[ROW_RULE], 0,
                                    abs_row[ROW_C_MAX], abs_row[ROW_K])
            value = -magnitude if sign else magnitude
        if state[S_ERROR]:
            return
        end_run(state, state[S_BINS])
        state[S_RUN_FROM] = -1
        if trace.shape[1] > TRACE_LEAF:
            _mark_leaf(trace, first_row, state[S_TRACE_LEN], _next_cube(status, cubes, k0 + x, z, c0 + y))
        levels[k0 + x, c0 + y, z // k_w, z % k_w] = value
        previous = value
        index += 1


@njit
def decode_profile_ctus(state, ctx, data, trace, levels, ctus, zdepth, k_w, ctu_flags, split_flag, cu_flags,
                        split_min, status, cubes):
    """Every CTU of a profile stream after its headers. ``ctus``: rows (c0, k0, height, width); ``split_flag``:
    a one-row flag table, read where the CTU is wider or taller than ``split_min``; ``cubes``: int64 rows (k >> 3,
    z >> 3, c >> 3) of the leaves' cubes in their order (status[WALK_LAST_CUBE] must start at -1), as many as
    it holds."""
    count = ctus.shape[0]
    for index in range(count):
        status[WALK_CTU] = index
        c0, k0, height, width = ctus[index, 0], ctus[index, 1], ctus[index, 2], ctus[index, 3]
        if not _fixed_flags(state, ctx, data, trace, ctu_flags, status):
            return
        if (height > split_min or width > split_min) and not _fixed_flags(state, ctx, data, trace, split_flag,
                                                                           status):
            return
        if not _fixed_flags(state, ctx, data, trace, cu_flags, status):
            return
        _leaves(state, ctx, data, trace, levels, c0, k0, height, width, zdepth, k_w, status, cubes)
        if state[S_ERROR]:
            return
        status[WALK_ELEMENT] = Element.end_of_last_layer_ctu_flag
        last = decode_bypass(state, data, trace)
        if state[S_ERROR]:
            return
        if last != (1 if index == count - 1 else 0):
            status[WALK_ERROR], status[WALK_POS] = WALK_END_FLAG, state[S_POS]
            return


@njit
def profile_cycles(trace, start, run_bits, out):
    """The engine's cycles after its start from the positions trace of a whole profile stream (header, walk
    and terminator; ``start``: the bit position before the first bin): per bin, a cycle of ``run_bits`` per
    zero-run cycle before it, then the bin's cycle with the rest of the bits it took; CYCLE_SKIP per Morton
    skip. ``out`` holds exactly that many entries (the trace's rows and the zero-run cycles)."""
    position, runs, n = start, 0, 0
    for row in range(trace.shape[0]):
        if trace[row, 0] == TRACE_SKIP:
            out[n] = CYCLE_SKIP
            n += 1
            continue
        new_runs = trace[row, TRACE_ZERO_RUNS] - runs
        for _ in range(new_runs):
            out[n] = run_bits
            n += 1
        out[n] = trace[row, TRACE_POS] - position - new_runs * run_bits
        n += 1
        position, runs = trace[row, TRACE_POS], trace[row, TRACE_ZERO_RUNS]


@njit
def profile_entries(trace, start, run_bits, bins_per_cycle, bits, marks):
    """``profile_cycles`` for an engine of ``bins_per_cycle`` (B) stages: a cycle decodes up to B consecutive bins
    of one leaf, cut before a bin that needs zero-run steps (those steps come first, a cycle of ``run_bits``
    each, and the bin starts a new cycle); any other bin takes a cycle alone, a Morton skip a CYCLE_SKIP cycle.
    ``bits[n]``: the stream bits of cycle n; ``marks[n]``: MARK_LEVEL if the cycle decodes the last bin of a leaf
    (completes a level), MARK_LEAF if it is one of a leaf's cycles (its bins' or the zero-run steps before them),
    MARK_CUBE on the first cycle of the first leaf of a cube. Returns the number of cycles written (at most the
    arrays' size)."""
    position, runs, n, group = start, 0, 0, 0       # group: the bins of the open cycle of a leaf (0: none open)
    for row in range(trace.shape[0]):
        if trace[row, 0] == TRACE_SKIP:
            if n >= bits.shape[0]:
                return -1
            bits[n], marks[n] = CYCLE_SKIP, 0
            n += 1
            continue
        new_runs = trace[row, TRACE_ZERO_RUNS] - runs
        if n + new_runs >= bits.shape[0] and not (new_runs == 0 and 0 < group < bins_per_cycle):
            return -1
        leaf = trace[row, TRACE_LEAF] & TRACE_LEAF_KIND
        mark = MARK_LEAF if leaf else 0
        if trace[row, TRACE_LEAF] & TRACE_CUBE_FIRST:
            mark |= MARK_CUBE                       # on the leaf's first cycle, a zero-run step's or its bin's
        for _ in range(new_runs):
            bits[n], marks[n] = run_bits, mark
            mark &= ~MARK_CUBE
            n += 1
        taken = trace[row, TRACE_POS] - position - new_runs * run_bits
        if leaf and new_runs == 0 and 0 < group < bins_per_cycle:
            bits[n - 1] += taken                    # the open cycle of this leaf takes the bin too
            group += 1
        else:
            bits[n], marks[n] = taken, mark
            n += 1
            group = 1 if leaf else 0
        if leaf == TRACE_LEAF_LAST:
            marks[n - 1] |= MARK_LEVEL
            group = 0
        position, runs = trace[row, TRACE_POS], trace[row, TRACE_ZERO_RUNS]
    return n
