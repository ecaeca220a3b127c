"""The four coding trees of a CU in numba, over the compiled engine, for both directions.

Each tree is one njit function that decodes, or encodes the encoder's truth, and is a port of
``codec.reference.tree_coder.TreeCoder`` (same order of elements, same context inputs, same skips and
inferences); the tests require the same bytes and levels from both. The traversal is depth first with an
explicit stack (see ``_open``), because numba cannot cache a recursive function that other compiled code
calls, and the sublayer decoder (``codec.compiled.sublayer_decoder``) calls them. The encoder reaches them
one CU at a time through ``encode_tree`` (``FastElementWriter.code_tree``).

``io`` is the tuple (decoder state, contexts, data, trace, encoder state, out) and ``enc`` the direction;
``el`` is ``ELEMENT_ROWS`` and an element is named by its ``Element`` member. Tree levels live in one flat
array with per-level offsets (``shapes[l] = (z, h, w)``, root first).
"""
from __future__ import annotations

import numpy as np

from ..reference.binarization import MAX_EG_VALUE
from .aec_decoder import ERR_VALUE_TOO_LARGE, S_ERROR, decode_decision, decode_uegk, raise_on_error, set_error
from .aec_encoder import encode_decision, encode_uegk
from .contexts import (ELEMENT_ROWS, ROW_C_MAX, ROW_CTX, ROW_K, ROW_RULE, Element, inc_coef_pair, inc_coef_sign,
                       inc_nz_neighbours)
from .jit_cache import njit


@njit(inline="always")
def _flag(io, enc, el, element, inc, truth):
    """A one-bin element: decoded, or ``truth`` encoded (io = decoder state, ctx, data, trace, encoder state, out)."""
    if enc:
        encode_decision(io[4], io[1], io[5], el[element, ROW_CTX] + inc, truth)
        return truth
    return decode_decision(io[0], io[1], io[2], io[3], el[element, ROW_CTX] + inc)


@njit(inline="always")
def _uegk(io, enc, el, element, sign, truth):
    if enc:
        if truth < 0 or truth > MAX_EG_VALUE:
            set_error(io[0], ERR_VALUE_TOO_LARGE)
            return 0
        encode_uegk(io[4], io[1], io[5], el[element, ROW_CTX], el[element, ROW_RULE], sign, el[element, ROW_C_MAX],
                    el[element, ROW_K], truth)
        return truth
    return decode_uegk(io[0], io[1], io[2], io[3], el[element, ROW_CTX], el[element, ROW_RULE], sign,
                       el[element, ROW_C_MAX], el[element, ROW_K])


@njit(inline="always")
def _tv(enc, flat, index):
    """Encoder truth at a flat tree index (0 when decoding: the truth arrays are placeholders then)."""
    return flat[index] if enc else 0


@njit(inline="always")
def _tm(enc, levels, z, y, x):
    """Encoder truth of a leaf of the CU's map (0 when decoding)."""
    return levels[z, y, x] if enc else 0


@njit(inline="always")
def _at(shapes, offsets, level, z, y, x):
    return offsets[level] + (z * shapes[level, 1] + y) * shapes[level, 2] + x


@njit(inline="always")
def _push(coef, value):
    coef[1] = coef[0]
    coef[0] = value


# ------------------------------------------------------------------------------------------------ octree
# Each tree has an inlined leaf step, used by its parent's child loop: leaves are most of the nodes and a
# recursive call per leaf would cost more than the leaf's bins.
@njit(inline="always")
def _octree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, d, z, y, x, skip):
    flag = 1
    if d >= sd and not skip:
        flag = _flag(io, enc, el, Element.oct_nzflag, inc_coef_sign(coef[0]),
                     _tv(enc, truth[0], _at(shapes, offsets, d, z, y, x)))
        nzp[1] = nzp[0]
        nzp[0] = flag
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if flag == 0 or io[0][S_ERROR]:
        return
    leaf = _tm(enc, truth[2], z, y, x)
    if cbook:
        value = _uegk(io, enc, el, Element.oct_index, 0, leaf)
    else:
        sign = _flag(io, enc, el, Element.oct_sign, inc_coef_pair(coef[0], coef[1]), 1 if leaf < 0 else 0)
        magnitude = _uegk(io, enc, el, Element.oct_abs_q, sign, abs(leaf))
        value = -magnitude if sign else magnitude
    mp[z, y, x] = value
    _push(coef, value)


