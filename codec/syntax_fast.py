"""The four coding trees of a CU in numba, over codec.fast's engine, for both directions.

Each tree is one njit function that decodes, or encodes the encoder's truth, and is a port of
``codec.syntax.TreeCoder`` (same order of elements, same context inputs, same skips and inferences). The
traversal is depth first with an explicit stack (see ``_open``), because numba cannot cache a recursive
function that other compiled code calls, and the decoder's sublayer loop (codec.decode_fast) calls them.

``FastElementReader`` (codec.decode_fast) is the ElementIO of codec.syntax over the njit engine arrays (state, contexts,
data): the stream and layer headers are parsed by the Python syntax element by element, and each weight
sublayer is decoded in one call of codec.decode_fast. ``FastElementWriter`` is the encoder's ElementIO:
``TreeCoder`` hands it whole trees. tests/test_codec_syntax.py and tests/test_codec_fast_decode.py check
both against the pure-Python reference.

Tree levels live in one flat array with per-level offsets (``shapes[l] = (z, h, w)``, root first).
"""
from __future__ import annotations

from ._jit import njit
import numpy as np

from . import fast
from .reference.elements import element_spec
from .errors import CodecError

_njit = njit(_nrt=False)   # no allocation inside: no refcounting per call
_inline = njit(_nrt=False, inline="always")   # small helpers, inlined in IR

_ELEMENT_NAMES = ("oct_nzflag", "oct_sign", "oct_index", "oct_abs_q", "uni_nzflag", "uni_map_nzflag", "uni_sign",
                  "uni_cmap_val", "uni_qmap_val", "uni_index", "uni_abs_q", "uni_map_sign", "tgtm_nzflag_index",
                  "tgtm_nzflag_q", "tgtm_index", "tgtm_abs_q", "tgtm_delta_index", "tgtm_delta_abs_q",
                  "tgtm_sign_q", "uni_tgt_nzflag", "uni_tgt_nzflag_index", "uni_tgt_nzflag_q", "uni_tgt_index",
                  "uni_tgt_abs_q", "uni_tgt_delta_index", "uni_tgt_delta_abs_q", "uni_tgt_sign_q")
(OCT_NZFLAG, OCT_SIGN, OCT_INDEX, OCT_ABS_Q, UNI_NZFLAG, UNI_MAP_NZFLAG, UNI_SIGN, UNI_CMAP_VAL, UNI_QMAP_VAL,
 UNI_INDEX, UNI_ABS_Q, UNI_MAP_SIGN, TGTM_NZFLAG_INDEX, TGTM_NZFLAG_Q, TGTM_INDEX, TGTM_ABS_Q, TGTM_DELTA_INDEX,
 TGTM_DELTA_ABS_Q, TGTM_SIGN_Q, UT_NZFLAG, UT_NZFLAG_INDEX, UT_NZFLAG_Q, UT_INDEX, UT_ABS_Q, UT_DELTA_INDEX,
 UT_DELTA_ABS_Q, UT_SIGN_Q) = range(len(_ELEMENT_NAMES))


def _element_table() -> np.ndarray:
    """(ctx_start, INC_* rule code, cMax, k) per element index above, from Tables 337/338 (codec.contexts)."""
    table = np.zeros((len(_ELEMENT_NAMES), 4), dtype=np.int64)
    for i, name in enumerate(_ELEMENT_NAMES):
        spec = element_spec(name)
        rule = fast._INC_CODES.get(spec.inc_rule, fast.INC_CONST)
        table[i] = (spec.ctx_start, rule, spec.c_max, spec.k)
    return table


ELEMENTS = _element_table()
MAX_LEVEL = (1 << 32) - 1


@_inline
def _flag(io, enc, el, element, inc, truth):
    """A one-bin element: decoded, or ``truth`` encoded (io = decoder state, ctx, data, trace, encoder state, out)."""
    if enc:
        fast.encode_decision(io[4], io[1], io[5], el[element, 0] + inc, truth)
        return truth
    return fast.decode_decision(io[0], io[1], io[2], io[3], el[element, 0] + inc)


