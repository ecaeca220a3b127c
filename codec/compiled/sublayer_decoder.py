"""The decoder's per-sublayer loop in numba: one call decodes all CTUs of a weight sublayer.

It mirrors the decoding direction of ``codec.reference.sublayer_coder.SublayerCoder`` (Tables 326-331 and
escape(), with the resolutions A6, A7, A9, A14-A17 and A36 of docs/codec.md), which stays the reference:
ctu3d_header, zdep_array, the cu3d split recursion, predicted and signalled codebooks, map / tree mode,
start depth, escape mode, the tree (the njit trees of ``codec.compiled.tree_coders``, shared with the
encoder), escapes, the write-out through ZdepArray and the codebook predictor update. The CTU geometry
comes from the reference's own ``ctu_geometries``.

Only the element order and checks are written twice, so tests/codec/compiled/test_sublayer_decoder.py
decodes every syntax path, random modes and corrupted streams with both and requires the same levels,
statistics, bin count and end position, or a CodecError from both. An error inside the njit code is a
status code (``status``) or the engine's ``state[S_ERROR]``; ``decode_weight_sublayer`` turns it into a
CodecError with the bit position, the element and the CTU.

Nothing is allocated inside the njit code: the scratch arrays are sized in Python for the largest CU
of the sublayer (the DecoderLimits already bound the sublayer).
"""
from __future__ import annotations

import enum

import numpy as np

from ..errors import CodecError
from ..reference.geometry import ctu_geometries, tree_shapes
from ..reference.headers import DecoderLimits, StreamHeader, Sublayer
from ..reference.sublayer_coder import MAX_CBOOK_SIZE, MAX_PREDICTOR_SIZE, MODE_STATS
from ..reference.tree_coder import TREES
from .aec_decoder import (ERR_NONE, ERROR_MESSAGES, S_ERROR, S_ERROR_POS, S_POS, decode_bypass, decode_decision,
                          decode_u, decode_uegk)
from .contexts import ELEMENT_ROWS, ROW_C_MAX, ROW_CTX, ROW_K, ROW_RULE, Element
from .jit_cache import njit
from .tree_coders import (DECODING_TRUTH, MAX_TREE_LEVELS, STACK_COLUMNS, octree, tagtree, uni_tagtree,
                          unitree)

Tree = enum.IntEnum("Tree", [(name, index) for index, name in enumerate(TREES)], module=__name__)
Stat = enum.IntEnum("Stat", [(key, index) for index, key in enumerate(MODE_STATS)], module=__name__)

# status[STATUS_ELEMENT] says where an error happened, for CodecError.element: an Element, or past them a
# tree (inside which the error names the tree) or the escape check.
ELEMENT_NAMES = (*Element.__members__, *TREES, "escape")
TREE_ELEMENT = len(Element)                 # the status element of tree t is TREE_ELEMENT + t
ESCAPE_ELEMENT = TREE_ELEMENT + len(TREES)

# status[] layout and the syntax errors (the CodecError reasons of codec.reference.sublayer_coder)
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
@njit
def _flag(io, status, element):
    status[STATUS_ELEMENT] = element
    ctx_idx = ELEMENT_ROWS[element, ROW_CTX]
    if ctx_idx < 0:
        return decode_bypass(io[0], io[2], io[3])
    return decode_decision(io[0], io[1], io[2], io[3], ctx_idx)


@njit
def _uegk(io, status, element, sign):
    status[STATUS_ELEMENT] = element
    row = ELEMENT_ROWS[element]
    return decode_uegk(io[0], io[1], io[2], io[3], row[ROW_CTX], row[ROW_RULE], sign, row[ROW_C_MAX], row[ROW_K])


@njit
def _unary(io, status, element, max_value):
    status[STATUS_ELEMENT] = element
    row = ELEMENT_ROWS[element]
    return decode_u(io[0], io[1], io[2], io[3], row[ROW_CTX], row[ROW_RULE], max_value)


@njit
def _fail(io, status, code, element):
    """A syntax error: recorded with the bit position where it was found; returns True (stop)."""
    if status[STATUS_ERROR] == E_NONE:
        status[STATUS_ERROR] = code
        status[STATUS_ELEMENT] = element
        status[STATUS_POS] = io[0][S_POS]
    return True


