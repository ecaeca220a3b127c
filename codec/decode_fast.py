"""The decoder's per-sublayer loop in numba: one call decodes all CTUs of a weight sublayer.

It mirrors the decoding direction of ``codec.syntax.SublayerCoder`` (Tables 326-331 and escape(),
with the resolutions A6, A7, A9, A14-A17 and A36 of docs/codec.md), which stays the reference:
ctu3d_header, zdep_array, the cu3d split recursion, predicted and signalled codebooks, map / tree
mode, start depth, escape mode, the tree (the njit trees of ``codec.syntax_fast``, shared with the
encoder), escapes, the write-out through ZdepArray and the codebook predictor update. The CTU
geometry comes from the reference's own ``ctu_geometries``.

Only the element order and checks are written twice, so tests/test_codec_fast_decode.py decodes every
syntax path, random modes and corrupted streams with both and requires the same levels, statistics,
bin count and end position, or a CodecError from both. An error inside the njit code is a status
code (``status``) or the engine's ``state[S_ERROR]``; ``decode_weight_sublayer`` turns it into a
CodecError with the bit position, the element and the CTU.

Nothing is allocated inside the njit code: the scratch arrays are sized in Python for the largest CU
of the sublayer (the DecoderLimits already bound the sublayer), so the njit code runs without
reference counting.
"""
from __future__ import annotations

from ._jit import njit
import numpy as np

from . import fast
from .reference.elements import element_spec
from .errors import CodecError
from .reference.geometry import ctu_geometries, tree_shapes
from .reference.headers import DecoderLimits, StreamHeader, Sublayer
from .reference.sublayer_coder import MAX_CBOOK_SIZE, MAX_PREDICTOR_SIZE
from .syntax_fast import (ELEMENTS, MAX_TREE_LEVELS, STACK_COLUMNS, _NO_DATA, _NO_FLAT, _NO_GROUP, _NO_MAP, octree, tagtree,
                          uni_tagtree, unitree)

_njit = njit(_nrt=False)

# Elements of the sublayer syntax outside the trees, and the trees (for error messages).
_ELEMENT_NAMES = ("select_map_mode_flag", "map_mode_flag", "enable_start_depth", "reorder_flag", "signalled_flag",
                  "qval_minus_one", "split_flag", "abs_predicted_diff", "predicted_sign", "predicted_flag",
                  "signalled_size", "nzflag_delta", "sign_delta", "abs_delta", "cbook_sign", "cu3d_map_mode",
                  "tgt_mode", "oct_start_depth_delta", "tag_start_depth_delta", "oct_cbook_esc_mode",
                  "tag_cbook_esc_mode", "uni_mode", "esc_nzflag", "esc_sign", "esc_abs_q",
                  "end_of_last_layer_ctu_flag", "octree", "unitree", "tagtree", "uni_tagtree", "escape")
(SELECT_MAP_MODE_FLAG, MAP_MODE_FLAG, ENABLE_START_DEPTH, REORDER_FLAG, SIGNALLED_FLAG, QVAL_MINUS_ONE, SPLIT_FLAG,
 ABS_PREDICTED_DIFF, PREDICTED_SIGN, PREDICTED_FLAG, SIGNALLED_SIZE, NZFLAG_DELTA, SIGN_DELTA, ABS_DELTA,
 CBOOK_SIGN, CU3D_MAP_MODE, TGT_MODE, OCT_START_DEPTH_DELTA, TAG_START_DEPTH_DELTA, OCT_CBOOK_ESC_MODE,
 TAG_CBOOK_ESC_MODE, UNI_MODE, ESC_NZFLAG, ESC_SIGN, ESC_ABS_Q, END_OF_LAST_LAYER_CTU_FLAG, OCTREE, UNITREE, TAGTREE,
 UNI_TAGTREE, ESCAPE) = range(len(_ELEMENT_NAMES))
_TREE_NAMES = ("octree", "unitree", "tagtree", "uni_tagtree")