@_inline
def _uegk(io, enc, el, element, sign, truth):
    if enc:
        if truth < 0 or truth > MAX_LEVEL:
            fast._fail(io[0], fast.ERR_VALUE_TOO_LARGE)
            return 0
        fast.encode_uegk(io[4], io[1], io[5], el[element, 0], el[element, 1], sign, el[element, 2], el[element, 3],
                         truth)
        return truth
    return fast.decode_uegk(io[0], io[1], io[2], io[3], el[element, 0], el[element, 1], sign, el[element, 2],
                            el[element, 3])


@_inline
def _tv(enc, flat, index):
    """Encoder truth at a flat tree index (0 when decoding: the truth arrays are placeholders then)."""
    return flat[index] if enc else 0


@_inline
def _tm(enc, levels, z, y, x):
    """Encoder truth of a leaf of the CU's map (0 when decoding)."""
    return levels[z, y, x] if enc else 0


@_inline
def _at(shapes, offsets, level, z, y, x):
    return offsets[level] + (z * shapes[level, 1] + y) * shapes[level, 2] + x


@_inline
def _push(coef, value):
    coef[1] = coef[0]
    coef[0] = value


# ------------------------------------------------------------------------------------------------ octree
# Each tree has an inlined leaf step, used by its parent's child loop: leaves are most of the nodes and a
# recursive call per leaf would cost more than the leaf's bins.
@_inline
def _octree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, d, z, y, x, skip):
    flag = 1
    if d >= sd and not skip:
        flag = _flag(io, enc, el, OCT_NZFLAG, fast.inc_coef_sign(coef[0]),
                     _tv(enc, truth[0], _at(shapes, offsets, d, z, y, x)))
        nzp[1] = nzp[0]
        nzp[0] = flag
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if flag == 0 or io[0][fast.S_ERROR]:
        return
    leaf = _tm(enc, truth[2], z, y, x)
    if cbook:
        value = _uegk(io, enc, el, OCT_INDEX, 0, leaf)
    else:
        sign = _flag(io, enc, el, OCT_SIGN, fast.inc_coef_pair(coef[0], coef[1]), 1 if leaf < 0 else 0)
        magnitude = _uegk(io, enc, el, OCT_ABS_Q, sign, abs(leaf))
        value = -magnitude if sign else magnitude
    mp[z, y, x] = value
    _push(coef, value)


@_inline
def _octree_inner(io, enc, el, truth, shapes, offsets, flags, nzp, sd, d, z, y, x, skip):
    """The node part of an internal octree node (oct_nzflag unless skipped or above startDepth); its flag."""
    flag = 1
    if d >= sd and not skip:
        flag = _flag(io, enc, el, OCT_NZFLAG, fast.inc_nz_neighbours(nzp[0], nzp[1]),
                     _tv(enc, truth[0], _at(shapes, offsets, d, z, y, x)))
        nzp[1] = nzp[0]
        nzp[0] = flag
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    return flag


@_njit
def octree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, stack):
    last = shapes.shape[0] - 1
    if last == 0:
        _octree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, 0, 0, 0, 0, False)
        return
    if not _octree_inner(io, enc, el, truth, shapes, offsets, flags, nzp, sd, 0, 0, 0, 0, False) or io[0][fast.S_ERROR]:
        return
    top = _open(stack, -1, shapes, 0, 0, 0, False)
    while top >= 0:
        d = top
        child = _next_child(stack, top, shapes, False)
        if child < 0:
            top -= 1
            continue
        kz, ky, kx = child >> 40, (child >> 20) & 0xFFFFF, child & 0xFFFFF
        inferred = _inferred(stack, top, d >= sd)
        if d + 1 == last:
            _octree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, d + 1, kz, ky, kx,
                         inferred)
            flag = flags[_at(shapes, offsets, d + 1, kz, ky, kx)]
        else:
            flag = _octree_inner(io, enc, el, truth, shapes, offsets, flags, nzp, sd, d + 1, kz, ky, kx, inferred)
        if io[0][fast.S_ERROR]:
            return
        if flag:
            stack[top, F_MATCH] = 1          # nz1st: a non-zero child seen
            if d + 1 < last:
                top = _open(stack, top, shapes, kz, ky, kx, False)