@njit
def _stopped(io, status):
    return io[0][S_ERROR] != ERR_NONE or status[STATUS_ERROR] != E_NONE


# ------------------------------------------------------------------------------------------------ zdep_array
@njit
def _zdep_array(io, status, params, zdep, queue):
    """zdep_array(), Table 328, and its cycle walk (reference.sublayer_coder.zdep_from_queue, A7); False on an error."""
    zdepth = params[P_ZDEPTH]
    for z in range(zdepth):
        zdep[z] = z
    reorder = 0
    if params[P_ENABLE_ZDEP_REORDER] and zdepth > 2:
        reorder = _flag(io, status, Element.reorder_flag)
    if not reorder or _stopped(io, status):
        return not _stopped(io, status)
    queue[0] = -1
    for n in range(1, zdepth - 1):
        flag = _flag(io, status, Element.signalled_flag)
        queue[n] = 1 if flag else (-2 if queue[n - 1] > 0 else -1)
    queue[zdepth - 1] = -2 if queue[zdepth - 2] > 0 else -1
    for n in range(zdepth):
        if queue[n] == 1:
            queue[n] = _uegk(io, status, Element.qval_minus_one, 0) + 1
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
            return not _fail(io, status, E_ZDEP_OVERFLOW, Element.qval_minus_one)
        if queue[qidx] == -1:
            zdep[zidx] = zidx
        else:
            first = zidx
            while queue[qidx] != -2:
                target = queue[qidx]
                if not 0 <= target < zdepth or zdep[zidx] != -1:
                    return not _fail(io, status, E_ZDEP_ENTRY, Element.qval_minus_one)
                zdep[zidx] = target
                zidx = target
                qidx += 1
                if qidx >= zdepth:
                    return not _fail(io, status, E_ZDEP_OPEN, Element.signalled_flag)
            if zdep[zidx] != -1:
                return not _fail(io, status, E_ZDEP_REVISIT, Element.qval_minus_one)
            zdep[zidx] = first
            zidx = first
        qidx += 1
    for z in range(zdepth):       # reuse queue as the "seen" marks of the permutation check
        queue[z] = 0
    for z in range(zdepth):
        if zdep[z] < 0 or queue[zdep[z]]:
            return not _fail(io, status, E_ZDEP_PERMUTATION, Element.qval_minus_one)
        queue[zdep[z]] = 1
    return True


# ------------------------------------------------------------------------------------------------ codebooks
@njit
def _codebooks(io, status, params, regs, predictor, predicted, cbook):
    """predicted_codebook() and signalled_codebook(), Tables 330-331 (A16, A17); returns (size, predicted)."""
    pred_size = regs[R_PREDICTOR_SIZE]
    npred = 0
    if pred_size:
        abs_diff = _uegk(io, status, Element.abs_predicted_diff, 0)
        if _stopped(io, status):
            return 0, 0
        sign = 0
        if abs_diff:
            sign = _flag(io, status, Element.predicted_sign)
            if _stopped(io, status):
                return 0, 0
        size = (-abs_diff if sign else abs_diff) + regs[R_PREV_PREDICTED]
        if not 0 <= size <= min(pred_size, MAX_CBOOK_SIZE):
            _fail(io, status, E_PREDICTED_SIZE, Element.abs_predicted_diff)
            return 0, 0
        for position in range(MAX_PREDICTOR_SIZE):
            if npred == size:
                break
            if position >= pred_size:
                _fail(io, status, E_PREDICTED_FLAG, Element.predicted_flag)
                return 0, 0
            if _flag(io, status, Element.predicted_flag):
                predicted[npred] = position
                npred += 1
            if _stopped(io, status):
                return 0, 0
    for n in range(npred):
        cbook[n] = predictor[predicted[n]]
    signalled = 0
    if npred < MAX_CBOOK_SIZE:
        signalled = _unary(io, status, Element.signalled_size, MAX_CBOOK_SIZE - npred)
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
            nonzero = _flag(io, status, Element.nzflag_delta)
        delta = 0
        if nonzero:
            sign = _flag(io, status, Element.sign_delta)
            magnitude = _uegk(io, status, Element.abs_delta, sign)
            delta = -magnitude if sign else magnitude
        if _stopped(io, status):
            return 0, 0
        value = delta + prev
        if abs(value) > params[P_MAX_LEVEL]:
            _fail(io, status, E_CBOOK_RANGE, Element.abs_delta)
            return 0, 0
        cbook[n] = value
        prev = value
    for n in range(npred, npred + signalled):
        value = cbook[n]
        if value:
            negative = _flag(io, status, Element.cbook_sign)
            if _stopped(io, status):
                return 0, 0
            cbook[n] = -abs(value) if negative else abs(value)
    return npred + signalled, npred