def _element_table() -> np.ndarray:
    """Per element: (ctxIdx of a one-bin flag, or -1 bypass; or ctx_start of U/UEGk), INC_* rule, cMax, k."""
    table = np.full((len(_ELEMENT_NAMES), 4), -1, dtype=np.int64)
    for i, name in enumerate(_ELEMENT_NAMES[:OCTREE]):
        spec = element_spec(name)
        if spec.binarization == "FL":
            table[i] = (-1 if spec.bypass else spec.ctx_start + spec.ctx_inc(0, {}), fast.INC_CONST, 0, 0)
        else:
            table[i] = (spec.ctx_start, fast._INC_CODES[spec.inc_rule], spec.c_max, spec.k)
    return table


SYNTAX_ELEMENTS = _element_table()

# Statistics counters (the keys of SublayerCoder.stats)
STAT_KEYS = ("select_map_mode_1", "select_map_mode_2", "select_map_mode_3", "zdep_reorder", "octree", "unitree",
             "tagtree", "uni_tagtree", "codebook", "direct", "predicted_codebook", "escape_reorder", "start_depth",
             "escapes")
(ST_SMM1, ST_SMM2, ST_SMM3, ST_ZDEP, ST_OCTREE, ST_UNITREE, ST_TAGTREE, ST_UNI_TAGTREE, ST_CODEBOOK, ST_DIRECT,
 ST_PREDICTED, ST_ESCAPE_REORDER, ST_START_DEPTH, ST_ESCAPES) = range(len(STAT_KEYS))

# status[] layout and the syntax errors (the CodecError reasons of codec.syntax)
STATUS_ERROR, STATUS_ELEMENT, STATUS_CTU, STATUS_POS = 0, 1, 2, 3
(E_NONE, E_ZDEP_OVERFLOW, E_ZDEP_ENTRY, E_ZDEP_OPEN, E_ZDEP_REVISIT, E_ZDEP_PERMUTATION, E_PREDICTED_SIZE,
 E_PREDICTED_FLAG, E_CBOOK_RANGE, E_ESCAPE_INDEX, E_ESCAPE_RANGE, E_END_FLAG, E_LEVEL_RANGE) = range(13)
SYNTAX_ERRORS = {
    E_ZDEP_OVERFLOW: "ZdepArray cycles cover more planes than exist",
    E_ZDEP_ENTRY: "ZdepArray entry out of range or repeated",
    E_ZDEP_OPEN: "ZdepArray cycle is not closed",
    E_ZDEP_REVISIT: "ZdepArray cycle revisits a plane",
    E_ZDEP_PERMUTATION: "ZdepArray is not a permutation",
    E_PREDICTED_SIZE: "predicted codebook size outside 0..predictor size",
    E_PREDICTED_FLAG: "predicted_flag beyond the predictor",
    E_CBOOK_RANGE: "codebook entry out of range",
    E_ESCAPE_INDEX: "codebook index beyond codebook size",
    E_ESCAPE_RANGE: "escaped level out of range",
    E_END_FLAG: "end_of_last_layer_ctu_flag disagrees with the CTU count",
    E_LEVEL_RANGE: "decoded level beyond the decoder limit",
}

# params[] layout: the sublayer's constants
(P_ZDEPTH, P_ENABLE_ZDEP_REORDER, P_ENABLE_ESCAPE_REORDER, P_MAX_LEVEL, P_MIN_H, P_MIN_W) = range(6)
PARAMS_SIZE = 6
# regs[] layout: the running state of the CTU loop
(R_SELECT_MAP_MODE, R_ENABLE_START_DEPTH, R_PREDICTOR_SIZE, R_PREV_PREDICTED, R_CTU_Y, R_CTU_X, R_CTU_H, R_CTU_W,
 R_CTU_DEPTH) = range(9)
REGS_SIZE = 9


# ------------------------------------------------------------------------------------------------ elements
@_njit
def _flag(io, status, element):
    status[STATUS_ELEMENT] = element
    ctx_idx = SYNTAX_ELEMENTS[element, 0]
    if ctx_idx < 0:
        return fast.decode_bypass(io[0], io[2], io[3])
    return fast.decode_decision(io[0], io[1], io[2], io[3], ctx_idx)