@_inline
def _child_count(cz, ch, cw, z, y, x, planar):
    count = 0
    for dz in range(1 if planar else 2):
        for dy in range(2):
            for dx in range(2):
                if (planar or 2 * z + dz < cz) and 2 * y + dy < ch and 2 * x + dx < cw:
                    count += 1
    return count


# Depth-first traversal with an explicit stack, one row per tree level (numba cannot cache a recursive
# function that another compiled function calls: numba issue #6061). Row d is the open node at depth d;
# children are visited in the order 000 ... 111 (x fastest), exactly as the recursion of TreeCoder.
F_Z, F_Y, F_X, F_CURSOR, F_SEEN, F_COUNT, F_MATCH, F_VALUE, F_SKIP = range(9)
STACK_COLUMNS = 9
MAX_TREE_LEVELS = 66            # a tree over 32-bit extents has at most 34 levels


@_inline
def _open(stack, top, shapes, z, y, x, planar):
    """Push the node (z, y, x) of depth top + 1 with its child count; returns the new top."""
    row = top + 1
    stack[row, F_Z], stack[row, F_Y], stack[row, F_X] = z, y, x
    stack[row, F_CURSOR], stack[row, F_SEEN], stack[row, F_MATCH] = 0, 0, 0
    stack[row, F_VALUE], stack[row, F_SKIP] = 0, 0
    stack[row, F_COUNT] = _child_count(shapes[row + 1, 0], shapes[row + 1, 1], shapes[row + 1, 2], z, y, x, planar)
    return row


@_inline
def _next_child(stack, top, shapes, planar):
    """The next existing child of the node on top, packed as z << 40 | y << 20 | x; -1 when there is none."""
    cz, ch, cw = shapes[top + 1, 0], shapes[top + 1, 1], shapes[top + 1, 2]
    end = 4 if planar else 8
    cursor = stack[top, F_CURSOR]
    while cursor < end:
        kz = stack[top, F_Z] if planar else 2 * stack[top, F_Z] + (cursor >> 2)
        ky, kx = 2 * stack[top, F_Y] + ((cursor >> 1) & 1), 2 * stack[top, F_X] + (cursor & 1)
        cursor += 1
        if kz < cz and ky < ch and kx < cw:
            stack[top, F_CURSOR] = cursor
            return (kz << 40) | (ky << 20) | kx
    stack[top, F_CURSOR] = cursor
    return -1


@_inline
def _inferred(stack, top, below_start):
    """nz1st / eq1st (A27, A28): the last existing child is inferred when no earlier sibling matched."""
    seen = stack[top, F_SEEN]
    stack[top, F_SEEN] = seen + 1
    return below_start and seen == stack[top, F_COUNT] - 1 and seen > 0 and stack[top, F_MATCH] == 0


# ------------------------------------------------------------------------------------------------ unitree
@_njit
def _fill(shapes, mp, d, z, y, x, value, planar):
    shift = shapes.shape[0] - 1 - d
    z0, z1 = (z, z + 1) if planar else (z << shift, min((z + 1) << shift, mp.shape[0]))
    y1, x1 = min((y + 1) << shift, mp.shape[1]), min((x + 1) << shift, mp.shape[2])
    for zz in range(z0, z1):
        for yy in range(y << shift, y1):
            for xx in range(x << shift, x1):
                mp[zz, yy, xx] = value
    return (z1 - z0) * (y1 - (y << shift)) * (x1 - (x << shift))


@_inline
def _unitree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y,
                  x):
    if sd == d or flags[_at(shapes, offsets, d - 1, z >> 1, y >> 1, x >> 1)]:
        value = 0
        leaf = _tm(enc, truth[2], z, y, x)
        if _flag(io, enc, el, UNI_MAP_NZFLAG, fast.inc_nz_neighbours(nzp[0], nzp[1]), 1 if leaf != 0 else 0):
            if cbook:
                value = _uegk(io, enc, el, UNI_INDEX, 0, leaf)
            else:
                sign = _flag(io, enc, el, UNI_SIGN, fast.inc_coef_sign(coef[0]), 1 if leaf < 0 else 0)
                magnitude = _uegk(io, enc, el, UNI_ABS_Q, 0, abs(leaf))
                value = -magnitude if sign else magnitude
    else:
        value = map_val[0]
        if not cbook and map_val[0]:
            if _flag(io, enc, el, UNI_MAP_SIGN, fast.inc_coef_sign(coef[0]), 1 if _tm(enc, truth[2], z, y, x) < 0 else 0):
                value = -map_val[0]
    mp[z, y, x] = value
    _push(coef, value)