@njit(inline="always")
def _octree_inner(io, enc, el, truth, shapes, offsets, flags, nzp, sd, d, z, y, x, skip):
    """The node part of an internal octree node (oct_nzflag unless skipped or above startDepth); its flag."""
    flag = 1
    if d >= sd and not skip:
        flag = _flag(io, enc, el, Element.oct_nzflag, inc_nz_neighbours(nzp[0], nzp[1]),
                     _tv(enc, truth[0], _at(shapes, offsets, d, z, y, x)))
        nzp[1] = nzp[0]
        nzp[0] = flag
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    return flag


@njit
def octree(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, stack):
    last = shapes.shape[0] - 1
    if last == 0:
        _octree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, cbook, sd, 0, 0, 0, 0, False)
        return
    if not _octree_inner(io, enc, el, truth, shapes, offsets, flags, nzp, sd, 0, 0, 0, 0, False) or io[0][S_ERROR]:
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
        if io[0][S_ERROR]:
            return
        if flag:
            stack[top, F_MATCH] = 1          # nz1st: a non-zero child seen
            if d + 1 < last:
                top = _open(stack, top, shapes, kz, ky, kx, False)


@njit(inline="always")
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


@njit(inline="always")
def _open(stack, top, shapes, z, y, x, planar):
    """Push the node (z, y, x) of depth top + 1 with its child count; returns the new top."""
    row = top + 1
    stack[row, F_Z], stack[row, F_Y], stack[row, F_X] = z, y, x
    stack[row, F_CURSOR], stack[row, F_SEEN], stack[row, F_MATCH] = 0, 0, 0
    stack[row, F_VALUE], stack[row, F_SKIP] = 0, 0
    stack[row, F_COUNT] = _child_count(shapes[row + 1, 0], shapes[row + 1, 1], shapes[row + 1, 2], z, y, x, planar)
    return row


@njit(inline="always")
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


@njit(inline="always")
def _inferred(stack, top, below_start):
    """nz1st / eq1st (A27, A28): the last existing child is inferred when no earlier sibling matched."""
    seen = stack[top, F_SEEN]
    stack[top, F_SEEN] = seen + 1
    return below_start and seen == stack[top, F_COUNT] - 1 and seen > 0 and stack[top, F_MATCH] == 0


# ------------------------------------------------------------------------------------------------ unitree
@njit
def _fill(shapes, mp, d, z, y, x, value, planar):
    shift = shapes.shape[0] - 1 - d
    z0, z1 = (z, z + 1) if planar else (z << shift, min((z + 1) << shift, mp.shape[0]))
    y1, x1 = min((y + 1) << shift, mp.shape[1]), min((x + 1) << shift, mp.shape[2])
    for zz in range(z0, z1):
        for yy in range(y << shift, y1):
            for xx in range(x << shift, x1):
                mp[zz, yy, xx] = value
    return (z1 - z0) * (y1 - (y << shift)) * (x1 - (x << shift))


@njit(inline="always")
def _unitree_leaf(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y,
                  x):
    if sd == d or flags[_at(shapes, offsets, d - 1, z >> 1, y >> 1, x >> 1)]:
        value = 0
        leaf = _tm(enc, truth[2], z, y, x)
        if _flag(io, enc, el, Element.uni_map_nzflag, inc_nz_neighbours(nzp[0], nzp[1]), 1 if leaf != 0 else 0):
            if cbook:
                value = _uegk(io, enc, el, Element.uni_index, 0, leaf)
            else:
                sign = _flag(io, enc, el, Element.uni_sign, inc_coef_sign(coef[0]), 1 if leaf < 0 else 0)
                magnitude = _uegk(io, enc, el, Element.uni_abs_q, 0, abs(leaf))
                value = -magnitude if sign else magnitude
    else:
        value = map_val[0]
        if not cbook and map_val[0]:
            negative = 1 if _tm(enc, truth[2], z, y, x) < 0 else 0
            if _flag(io, enc, el, Element.uni_map_sign, inc_coef_sign(coef[0]), negative):
                value = -map_val[0]
    mp[z, y, x] = value
    _push(coef, value)