@njit
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
@njit
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


@njit
def _leaf_cu(io, enc, el, status, params, regs, stats, truth, levels, zdep, predictor, predicted, cbook, spare,
             shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, depth, y_idx, x_idx):
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
        map_mode = _flag(io, status, Element.cu3d_map_mode)
    else:
        map_mode = 0 if regs[R_SELECT_MAP_MODE] == 1 else 1
    cube_levels, _ = _shapes(zdepth, height, width, False, shapes_buf, offsets_buf)
    tag_mode = 0
    if map_mode == 0:
        leaf_level = cube_levels - 1
    else:
        tag_mode = _flag(io, status, Element.tgt_mode)
        leaf_level = cube_levels - 1
        if not tag_mode:
            planar_levels, _ = _shapes(zdepth, height, width, True, shapes_buf, offsets_buf)
            leaf_level = planar_levels - 1
    start_depth = leaf_level
    if regs[R_ENABLE_START_DEPTH] and not _stopped(io, status):
        delta = Element.oct_start_depth_delta if map_mode == 0 else Element.tag_start_depth_delta
        start_depth -= _unary(io, status, delta, leaf_level)
    esc_mode = 1 if cbook_size else 0
    if params[P_ENABLE_ESCAPE_REORDER] and cbook_size and not _stopped(io, status):
        reorder = Element.oct_cbook_esc_mode if map_mode == 0 else Element.tag_cbook_esc_mode
        esc_mode = 2 if _flag(io, status, reorder) else 1
    if map_mode == 0:
        tree = Tree.octree
        if not _stopped(io, status) and _flag(io, status, Element.uni_mode):
            tree = Tree.unitree
    else:
        tree = Tree.tagtree if tag_mode else Tree.uni_tagtree
    if _stopped(io, status):
        return
    stats[Stat.octree + tree] += 1
    stats[Stat.codebook if cbook_size else Stat.direct] += 1
    if npred:
        stats[Stat.predicted_codebook] += 1
    if esc_mode == 2:
        stats[Stat.escape_reorder] += 1
    if start_depth != leaf_level:
        stats[Stat.start_depth] += 1

    # the tree, over the njit trees of codec.compiled.tree_coders (decoding direction)
    status[STATUS_ELEMENT] = TREE_ELEMENT + tree
    count, nodes = _shapes(zdepth, height, width, tree == Tree.uni_tagtree, shapes_buf, offsets_buf)
    shapes, offsets = shapes_buf[:count], offsets_buf[:count]
    mp = map_buf[:zdepth * height * width].reshape((zdepth, height, width))
    mp[:] = 0
    flags = flags_buf[:nodes]
    vals = vals_buf[:nodes]
    coef[:] = 0
    nzp[:] = 0
    map_val[:] = 0
    has_cbook = 1 if cbook_size else 0
    if tree == Tree.octree:
        flags[:] = 1
        octree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, has_cbook, start_depth, stack)
    elif tree == Tree.unitree:
        flags[:] = 0
        unitree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, has_cbook, start_depth, stack)
    elif tree == Tree.tagtree:
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
                        _fail(io, status, E_ESCAPE_INDEX, ESCAPE_ELEMENT)
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
                        _fail(io, status, E_LEVEL_RANGE, TREE_ELEMENT + tree)
                        return
                elif index == escape_index:
                    escaped = True
                    level = 0
                    if _flag(io, status, Element.esc_nzflag):
                        sign = _flag(io, status, Element.esc_sign)
                        magnitude = _uegk(io, status, Element.esc_abs_q, sign)
                        if _stopped(io, status):
                            return
                        if magnitude > params[P_MAX_LEVEL]:
                            _fail(io, status, E_ESCAPE_RANGE, Element.esc_abs_q)
                            return
                        level = -magnitude if sign else magnitude
                    if _stopped(io, status):
                        return
                else:
                    level = cbook[index] if esc_mode == 1 else cbook[index - 1]
                levels[plane, row0 + y, col0 + x] = level
    if escaped:
        stats[Stat.escapes] += 1
    _update_predictor(regs, predictor, predicted, npred, cbook, cbook_size, spare)