@_inline
def _unitree_inner(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y, x, skip):
    """The node part of an internal unitree node; returns -1 when its children are not visited (a uniform
    subtree filled with mapVal, or an error), else whether they are skipped (uni_nzflag = 0, A12)."""
    flag = 0
    if d >= sd and not skip:
        here = _at(shapes, offsets, d, z, y, x)
        common = _tv(enc, truth[0], here)
        flag = _flag(io, enc, el, UNI_NZFLAG, 0, 1 if common != _tv(enc, truth[1], here) else 0)
        if not flag:
            nonzero = _flag(io, enc, el, UNI_MAP_NZFLAG, fast.inc_nz_neighbours(nzp[0], nzp[1]), 1 if common else 0)
            nzp[1] = nzp[0]
            nzp[0] = nonzero
            map_val[0] = 0
            if nonzero:
                map_val[0] = _uegk(io, enc, el, UNI_CMAP_VAL if cbook else UNI_QMAP_VAL, 0, common)
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if io[0][fast.S_ERROR]:
        return -1
    child_skip = (not flag) if d >= sd else False
    if child_skip and (cbook or map_val[0] == 0):
        leaves = _fill(shapes, mp, d, z, y, x, map_val[0], False)
        coef[1] = map_val[0] if leaves > 1 else coef[0]
        coef[0] = map_val[0]
        return -1
    return 1 if child_skip else 0


@_njit
def unitree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, stack):
    last = shapes.shape[0] - 1
    if last == 0:
        _unitree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, 0, 0, 0, 0)
        return
    skip = _unitree_inner(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, 0, 0, 0, 0,
                          False)
    if skip < 0:
        return
    top = _open(stack, -1, shapes, 0, 0, 0, False)
    stack[top, F_SKIP] = skip
    while top >= 0:
        d = top
        child = _next_child(stack, top, shapes, False)
        if child < 0:
            top -= 1
            continue
        kz, ky, kx = child >> 40, (child >> 20) & 0xFFFFF, child & 0xFFFFF
        if d + 1 == last:
            _unitree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d + 1, kz,
                          ky, kx)
            if io[0][fast.S_ERROR]:
                return
            continue
        skip = _unitree_inner(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d + 1,
                              kz, ky, kx, stack[top, F_SKIP] != 0)
        if io[0][fast.S_ERROR]:
            return
        if skip >= 0:
            top = _open(stack, top, shapes, kz, ky, kx, False)
            stack[top, F_SKIP] = skip


# ------------------------------------------------------------------------------------------------ tag trees
@_inline
def _tag_value(io, enc, el, node_truth, coef, sd, d, parent, nz_el, abs_el, delta_el, pair_inc):
    if d == sd:
        inc = fast.inc_coef_pair(coef[0], coef[1]) if pair_inc else 0
        value = 0
        if _flag(io, enc, el, nz_el, inc, 1 if node_truth else 0):
            value = _uegk(io, enc, el, abs_el, 0, node_truth)
    else:
        value = parent + _uegk(io, enc, el, delta_el, 0, node_truth - parent)
    if value > MAX_LEVEL:
        fast._fail(io[0], fast.ERR_VALUE_TOO_LARGE)
    return value


@_inline
def _tag_node_value(io, enc, el, truth, shapes, offsets, vals, coef, cbook, sd, d, z, y, x, skip):
    """The node part of tagtree3d (copy from the parent, value, leaf sign); returns the node's flat index."""
    here = _at(shapes, offsets, d, z, y, x)
    parent = 0
    if d:
        parent = vals[_at(shapes, offsets, d - 1, z >> 1, y >> 1, x >> 1)]
        vals[here] = parent
    if d >= sd:
        if not skip:
            if cbook:
                vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent, TGTM_NZFLAG_INDEX,
                                        TGTM_INDEX, TGTM_DELTA_INDEX, True)
            else:
                vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent, TGTM_NZFLAG_Q, TGTM_ABS_Q,
                                        TGTM_DELTA_ABS_Q, True)
            _push(coef, vals[here])
        if d == shapes.shape[0] - 1 and vals[here] != 0 and not cbook:
            if _flag(io, enc, el, TGTM_SIGN_Q, 0, 1 if _tm(enc, truth[2], z, y, x) < 0 else 0):
                vals[here] = -vals[here]
            coef[0] = vals[here]
    return here