@njit(inline="always")
def _unitree_inner(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y, x, skip):
    """The node part of an internal unitree node; returns -1 when its children are not visited (a uniform
    subtree filled with mapVal, or an error), else whether they are skipped (uni_nzflag = 0, A12)."""
    flag = 0
    if d >= sd and not skip:
        here = _at(shapes, offsets, d, z, y, x)
        common = _tv(enc, truth[0], here)
        flag = _flag(io, enc, el, Element.uni_nzflag, 0, 1 if common != _tv(enc, truth[1], here) else 0)
        if not flag:
            nonzero = _flag(io, enc, el, Element.uni_map_nzflag, inc_nz_neighbours(nzp[0], nzp[1]), 1 if common else 0)
            nzp[1] = nzp[0]
            nzp[0] = nonzero
            map_val[0] = 0
            if nonzero:
                map_val[0] = _uegk(io, enc, el, Element.uni_cmap_val if cbook else Element.uni_qmap_val, 0, common)
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if io[0][S_ERROR]:
        return -1
    child_skip = (not flag) if d >= sd else False
    if child_skip and (cbook or map_val[0] == 0):
        leaves = _fill(shapes, mp, d, z, y, x, map_val[0], False)
        coef[1] = map_val[0] if leaves > 1 else coef[0]
        coef[0] = map_val[0]
        return -1
    return 1 if child_skip else 0


@njit
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
            if io[0][S_ERROR]:
                return
            continue
        skip = _unitree_inner(io, enc, el, truth, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d + 1,
                              kz, ky, kx, stack[top, F_SKIP] != 0)
        if io[0][S_ERROR]:
            return
        if skip >= 0:
            top = _open(stack, top, shapes, kz, ky, kx, False)
            stack[top, F_SKIP] = skip


# ------------------------------------------------------------------------------------------------ tag trees
@njit(inline="always")
def _tag_value(io, enc, el, node_truth, coef, sd, d, parent, nz_el, abs_el, delta_el, pair_inc):
    if d == sd:
        inc = inc_coef_pair(coef[0], coef[1]) if pair_inc else 0
        value = 0
        if _flag(io, enc, el, nz_el, inc, 1 if node_truth else 0):
            value = _uegk(io, enc, el, abs_el, 0, node_truth)
    else:
        value = parent + _uegk(io, enc, el, delta_el, 0, node_truth - parent)
    if value > MAX_EG_VALUE:
        set_error(io[0], ERR_VALUE_TOO_LARGE)
    return value


@njit(inline="always")
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
                vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent,
                                        Element.tgtm_nzflag_index, Element.tgtm_index, Element.tgtm_delta_index, True)
            else:
                vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent,
                                        Element.tgtm_nzflag_q, Element.tgtm_abs_q, Element.tgtm_delta_abs_q, True)
            _push(coef, vals[here])
        if d == shapes.shape[0] - 1 and vals[here] != 0 and not cbook:
            if _flag(io, enc, el, Element.tgtm_sign_q, 0, 1 if _tm(enc, truth[2], z, y, x) < 0 else 0):
                vals[here] = -vals[here]
            coef[0] = vals[here]
    return here


@njit
def tagtree(io, enc, el, truth, shapes, offsets, vals, mp, coef, cbook, sd, stack):
    last = shapes.shape[0] - 1
    here = _tag_node_value(io, enc, el, truth, shapes, offsets, vals, coef, cbook, sd, 0, 0, 0, 0, False)
    if io[0][S_ERROR]:
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
        if io[0][S_ERROR]:
            return
        if stack[top, F_VALUE] == abs(vals[kid]):
            stack[top, F_MATCH] = 1          # eq1st: a child equal to the parent seen
        if d + 1 == last:
            mp[kz, ky, kx] = vals[kid]
        else:
            top = _open(stack, top, shapes, kz, ky, kx, False)
            stack[top, F_VALUE] = abs(vals[kid])