@_njit
def _uegk(io, status, element, sign):
    status[STATUS_ELEMENT] = element
    row = SYNTAX_ELEMENTS[element]
    return fast.decode_uegk(io[0], io[1], io[2], io[3], row[0], row[1], sign, row[2], row[3])


@_njit
def _unary(io, status, element, max_value):
    status[STATUS_ELEMENT] = element
    row = SYNTAX_ELEMENTS[element]
    return fast.decode_u(io[0], io[1], io[2], io[3], row[0], row[1], max_value)


@_njit
def _fail(io, status, code, element):
    """A syntax error: recorded with the bit position where it was found; returns True (stop)."""
    if status[STATUS_ERROR] == E_NONE:
        status[STATUS_ERROR] = code
        status[STATUS_ELEMENT] = element
        status[STATUS_POS] = io[0][fast.S_POS]
    return True


@_njit
def _stopped(io, status):
    return io[0][fast.S_ERROR] != fast.ERR_NONE or status[STATUS_ERROR] != E_NONE


# ------------------------------------------------------------------------------------------------ zdep_array
@_njit
def _zdep_array(io, status, params, zdep, queue):
    """zdep_array(), Table 328, and its cycle walk (syntax.zdep_from_queue, A7); False on an error."""
    zdepth = params[P_ZDEPTH]
    for z in range(zdepth):
        zdep[z] = z
    reorder = 0
    if params[P_ENABLE_ZDEP_REORDER] and zdepth > 2:
        reorder = _flag(io, status, REORDER_FLAG)
    if not reorder or _stopped(io, status):
        return not _stopped(io, status)
    queue[0] = -1
    for n in range(1, zdepth - 1):
        flag = _flag(io, status, SIGNALLED_FLAG)
        queue[n] = 1 if flag else (-2 if queue[n - 1] > 0 else -1)
    queue[zdepth - 1] = -2 if queue[zdepth - 2] > 0 else -1
    for n in range(zdepth):
        if queue[n] == 1:
            queue[n] = _uegk(io, status, QVAL_MINUS_ONE, 0) + 1
            if _stopped(io, status):
                return False
    if _stopped(io, status):
        return False
    for z in range(zdepth):
        zdep[z] = -1
    qidx, zidx = 0, -1
    while qidx < zdepth:
        zidx += 1
        while zidx < zdepth and zdep[zidx] != -1:
            zidx += 1
        if zidx >= zdepth:
            return not _fail(io, status, E_ZDEP_OVERFLOW, QVAL_MINUS_ONE)
        if queue[qidx] == -1:
            zdep[zidx] = zidx
        else:
            first = zidx
            while queue[qidx] != -2:
                target = queue[qidx]
                if not 0 <= target < zdepth or zdep[zidx] != -1:
                    return not _fail(io, status, E_ZDEP_ENTRY, QVAL_MINUS_ONE)
                zdep[zidx] = target
                zidx = target
                qidx += 1
                if qidx >= zdepth:
                    return not _fail(io, status, E_ZDEP_OPEN, SIGNALLED_FLAG)
            if zdep[zidx] != -1:
                return not _fail(io, status, E_ZDEP_REVISIT, QVAL_MINUS_ONE)
            zdep[zidx] = first
            zidx = first
        qidx += 1
    for z in range(zdepth):       # reuse queue as the "seen" marks of the permutation check
        queue[z] = 0
    for z in range(zdepth):
        if zdep[z] < 0 or queue[zdep[z]]:
            return not _fail(io, status, E_ZDEP_PERMUTATION, QVAL_MINUS_ONE)
        queue[zdep[z]] = 1
    return True