@_njit
def tagtree(io, enc, el, truth, shapes, offsets, vals, mp, coef, cbook, sd, stack):
    last = shapes.shape[0] - 1
    here = _tag_node_value(io, enc, el, truth, shapes, offsets, vals, coef, cbook, sd, 0, 0, 0, 0, False)
    if io[0][fast.S_ERROR]:
        return
    if last == 0:
        mp[0, 0, 0] = vals[here]
        return
    top = _open(stack, -1, shapes, 0, 0, 0, False)
    stack[top, F_VALUE] = abs(vals[here])
    while top >= 0:
        d = top
        child = _next_child(stack, top, shapes, False)
        if child < 0:
            top -= 1
            continue
        kz, ky, kx = child >> 40, (child >> 20) & 0xFFFFF, child & 0xFFFFF
        inferred = _inferred(stack, top, d >= sd)
        kid = _tag_node_value(io, enc, el, truth, shapes, offsets, vals, coef, cbook, sd, d + 1, kz, ky, kx, inferred)
        if io[0][fast.S_ERROR]:
            return
        if stack[top, F_VALUE] == abs(vals[kid]):
            stack[top, F_MATCH] = 1          # eq1st: a child equal to the parent seen
        if d + 1 == last:
            mp[kz, ky, kx] = vals[kid]
        else:
            top = _open(stack, top, shapes, kz, ky, kx, False)
            stack[top, F_VALUE] = abs(vals[kid])


@_inline
def _uni_tag_node_value(io, enc, el, truth, shapes, offsets, flags, vals, coef, cbook, sd, d, z, y, x,
                        uni_skip, tgt_skip):
    """The node part of uni_tagtree3d; returns the node's uni flag (its value is in vals)."""
    last = shapes.shape[0] - 1
    here = _at(shapes, offsets, d, z, y, x)
    uni_flag = 0
    flags[here] = 0
    parent = 0
    if d:
        parent = vals[_at(shapes, offsets, d - 1, z, y >> 1, x >> 1)]
        vals[here] = parent
    top_left = (y & 1) == 0 and (x & 1) == 0
    if d >= sd:
        if not uni_skip:
            if sd < last or top_left:
                if d == last:
                    uniform = _tm(enc, truth[3], z, y >> 1, x >> 1) if sd == last else 1
                else:
                    uniform = 1 if _tv(enc, truth[0], here) == _tv(enc, truth[1], here) else 0
                uni_flag = _flag(io, enc, el, UT_NZFLAG, 0, 0 if uniform else 1)
            else:
                corner = _at(shapes, offsets, d, z, y & ~1, x & ~1)
                uni_flag = flags[corner]
                vals[here] = abs(vals[corner])
            flags[here] = uni_flag
            if not tgt_skip and (sd < last or top_left or uni_flag):
                if cbook:
                    vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent, UT_NZFLAG_INDEX,
                                            UT_INDEX, UT_DELTA_INDEX, False)
                else:
                    vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent, UT_NZFLAG_Q, UT_ABS_Q,
                                            UT_DELTA_ABS_Q, False)
                _push(coef, abs(vals[here]))
        if d == last and vals[here] != 0 and not cbook:
            if _flag(io, enc, el, UT_SIGN_Q, 0, 1 if _tm(enc, truth[2], z, y, x) < 0 else 0):
                vals[here] = -vals[here]
            coef[0] = vals[here]
    return uni_flag