@njit(inline="always")
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
                uni_flag = _flag(io, enc, el, Element.uni_tgt_nzflag, 0, 0 if uniform else 1)
            else:
                corner = _at(shapes, offsets, d, z, y & ~1, x & ~1)
                uni_flag = flags[corner]
                vals[here] = abs(vals[corner])
            flags[here] = uni_flag
            if not tgt_skip and (sd < last or top_left or uni_flag):
                if cbook:
                    vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent,
                                            Element.uni_tgt_nzflag_index, Element.uni_tgt_index,
                                            Element.uni_tgt_delta_index, False)
                else:
                    vals[here] = _tag_value(io, enc, el, _tv(enc, truth[0], here), coef, sd, d, parent,
                                            Element.uni_tgt_nzflag_q, Element.uni_tgt_abs_q,
                                            Element.uni_tgt_delta_abs_q, False)
                _push(coef, abs(vals[here]))
        if d == last and vals[here] != 0 and not cbook:
            if _flag(io, enc, el, Element.uni_tgt_sign_q, 0, 1 if _tm(enc, truth[2], z, y, x) < 0 else 0):
                vals[here] = -vals[here]
            coef[0] = vals[here]
    return uni_flag


@njit(inline="always")
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


@njit
def uni_tagtree(io, enc, el, truth, shapes, offsets, flags, vals, mp, coef, cbook, sd, stack):
    last = shapes.shape[0] - 1
    for z in range(shapes[0, 0]):
        uni_flag = _uni_tag_node_value(io, enc, el, truth, shapes, offsets, flags, vals, coef, cbook, sd, 0, z, 0, 0,
                                       False, False)
        if io[0][S_ERROR]:
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
            if io[0][S_ERROR]:
                return
            kid = _at(shapes, offsets, d + 1, z, ky, kx)
            if stack[top, F_VALUE] == abs(vals[kid]):
                stack[top, F_MATCH] = 1      # eq1st
            if d + 1 == last:
                mp[z, ky, kx] = vals[kid]
            else:
                top = _uni_tag_open(stack, top, shapes, offsets, vals, mp, cbook, sd, d + 1, z, ky, kx, kid_flag)


# ------------------------------------------------------------------------------------------------ Python side
# The truth arrays of the decoding direction, and of the parts a tree does not use: placeholders never read.
PLACEHOLDER_FLAT = np.zeros(1, dtype=np.int64)
PLACEHOLDER_MAP = np.zeros((1, 1, 1), dtype=np.int64)
PLACEHOLDER_GROUP = np.zeros((1, 1, 1), dtype=np.int8)
DECODING_TRUTH = (PLACEHOLDER_FLAT, PLACEHOLDER_FLAT, PLACEHOLDER_MAP, PLACEHOLDER_GROUP)


@njit
def pool_into(leaves, shapes, offsets, use_max, flat):
    """``reference.tree_coder.pool_levels`` of ``leaves`` into ``flat``, the tree of ``shapes`` (root first) laid
    out as the tree coders index it (level l from offsets[l]): each node holds the minimum (or maximum) of its
    children, a child index 2i and 2i+1 (an odd last index paired with itself) along every axis the level halves;
    z is kept where the shapes keep it."""
    last = shapes.shape[0] - 1
    zdepth, height, width = shapes[last, 0], shapes[last, 1], shapes[last, 2]
    for z in range(zdepth):
        for y in range(height):
            for x in range(width):
                flat[offsets[last] + (z * height + y) * width + x] = leaves[z, y, x]
    for level in range(last - 1, -1, -1):
        cz, ch, cw = shapes[level + 1, 0], shapes[level + 1, 1], shapes[level + 1, 2]
        pz, ph, pw = shapes[level, 0], shapes[level, 1], shapes[level, 2]
        child = offsets[level + 1]
        for z in range(pz):
            z0 = z if pz == cz else 2 * z
            z1 = z if pz == cz else min(2 * z + 1, cz - 1)
            for y in range(ph):
                y0, y1 = 2 * y, min(2 * y + 1, ch - 1)
                for x in range(pw):
                    x0, x1 = 2 * x, min(2 * x + 1, cw - 1)
                    best = flat[child + (z0 * ch + y0) * cw + x0]
                    for kz in (z0, z1):
                        for ky in (y0, y1):
                            for kx in (x0, x1):
                                value = flat[child + (kz * ch + ky) * cw + kx]
                                if (value > best) if use_max else (value < best):
                                    best = value
                    flat[offsets[level] + (z * ph + y) * pw + x] = best