# ------------------------------------------------------------------------------------------------ codebooks
@_njit
def _codebooks(io, status, params, regs, predictor, predicted, cbook):
    """predicted_codebook() and signalled_codebook(), Tables 330-331 (A16, A17); returns (size, predicted)."""
    pred_size = regs[R_PREDICTOR_SIZE]
    npred = 0
    if pred_size:
        abs_diff = _uegk(io, status, ABS_PREDICTED_DIFF, 0)
        if _stopped(io, status):
            return 0, 0
        sign = 0
        if abs_diff:
            sign = _flag(io, status, PREDICTED_SIGN)
            if _stopped(io, status):
                return 0, 0
        size = (-abs_diff if sign else abs_diff) + regs[R_PREV_PREDICTED]
        if not 0 <= size <= min(pred_size, MAX_CBOOK_SIZE):
            _fail(io, status, E_PREDICTED_SIZE, ABS_PREDICTED_DIFF)
            return 0, 0
        for position in range(MAX_PREDICTOR_SIZE):
            if npred == size:
                break
            if position >= pred_size:
                _fail(io, status, E_PREDICTED_FLAG, PREDICTED_FLAG)
                return 0, 0
            if _flag(io, status, PREDICTED_FLAG):
                predicted[npred] = position
                npred += 1
            if _stopped(io, status):
                return 0, 0
    for n in range(npred):
        cbook[n] = predictor[predicted[n]]
    signalled = 0
    if npred < MAX_CBOOK_SIZE:
        signalled = _unary(io, status, SIGNALLED_SIZE, MAX_CBOOK_SIZE - npred)
        if _stopped(io, status):
            return 0, 0
    prev = abs(cbook[npred - 1]) if npred else 0
    for n in range(npred, npred + signalled):        # magnitudes first (cbook holds them until the signs)
        exist = False
        if n >= 2:
            for m in range(n - 1):
                if abs(cbook[m]) == abs(cbook[n - 1]):
                    exist = True
                    break
        nonzero = 1
        if not exist:
            nonzero = _flag(io, status, NZFLAG_DELTA)
        delta = 0
        if nonzero:
            sign = _flag(io, status, SIGN_DELTA)
            magnitude = _uegk(io, status, ABS_DELTA, sign)
            delta = -magnitude if sign else magnitude
        if _stopped(io, status):
            return 0, 0
        value = delta + prev
        if abs(value) > params[P_MAX_LEVEL]:
            _fail(io, status, E_CBOOK_RANGE, ABS_DELTA)
            return 0, 0
        cbook[n] = value
        prev = value
    for n in range(npred, npred + signalled):
        value = cbook[n]
        if value:
            negative = _flag(io, status, CBOOK_SIGN)
            if _stopped(io, status):
                return 0, 0
            cbook[n] = -abs(value) if negative else abs(value)
    return npred + signalled, npred


@_njit
def _update_predictor(regs, predictor, predicted, npred, cbook, cbook_size, spare):
    """A15: CbookPredictor = (Cbook ++ the entries not predicted, in order)[:64]; PrevPredictedSize."""
    size = 0
    for n in range(cbook_size):
        spare[size] = cbook[n]
        size += 1
    taken = 0
    for position in range(regs[R_PREDICTOR_SIZE]):
        if taken < npred and predicted[taken] == position:
            taken += 1
            continue
        if size < MAX_PREDICTOR_SIZE:
            spare[size] = predictor[position]
            size += 1
    for n in range(size):
        predictor[n] = spare[n]
    regs[R_PREDICTOR_SIZE] = size
    regs[R_PREV_PREDICTED] = npred


# ------------------------------------------------------------------------------------------------ trees
@_njit
def _shapes(zdepth, height, width, planar, shapes, offsets):
    """tree_shapes() into ``shapes`` (root first) with flat offsets; returns (levels, nodes)."""
    count = 1
    h, w, cd = height, width, (1 if planar else zdepth)
    while h > 1 or w > 1 or cd > 1:        # bounded as in tree_shapes
        h, w, cd = (h + 1) >> 1, (w + 1) >> 1, (cd + 1) >> 1
        count += 1
    h, w, cd = height, width, zdepth
    for level in range(count - 1, -1, -1):
        shapes[level, 0], shapes[level, 1], shapes[level, 2] = (zdepth if planar else cd), h, w
        h, w = (h + 1) >> 1, (w + 1) >> 1
        if not planar:
            cd = (cd + 1) >> 1
    total = 0
    for level in range(count):
        offsets[level] = total
        total += shapes[level, 0] * shapes[level, 1] * shapes[level, 2]
    return count, total