@_inline
def _uni_tag_open(stack, top, shapes, offsets, vals, mp, cbook, sd, d, z, y, x, uni_flag):
    """After a uni-tagtree node at depth d: fill a uniform subtree (A12 shortcut) or push the node; new top."""
    here = _at(shapes, offsets, d, z, y, x)
    child_skip = (not uni_flag) if d >= sd else False
    if child_skip and (cbook or vals[here] == 0):
        _fill(shapes, mp, d, z, y, x, vals[here], True)
        return top
    top = _open(stack, top, shapes, z, y, x, True)
    stack[top, F_VALUE] = abs(vals[here])
    stack[top, F_SKIP] = 1 if child_skip else 0
    return top


@_njit
def uni_tagtree(io, enc, el, truth, shapes, offsets, flags, vals, mp, coef, cbook, sd, stack):
    last = shapes.shape[0] - 1
    for z in range(shapes[0, 0]):
        uni_flag = _uni_tag_node_value(io, enc, el, truth, shapes, offsets, flags, vals, coef, cbook, sd, 0, z, 0, 0,
                                       False, False)
        if io[0][fast.S_ERROR]:
            return
        if last == 0:
            mp[z, 0, 0] = vals[_at(shapes, offsets, 0, z, 0, 0)]
            continue
        top = _uni_tag_open(stack, -1, shapes, offsets, vals, mp, cbook, sd, 0, z, 0, 0, uni_flag)
        while top >= 0:
            d = top
            child = _next_child(stack, top, shapes, True)
            if child < 0:
                top -= 1
                continue
            ky, kx = (child >> 20) & 0xFFFFF, child & 0xFFFFF
            inferred = _inferred(stack, top, d >= sd)
            kid_flag = _uni_tag_node_value(io, enc, el, truth, shapes, offsets, flags, vals, coef, cbook, sd, d + 1,
                                           z, ky, kx, stack[top, F_SKIP] != 0, inferred)
            if io[0][fast.S_ERROR]:
                return
            kid = _at(shapes, offsets, d + 1, z, ky, kx)
            if stack[top, F_VALUE] == abs(vals[kid]):
                stack[top, F_MATCH] = 1      # eq1st
            if d + 1 == last:
                mp[z, ky, kx] = vals[kid]
            else:
                top = _uni_tag_open(stack, top, shapes, offsets, vals, mp, cbook, sd, d + 1, z, ky, kx, kid_flag)


# ------------------------------------------------------------------------------------------------ Python side
_NO_DATA = np.frombuffer(b"", dtype=np.uint8)
_NO_FLAT = np.zeros(1, dtype=np.int64)
_NO_MAP = np.zeros((1, 1, 1), dtype=np.int64)
_NO_GROUP = np.zeros((1, 1, 1), dtype=np.int8)