@njit
def uniform_leaf_groups_into(magnitude, groups):
    """``reference.tree_coder.leaf_group_uniform`` into ``groups`` (int8, all ones on entry): per 2x2 leaf group,
    whether its existing values are equal."""
    zdepth, height, width = magnitude.shape
    for z in range(zdepth):
        for y in range(height):
            for x in range(width):
                if magnitude[z, y, x] != magnitude[z, y & ~1, x & ~1]:
                    groups[z, y >> 1, x >> 1] = 0


def pooled_levels(leaves: np.ndarray, shapes: np.ndarray, offsets: np.ndarray, use_max: bool) -> np.ndarray:
    """``pool_into`` a new flat array (int64 ``leaves``; ``offsets`` of the levels, ``shapes`` root first)."""
    flat = np.empty(int(offsets[-1] + shapes[-1].prod()), dtype=np.int64)
    pool_into(leaves, shapes, offsets, use_max, flat)
    return flat


def uniform_leaf_groups(magnitude: np.ndarray) -> np.ndarray:
    """``uniform_leaf_groups_into`` a new int8 array."""
    zdepth, height, width = magnitude.shape
    groups = np.ones((zdepth, (height + 1) >> 1, (width + 1) >> 1), dtype=np.int8)
    uniform_leaf_groups_into(magnitude, groups)
    return groups


def tree_truth(tree: str, index_map: np.ndarray, shapes: np.ndarray, offsets: np.ndarray) -> tuple:
    """Encoder truth of a tree over the CU's int64 IndexMap, as in TreeCoder (pooled per level, root first, over
    the tree's ``shapes`` at ``offsets``)."""
    if tree == "octree":
        nonzero = (index_map != 0).astype(np.int64)
        return pooled_levels(nonzero, shapes, offsets, True), PLACEHOLDER_FLAT, index_map, PLACEHOLDER_GROUP
    magnitude = np.abs(index_map)
    low = pooled_levels(magnitude, shapes, offsets, False)
    if tree == "tagtree":
        return low, PLACEHOLDER_FLAT, index_map, PLACEHOLDER_GROUP
    high = pooled_levels(magnitude, shapes, offsets, True)
    group = uniform_leaf_groups(magnitude) if tree == "uni_tagtree" else PLACEHOLDER_GROUP
    return low, high, index_map, group


def encode_tree(io: tuple, tree: str, shapes: list[tuple[int, int, int]], start_depth: int, cbook_size: int,
                out_map: np.ndarray, index_map: np.ndarray) -> None:
    """Encode one CU tree (its ``index_map``, pooled by ``tree_truth``) with the njit functions; raises
    CodecError if a value cannot be coded. The decoder calls the trees from its sublayer loop."""
    shape_array = np.array(shapes, dtype=np.int64)
    sizes = shape_array.prod(axis=1)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    truth = tree_truth(tree, index_map, shape_array, offsets)
    total = int(sizes.sum())
    coef = np.zeros(2, dtype=np.int64)
    nzp = np.zeros(2, dtype=np.int64)
    head = (io, 1, ELEMENT_ROWS, truth, shape_array, offsets)
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
    raise_on_error(io[0], element=tree)