@_njit
def _leaf_cu(io, enc, el, status, params, regs, stats, truth, levels, zdep, predictor, predicted, cbook, spare, shapes_buf,
             offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, depth, y_idx, x_idx):
    """The leaf part of cu3d() (SublayerCoder.code_leaf_cu): codebooks, modes, tree, escapes, write-out."""
    zdepth = params[P_ZDEPTH]
    shift = regs[R_CTU_DEPTH] - 1 - depth
    cu_h, cu_w = params[P_MIN_H] << shift, params[P_MIN_W] << shift
    y0, x0 = y_idx * cu_h, x_idx * cu_w
    height, width = min(cu_h, regs[R_CTU_H] - y0), min(cu_w, regs[R_CTU_W] - x0)
    cbook_size, npred = _codebooks(io, status, params, regs, predictor, predicted, cbook)
    if _stopped(io, status):
        return
    if regs[R_SELECT_MAP_MODE] == 3:
        map_mode = _flag(io, status, CU3D_MAP_MODE)
    else:
        map_mode = 0 if regs[R_SELECT_MAP_MODE] == 1 else 1
    cube_levels, _ = _shapes(zdepth, height, width, False, shapes_buf, offsets_buf)
    tag_mode = 0
    if map_mode == 0:
        leaf_level = cube_levels - 1
    else:
        tag_mode = _flag(io, status, TGT_MODE)
        leaf_level = cube_levels - 1
        if not tag_mode:
            planar_levels, _ = _shapes(zdepth, height, width, True, shapes_buf, offsets_buf)
            leaf_level = planar_levels - 1
    start_depth = leaf_level
    if regs[R_ENABLE_START_DEPTH] and not _stopped(io, status):
        start_depth -= _unary(io, status, OCT_START_DEPTH_DELTA if map_mode == 0 else TAG_START_DEPTH_DELTA,
                              leaf_level)
    esc_mode = 1 if cbook_size else 0
    if params[P_ENABLE_ESCAPE_REORDER] and cbook_size and not _stopped(io, status):
        esc_mode = 2 if _flag(io, status, OCT_CBOOK_ESC_MODE if map_mode == 0 else TAG_CBOOK_ESC_MODE) else 1
    if map_mode == 0:
        tree = OCTREE
        if not _stopped(io, status) and _flag(io, status, UNI_MODE):
            tree = UNITREE
    else:
        tree = TAGTREE if tag_mode else UNI_TAGTREE
    if _stopped(io, status):
        return
    stats[ST_OCTREE + tree - OCTREE] += 1
    stats[ST_CODEBOOK if cbook_size else ST_DIRECT] += 1
    if npred:
        stats[ST_PREDICTED] += 1
    if esc_mode == 2:
        stats[ST_ESCAPE_REORDER] += 1
    if start_depth != leaf_level:
        stats[ST_START_DEPTH] += 1

    # the tree, over the njit trees of codec.syntax_fast (decoding direction)
    status[STATUS_ELEMENT] = tree
    count, nodes = _shapes(zdepth, height, width, tree == UNI_TAGTREE, shapes_buf, offsets_buf)
    shapes, offsets = shapes_buf[:count], offsets_buf[:count]
    mp = map_buf[:zdepth * height * width].reshape((zdepth, height, width))
    mp[:] = 0
    flags = flags_buf[:nodes]
    vals = vals_buf[:nodes]
    coef[:] = 0
    nzp[:] = 0
    map_val[:] = 0
    has_cbook = 1 if cbook_size else 0
    if tree == OCTREE:
        flags[:] = 1
        octree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, has_cbook, start_depth, stack)
    elif tree == UNITREE:
        flags[:] = 0
        unitree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, has_cbook, start_depth, stack)
    elif tree == TAGTREE:
        vals[:] = 0
        tagtree(io, enc, el, truth, shapes, offsets, vals, mp, coef, has_cbook, start_depth, stack)
    else:
        flags[:] = 0
        vals[:] = 0
        uni_tagtree(io, enc, el, truth, shapes, offsets, flags, vals, mp, coef, has_cbook, start_depth, stack)
    if _stopped(io, status):
        return

    # escape(CbookEscMode), A9: the index check first, then the escaped levels in z, y, x order
    if esc_mode:
        for z in range(zdepth):
            for y in range(height):
                for x in range(width):
                    if mp[z, y, x] > cbook_size:
                        _fail(io, status, E_ESCAPE_INDEX, ESCAPE)
                        return
    escape_index = cbook_size if esc_mode == 1 else 0
    escaped = False
    row0, col0 = regs[R_CTU_Y] + y0, regs[R_CTU_X] + x0
    for z in range(zdepth):
        plane = zdep[z]
        for y in range(height):
            for x in range(width):
                index = mp[z, y, x]
                if esc_mode == 0:
                    level = index
                    if abs(level) > params[P_MAX_LEVEL]:    # the trees check only the 32-bit bound
                        _fail(io, status, E_LEVEL_RANGE, tree)
                        return
                elif index == escape_index:
                    escaped = True
                    level = 0
                    if _flag(io, status, ESC_NZFLAG):
                        sign = _flag(io, status, ESC_SIGN)
                        magnitude = _uegk(io, status, ESC_ABS_Q, sign)
                        if _stopped(io, status):
                            return
                        if magnitude > params[P_MAX_LEVEL]:
                            _fail(io, status, E_ESCAPE_RANGE, ESC_ABS_Q)
                            return
                        level = -magnitude if sign else magnitude
                    if _stopped(io, status):
                        return
                else:
                    level = cbook[index] if esc_mode == 1 else cbook[index - 1]
                levels[plane, row0 + y, col0 + x] = level
    if escaped:
        stats[ST_ESCAPES] += 1
    _update_predictor(regs, predictor, predicted, npred, cbook, cbook_size, spare)