@njit
def _cu_node(io, enc, el, status, params, regs, stats, truth, grids, levels, zdep, predictor, predicted, cbook, spare,
             shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, depth, y_idx, x_idx):
    """One cu3d() of Table 329: 1 when it splits (its four children follow), else 0 (leaf or outside the CTU)."""
    if y_idx >= grids[depth, 0] or x_idx >= grids[depth, 1]:
        return 0
    if depth < regs[R_CTU_DEPTH] - 1:
        split = _flag(io, status, Element.split_flag)
        if split or _stopped(io, status):
            return split
    _leaf_cu(io, enc, el, status, params, regs, stats, truth, levels, zdep, predictor, predicted, cbook, spare,
             shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, depth, y_idx, x_idx)
    return 0


@njit
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


@njit
def decode_ctus(io, enc, el, status, params, stats, truth, ctus, grids, levels, zdep, queue, predictor, predicted,
                cbook, spare, shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, regs, stack,
                cu_stack):
    """The CTU loop of Table 322 with ctu3d_header() (Table 327, A6) and end_of_last_layer_ctu_flag."""
    regs[R_PREDICTOR_SIZE] = 0
    regs[R_PREV_PREDICTED] = 0
    count = ctus.shape[0]
    for index in range(count):
        status[STATUS_CTU] = index
        regs[R_CTU_Y], regs[R_CTU_X], regs[R_CTU_H], regs[R_CTU_W], regs[R_CTU_DEPTH] = (
            ctus[index, 0], ctus[index, 1], ctus[index, 2], ctus[index, 3], ctus[index, 4])
        select_map_mode = 3
        if not _flag(io, status, Element.select_map_mode_flag):
            select_map_mode = 1 if _flag(io, status, Element.map_mode_flag) else 2
        regs[R_SELECT_MAP_MODE] = select_map_mode
        regs[R_ENABLE_START_DEPTH] = _flag(io, status, Element.enable_start_depth)
        if _stopped(io, status) or not _zdep_array(io, status, params, zdep, queue):
            return
        stats[Stat.select_map_mode_1 + select_map_mode - 1] += 1
        for z in range(params[P_ZDEPTH]):
            if zdep[z] != z:
                stats[Stat.zdep_reorder] += 1
                break
        _cu(io, enc, el, status, params, regs, stats, truth, grids[index], levels, zdep, predictor, predicted, cbook,
            spare, shapes_buf, offsets_buf, map_buf, flags_buf, vals_buf, coef, nzp, map_val, stack, cu_stack)
        if _stopped(io, status):
            return
        last = 1 if index == count - 1 else 0
        if _flag(io, status, Element.end_of_last_layer_ctu_flag) != last:
            if not _stopped(io, status):
                _fail(io, status, E_END_FLAG, Element.end_of_last_layer_ctu_flag)
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
    stats = np.zeros(len(Stat), dtype=np.int64)
    decode_ctus(io, 0, ELEMENT_ROWS, status, params, stats, DECODING_TRUTH, ctus, grids, sub.levels,
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
    element = ELEMENT_NAMES[int(status[STATUS_ELEMENT])]
    if state[S_ERROR]:
        code = int(state[S_ERROR])
        raise CodecError(ERROR_MESSAGES[code], bit_position=int(state[S_ERROR_POS]), element=element,
                         ctu=int(status[STATUS_CTU]))
    if status[STATUS_ERROR]:
        raise CodecError(SYNTAX_ERRORS[int(status[STATUS_ERROR])], bit_position=int(status[STATUS_POS]),
                         element=element, ctu=int(status[STATUS_CTU]))
    return {key: int(count) for key, count in zip(MODE_STATS, stats) if count}