def _flat(levels: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([level.reshape(-1) for level in levels]).astype(np.int64)


def _truth(tree: str, index_map: np.ndarray) -> tuple:
    """Encoder truth of a tree over the CU's IndexMap, as in TreeCoder (pooled per level, root first)."""
    from .reference.tree_coder import leaf_group_uniform, pool_levels
    planar = tree == "uni_tagtree"
    magnitude = np.abs(index_map)
    if tree == "octree":
        return (_flat(pool_levels((index_map != 0).astype(np.int8), False, np.maximum)), _NO_FLAT, index_map,
                _NO_GROUP)
    low = _flat(pool_levels(magnitude, planar, np.minimum))
    if tree == "tagtree":
        return low, _NO_FLAT, index_map, _NO_GROUP
    high = _flat(pool_levels(magnitude, planar, np.maximum))
    group = leaf_group_uniform(magnitude).astype(np.int8) if planar else _NO_GROUP
    return low, high, index_map, group


def encode_tree(io: tuple, tree: str, shapes: list[tuple[int, int, int]], start_depth: int, cbook_size: int,
                out_map: np.ndarray, truth: tuple) -> None:
    """Encode one CU tree (the encoder's ``truth``) with the njit functions; the decoder calls them from
    codec.decode_fast."""
    shape_array = np.array(shapes, dtype=np.int64)
    sizes = shape_array.prod(axis=1)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    total = int(sizes.sum())
    coef = np.zeros(2, dtype=np.int64)
    nzp = np.zeros(2, dtype=np.int64)
    head = (io, 1, ELEMENTS, truth, shape_array, offsets)
    cbook = int(cbook_size != 0)
    stack = np.zeros((MAX_TREE_LEVELS, STACK_COLUMNS), dtype=np.int64)
    if tree == "octree":
        octree(*head, np.ones(total, dtype=np.int8), out_map, coef, nzp, cbook, start_depth, stack)
    elif tree == "unitree":
        unitree(*head, np.zeros(total, dtype=np.int8), out_map, coef, nzp, np.zeros(1, dtype=np.int64), cbook,
                start_depth, stack)
    elif tree == "tagtree":
        tagtree(*head, np.zeros(total, dtype=np.int64), out_map, coef, cbook, start_depth, stack)
    else:
        uni_tagtree(*head, np.zeros(total, dtype=np.int8), np.zeros(total, dtype=np.int64), out_map, coef, cbook,
                    start_depth, stack)
    fast.raise_on_error(io[0], element=tree)


class FastElementWriter:
    """ElementIO of the encoder over codec.fast's njit encoder; ``fork()`` counts bits for trial encodes."""

    decoding = False
    _MAX_ELEMENT_BINS = 128        # the longest bin string: UEGk of a 32-bit value with cMax 16

    def __init__(self, encoder: fast.FastEncoder | None = None):
        self.engine = encoder or fast.FastEncoder()
        self._dummy_state = np.zeros(fast.STATE_SIZE, dtype=np.int64)

    def _io(self) -> tuple:
        engine = self.engine
        return (self._dummy_state, engine.ctx, _NO_DATA, fast.NO_TRACE, engine.state, engine.out)

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        spec = element_spec(name)
        value = int(value)
        engine = self.engine
        if spec.binarization == "FL":
            length = spec.fixed_length if spec.fixed_length is not None else inputs["length"]
            if not 0 <= value < (1 << length):
                raise ValueError(f"element {name}: FL{length} value must be in 0..{(1 << length) - 1}, got {value}")
            engine.reserve(length)
            if spec.bypass:
                fast.encode_fl(engine.state, engine.ctx, engine.out, -1, fast.INC_CONST, value, length)
            else:
                fast.encode_decision(engine.state, engine.ctx, engine.out, spec.ctx_start + spec.ctx_inc(0, inputs),
                                     value)
        elif spec.binarization == "U":
            if not 0 <= value <= inputs["max_value"]:
                raise ValueError(f"element {name}: unary value must be in 0..{inputs['max_value']}, got {value}")
            engine.reserve(value + 1)
            fast.encode_u(engine.state, engine.ctx, engine.out, spec.ctx_start, fast._INC_CODES[spec.inc_rule], value)
        else:
            if not 0 <= value <= MAX_LEVEL:
                raise ValueError(f"element {name}: UEGk value must be in 0..{MAX_LEVEL}, got {value}")
            engine.reserve(self._MAX_ELEMENT_BINS)
            fast.encode_uegk(engine.state, engine.ctx, engine.out, spec.ctx_start, fast._INC_CODES[spec.inc_rule],
                             inputs.get("sign", 0), spec.c_max, spec.k, value)
        return value

    def code_tree(self, tree: str, shapes: list[tuple[int, int, int]], start_depth: int, cbook_size: int,
                  out_map: np.ndarray, truth_map: np.ndarray) -> None:
        nodes = sum(z * h * w for z, h, w in shapes)
        self.engine.reserve(nodes * self._MAX_ELEMENT_BINS)
        self._dummy_state[:] = 0
        try:
            encode_tree(self._io(), tree, shapes, start_depth, cbook_size, out_map,
                        _truth(tree, np.ascontiguousarray(truth_map, dtype=np.int64)))
        except CodecError as error:
            raise ValueError(f"tree {tree}: a value cannot be coded ({error.reason})") from None

    def fork(self) -> FastElementWriter:
        return FastElementWriter(self.engine.fork())

    @property
    def cost_bits(self) -> float:
        return self.engine.cost_bits

    @property
    def bins_encoded(self) -> int:
        return self.engine.bins_encoded

    def finish(self) -> bytes:
        return self.engine.finish()


__all__ = ["FastElementWriter", "encode_tree"]