@_njit
def _cu_node(io, enc, el, status, params, regs, stats, truth, grids, levels, zdep, predictor, predicted, cbook, spare,
             shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, depth, y_idx, x_idx):
    """One cu3d() of Table 329: 1 when it splits (its four children follow), else 0 (leaf or outside the CTU)."""
    if y_idx >= grids[depth, 0] or x_idx >= grids[depth, 1]:
        return 0
    if depth < regs[R_CTU_DEPTH] - 1:
        split = _flag(io, status, SPLIT_FLAG)
        if split or _stopped(io, status):
            return split
    _leaf_cu(io, enc, el, status, params, regs, stats, truth, levels, zdep, predictor, predicted, cbook, spare,
             shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, depth, y_idx, x_idx)
    return 0


@_njit
def _cu(io, enc, el, status, params, regs, stats, truth, grids, levels, zdep, predictor, predicted, cbook, spare,
        shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, cu_stack):
    """The CU quadtree of a CTU, depth first with ``cu_stack`` rows (y, x, next child) per depth; the children
    of a split CU in the order (0,0), (1,0), (0,1), (1,1) (y changes first), as SublayerCoder.code_cu."""
    if not _cu_node(io, enc, el, status, params, regs, stats, truth, grids, levels, zdep, predictor, predicted,
                    cbook, spare, shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack,
                    0, 0, 0):
        return
    top = 0
    cu_stack[0, 0], cu_stack[0, 1], cu_stack[0, 2] = 0, 0, 0
    while top >= 0 and not _stopped(io, status):
        child = cu_stack[top, 2]
        if child == 4:
            top -= 1
            continue
        cu_stack[top, 2] = child + 1
        y_idx, x_idx = (cu_stack[top, 0] << 1) + (child & 1), (cu_stack[top, 1] << 1) + (child >> 1)
        if _cu_node(io, enc, el, status, params, regs, stats, truth, grids, levels, zdep, predictor, predicted,
                    cbook, spare, shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack,
                    top + 1, y_idx, x_idx):
            top += 1
            cu_stack[top, 0], cu_stack[top, 1], cu_stack[top, 2] = y_idx, x_idx, 0


@_njit
def decode_ctus(io, enc, el, status, params, stats, truth, ctus, grids, levels, zdep, queue, predictor, predicted, cbook,
                spare, shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, regs, stack, cu_stack):
    """The CTU loop of Table 322 with ctu3d_header() (Table 327, A6) and end_of_last_layer_ctu_flag."""
    regs[R_PREDICTOR_SIZE] = 0
    regs[R_PREV_PREDICTED] = 0
    count = ctus.shape[0]
    for index in range(count):
        status[STATUS_CTU] = index
        regs[R_CTU_Y], regs[R_CTU_X], regs[R_CTU_H], regs[R_CTU_W], regs[R_CTU_DEPTH] = (
            ctus[index, 0], ctus[index, 1], ctus[index, 2], ctus[index, 3], ctus[index, 4])
        select_map_mode = 3
        if not _flag(io, status, SELECT_MAP_MODE_FLAG):
            select_map_mode = 1 if _flag(io, status, MAP_MODE_FLAG) else 2
        regs[R_SELECT_MAP_MODE] = select_map_mode
        regs[R_ENABLE_START_DEPTH] = _flag(io, status, ENABLE_START_DEPTH)
        if _stopped(io, status) or not _zdep_array(io, status, params, zdep, queue):
            return
        stats[ST_SMM1 + select_map_mode - 1] += 1
        for z in range(params[P_ZDEPTH]):
            if zdep[z] != z:
                stats[ST_ZDEP] += 1
                break
        _cu(io, enc, el, status, params, regs, stats, truth, grids[index], levels, zdep, predictor, predicted, cbook,
            spare, shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, cu_stack)
        if _stopped(io, status):
            return
        last = 1 if index == count - 1 else 0
        if _flag(io, status, END_OF_LAST_LAYER_CTU_FLAG) != last:
            if not _stopped(io, status):
                _fail(io, status, E_END_FLAG, END_OF_LAST_LAYER_CTU_FLAG)
            return


# ------------------------------------------------------------------------------------------------ Python side
def _tree_nodes(zdepth: int, height: int, width: int) -> int:
    """Nodes of the larger of the CU's two tree forms (scratch size for its flags and values)."""
    return max(sum(z * h * w for z, h, w in tree_shapes(zdepth, height, width, planar))
               for planar in (False, True))


def decode_weight_sublayer(io: tuple, header: StreamHeader, sub: Sublayer, limits: DecoderLimits) -> dict[str, int]:
    """Decode the CTUs of a weight sublayer into ``sub.levels`` (allocated by the caller); returns the mode
    statistics of SublayerCoder. ``io`` is FastElementReader's engine tuple; raises CodecError."""
    geometries = ctu_geometries(header, sub)
    zdepth = sub.zdepth
    max_depth = max(ctu.depth for ctu in geometries)
    ctus = np.array([(c.y_off, c.x_off, c.height, c.width, c.depth) for c in geometries], dtype=np.int64)
    grids = np.zeros((len(geometries), max_depth, 2), dtype=np.int64)
    for i, ctu in enumerate(geometries):
        grids[i, :ctu.depth] = ctu.grids
    max_h = max(c.height for c in geometries)
    max_w = max(c.width for c in geometries)
    params = np.zeros(PARAMS_SIZE, dtype=np.int64)
    params[P_ZDEPTH], params[P_MAX_LEVEL] = zdepth, limits.max_level
    params[P_ENABLE_ZDEP_REORDER] = header.enable_zdep_reorder
    params[P_ENABLE_ESCAPE_REORDER] = header.enable_escape_reorder
    params[P_MIN_H], params[P_MIN_W] = geometries[0].min_h, geometries[0].min_w
    nodes = _tree_nodes(zdepth, max_h, max_w)
    status = np.zeros(4, dtype=np.int64)
    stats = np.zeros(len(STAT_KEYS), dtype=np.int64)
    decode_ctus(io, 0, ELEMENTS, status, params, stats, (_NO_FLAT, _NO_FLAT, _NO_MAP, _NO_GROUP), ctus, grids, sub.levels,
                np.zeros(zdepth, dtype=np.int64), np.zeros(zdepth, dtype=np.int64),
                np.zeros(MAX_PREDICTOR_SIZE, dtype=np.int64), np.zeros(MAX_CBOOK_SIZE + 1, dtype=np.int64),
                np.zeros(MAX_CBOOK_SIZE + 1, dtype=np.int64),
                np.zeros(MAX_PREDICTOR_SIZE + MAX_CBOOK_SIZE + 1, dtype=np.int64),
                np.zeros((MAX_TREE_LEVELS, 3), dtype=np.int64), np.zeros(MAX_TREE_LEVELS, dtype=np.int64),
                np.zeros(zdepth * max_h * max_w, dtype=np.int64), np.zeros(nodes, dtype=np.int8),
                np.zeros(nodes, dtype=np.int64), np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64),
                np.zeros(1, dtype=np.int64), np.zeros(REGS_SIZE, dtype=np.int64),
                np.zeros((MAX_TREE_LEVELS, STACK_COLUMNS), dtype=np.int64), np.zeros((max_depth, 3), dtype=np.int64))
    state = io[0]
    element = _ELEMENT_NAMES[int(status[STATUS_ELEMENT])]
    if state[fast.S_ERROR]:
        code = int(state[fast.S_ERROR])
        raise CodecError(fast.ERROR_MESSAGES[code], bit_position=int(state[fast.S_ERROR_POS]), element=element,
                         ctu=int(status[STATUS_CTU]))
    if status[STATUS_ERROR]:
        raise CodecError(SYNTAX_ERRORS[int(status[STATUS_ERROR])], bit_position=int(status[STATUS_POS]),
                         element=element, ctu=int(status[STATUS_CTU]))
    return {key: int(count) for key, count in zip(STAT_KEYS, stats) if count}


__all__ = ["decode_weight_sublayer"]


class FastElementReader:
    """ElementIO of the decoder over codec.fast's njit engine (see the module docstring)."""

    decoding = True

    def __init__(self, data: bytes):
        self.data = np.frombuffer(bytes(data), dtype=np.uint8)
        self.state = fast.new_state(self.data)
        self.ctx = fast.new_contexts()
        fast.raise_on_error(self.state)
        self._io = (self.state, self.ctx, self.data, fast.NO_TRACE, fast.new_encoder_state(), _NO_DATA.copy())

    @property
    def bins_decoded(self) -> int:
        return int(self.state[fast.S_BINS])

    @property
    def bit_position(self) -> int:
        """The next bit the engine will fetch, as AecDecoder.bit_position."""
        return int(self.state[fast.S_POS])

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        spec = element_spec(name)
        if spec.binarization == "FL":
            length = spec.fixed_length if spec.fixed_length is not None else inputs["length"]
            if spec.bypass:
                result = fast.decode_fl(self.state, self.ctx, self.data, fast.NO_TRACE, -1, fast.INC_CONST, length)
            else:
                result = fast.decode_decision(self.state, self.ctx, self.data, fast.NO_TRACE,
                                              spec.ctx_start + spec.ctx_inc(0, inputs))
        elif spec.binarization == "U":
            result = fast.decode_u(self.state, self.ctx, self.data, fast.NO_TRACE, spec.ctx_start,
                                   fast._INC_CODES[spec.inc_rule], inputs["max_value"])
        else:
            result = fast.decode_uegk(self.state, self.ctx, self.data, fast.NO_TRACE, spec.ctx_start,
                                      fast._INC_CODES[spec.inc_rule], inputs.get("sign", 0), spec.c_max, spec.k)
        fast.raise_on_error(self.state, element=name)
        return int(result)

    def decode_weight_sublayer(self, header, sub, limits) -> dict[str, int]:
        """All CTUs of a weight sublayer in one njit call (codec.decode_fast); returns the mode statistics."""
        return decode_weight_sublayer(self._io, header, sub, limits)

    def finish(self) -> int:
        end = fast.finish(self.state, self.data, fast.NO_TRACE)
        fast.raise_on_error(self.state, element="terminator")
        return int(end)
