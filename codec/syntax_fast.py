"""The decoder's hot path compiled with numba: the four coding trees of a CU over codec.fast's engine.

``FastElementReader`` is the ElementIO of codec.syntax over the njit engine arrays of codec.fast (state,
contexts, data): the headers, codebooks and escapes are parsed by the Python syntax element by element,
and ``TreeCoder`` hands a whole tree to the njit functions below when its reader is a FastElementReader.
They are line-by-line ports of ``TreeCoder``'s decoding direction (same order of elements, same context
inputs, same skips and inferences); tests/test_codec_roundtrip.py decodes every stream with both.

Tree levels live in one flat array with per-level offsets (``shapes[l] = (z, h, w)``, root first).
"""
from __future__ import annotations

import numba
import numpy as np

from . import fast
from .contexts import element_spec
from .errors import CodecError

_njit = numba.njit(cache=True, nogil=True, _nrt=False)   # no allocation inside: no refcounting per call
_inline = numba.njit(cache=True, nogil=True, _nrt=False, inline="always")   # small helpers, inlined in IR

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
def _flag(state, ctx, data, trace, el, element, inc):
    return fast.decode_decision(state, ctx, data, trace, el[element, 0] + inc)


@_inline
def _uegk(state, ctx, data, trace, el, element, sign):
    return fast.decode_uegk(state, ctx, data, trace, el[element, 0], el[element, 1], sign, el[element, 2],
                            el[element, 3])


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
def _octree_leaf(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, cbook, sd, d, z, y, x, skip):
    flag = 1
    if d >= sd and not skip:
        flag = _flag(state, ctx, data, trace, el, OCT_NZFLAG, fast.inc_coef_sign(coef[0]))
        nzp[1] = nzp[0]
        nzp[0] = flag
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if flag == 0 or state[fast.S_ERROR]:
        return
    if cbook:
        value = _uegk(state, ctx, data, trace, el, OCT_INDEX, 0)
    else:
        sign = _flag(state, ctx, data, trace, el, OCT_SIGN, fast.inc_coef_pair(coef[0], coef[1]))
        magnitude = _uegk(state, ctx, data, trace, el, OCT_ABS_Q, sign)
        value = -magnitude if sign else magnitude
    mp[z, y, x] = value
    _push(coef, value)


@_njit
def octree_node(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, cbook, sd, d, z, y, x,
                skip):
    last = shapes.shape[0] - 1
    if d == last:
        _octree_leaf(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, cbook, sd, d, z, y, x, skip)
        return
    flag = 1
    if d >= sd and not skip:
        flag = _flag(state, ctx, data, trace, el, OCT_NZFLAG, fast.inc_nz_neighbours(nzp[0], nzp[1]))
        nzp[1] = nzp[0]
        nzp[0] = flag
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if flag == 0 or state[fast.S_ERROR]:
        return
    cz, ch, cw = shapes[d + 1, 0], shapes[d + 1, 1], shapes[d + 1, 2]
    count = _child_count(cz, ch, cw, z, y, x, False)
    i = 0
    any_nonzero = False
    for dz in range(2):
        for dy in range(2):
            for dx in range(2):
                kz, ky, kx = 2 * z + dz, 2 * y + dy, 2 * x + dx
                if kz < cz and ky < ch and kx < cw:
                    inferred = d >= sd and i == count - 1 and i > 0 and not any_nonzero
                    if d + 1 == last:
                        _octree_leaf(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, cbook, sd,
                                     d + 1, kz, ky, kx, inferred)
                    else:
                        octree_node(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, cbook, sd,
                                    d + 1, kz, ky, kx, inferred)
                    if state[fast.S_ERROR]:
                        return
                    any_nonzero = any_nonzero or flags[_at(shapes, offsets, d + 1, kz, ky, kx)] != 0
                    i += 1


@_inline
def _child_count(cz, ch, cw, z, y, x, planar):
    count = 0
    for dz in range(1 if planar else 2):
        for dy in range(2):
            for dx in range(2):
                if (planar or 2 * z + dz < cz) and 2 * y + dy < ch and 2 * x + dx < cw:
                    count += 1
    return count


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
def _unitree_leaf(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y,
                  x):
    if sd == d or flags[_at(shapes, offsets, d - 1, z >> 1, y >> 1, x >> 1)]:
        value = 0
        if _flag(state, ctx, data, trace, el, UNI_MAP_NZFLAG, fast.inc_nz_neighbours(nzp[0], nzp[1])):
            if cbook:
                value = _uegk(state, ctx, data, trace, el, UNI_INDEX, 0)
            else:
                sign = _flag(state, ctx, data, trace, el, UNI_SIGN, fast.inc_coef_sign(coef[0]))
                magnitude = _uegk(state, ctx, data, trace, el, UNI_ABS_Q, 0)
                value = -magnitude if sign else magnitude
    else:
        value = map_val[0]
        if not cbook and map_val[0]:
            if _flag(state, ctx, data, trace, el, UNI_MAP_SIGN, fast.inc_coef_sign(coef[0])):
                value = -map_val[0]
    mp[z, y, x] = value
    _push(coef, value)


@_njit
def unitree_node(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y,
                 x, skip):
    last = shapes.shape[0] - 1
    if d == last:
        _unitree_leaf(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, map_val, cbook, sd, d, z, y,
                      x)
        return
    flag = 0
    if d >= sd and not skip:
        flag = _flag(state, ctx, data, trace, el, UNI_NZFLAG, 0)
        if not flag:
            nonzero = _flag(state, ctx, data, trace, el, UNI_MAP_NZFLAG, fast.inc_nz_neighbours(nzp[0], nzp[1]))
            nzp[1] = nzp[0]
            nzp[0] = nonzero
            map_val[0] = 0
            if nonzero:
                map_val[0] = _uegk(state, ctx, data, trace, el, UNI_CMAP_VAL if cbook else UNI_QMAP_VAL, 0)
    flags[_at(shapes, offsets, d, z, y, x)] = flag
    if state[fast.S_ERROR]:
        return
    child_skip = (not flag) if d >= sd else False
    if child_skip and (cbook or map_val[0] == 0):
        leaves = _fill(shapes, mp, d, z, y, x, map_val[0], False)
        coef[1] = map_val[0] if leaves > 1 else coef[0]
        coef[0] = map_val[0]
        return
    cz, ch, cw = shapes[d + 1, 0], shapes[d + 1, 1], shapes[d + 1, 2]
    for dz in range(2):
        for dy in range(2):
            for dx in range(2):
                kz, ky, kx = 2 * z + dz, 2 * y + dy, 2 * x + dx
                if kz < cz and ky < ch and kx < cw:
                    if d + 1 == last:
                        _unitree_leaf(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, map_val,
                                      cbook, sd, d + 1, kz, ky, kx)
                    else:
                        unitree_node(state, ctx, data, trace, el, shapes, offsets, flags, mp, coef, nzp, map_val,
                                     cbook, sd, d + 1, kz, ky, kx, child_skip)
                    if state[fast.S_ERROR]:
                        return


# ------------------------------------------------------------------------------------------------ tag trees
@_inline
def _tag_value(state, ctx, data, trace, el, coef, sd, d, parent, nz_el, abs_el, delta_el, pair_inc):
    if d == sd:
        inc = fast.inc_coef_pair(coef[0], coef[1]) if pair_inc else 0
        value = 0
        if _flag(state, ctx, data, trace, el, nz_el, inc):
            value = _uegk(state, ctx, data, trace, el, abs_el, 0)
    else:
        value = parent + _uegk(state, ctx, data, trace, el, delta_el, 0)
    if value > MAX_LEVEL:
        fast._fail(state, fast.ERR_VALUE_TOO_LARGE)
    return value


@_inline
def _tag_node_value(state, ctx, data, trace, el, shapes, offsets, vals, coef, cbook, sd, d, z, y, x, skip):
    """The node part of tagtree3d (copy from the parent, value, leaf sign); returns the node's flat index."""
    here = _at(shapes, offsets, d, z, y, x)
    parent = 0
    if d:
        parent = vals[_at(shapes, offsets, d - 1, z >> 1, y >> 1, x >> 1)]
        vals[here] = parent
    if d >= sd:
        if not skip:
            if cbook:
                vals[here] = _tag_value(state, ctx, data, trace, el, coef, sd, d, parent, TGTM_NZFLAG_INDEX,
                                        TGTM_INDEX, TGTM_DELTA_INDEX, True)
            else:
                vals[here] = _tag_value(state, ctx, data, trace, el, coef, sd, d, parent, TGTM_NZFLAG_Q, TGTM_ABS_Q,
                                        TGTM_DELTA_ABS_Q, True)
            _push(coef, vals[here])
        if d == shapes.shape[0] - 1 and vals[here] != 0 and not cbook:
            if _flag(state, ctx, data, trace, el, TGTM_SIGN_Q, 0):
                vals[here] = -vals[here]
            coef[0] = vals[here]
    return here


@_njit
def tagtree_node(state, ctx, data, trace, el, shapes, offsets, vals, mp, coef, cbook, sd, d, z, y, x, skip):
    last = shapes.shape[0] - 1
    here = _tag_node_value(state, ctx, data, trace, el, shapes, offsets, vals, coef, cbook, sd, d, z, y, x, skip)
    if state[fast.S_ERROR]:
        return
    if d == last:
        mp[z, y, x] = vals[here]
        return
    cz, ch, cw = shapes[d + 1, 0], shapes[d + 1, 1], shapes[d + 1, 2]
    count = _child_count(cz, ch, cw, z, y, x, False)
    magnitude = abs(vals[here])
    i = 0
    any_equal = False
    for dz in range(2):
        for dy in range(2):
            for dx in range(2):
                kz, ky, kx = 2 * z + dz, 2 * y + dy, 2 * x + dx
                if kz < cz and ky < ch and kx < cw:
                    inferred = d >= sd and i == count - 1 and i > 0 and not any_equal
                    if d + 1 == last:
                        kid = _tag_node_value(state, ctx, data, trace, el, shapes, offsets, vals, coef, cbook, sd,
                                              d + 1, kz, ky, kx, inferred)
                        mp[kz, ky, kx] = vals[kid]
                    else:
                        tagtree_node(state, ctx, data, trace, el, shapes, offsets, vals, mp, coef, cbook, sd, d + 1,
                                     kz, ky, kx, inferred)
                    if state[fast.S_ERROR]:
                        return
                    any_equal = any_equal or magnitude == abs(vals[_at(shapes, offsets, d + 1, kz, ky, kx)])
                    i += 1


@_inline
def _uni_tag_node_value(state, ctx, data, trace, el, shapes, offsets, flags, vals, coef, cbook, sd, d, z, y, x,
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
                uni_flag = _flag(state, ctx, data, trace, el, UT_NZFLAG, 0)
            else:
                corner = _at(shapes, offsets, d, z, y & ~1, x & ~1)
                uni_flag = flags[corner]
                vals[here] = abs(vals[corner])
            flags[here] = uni_flag
            if not tgt_skip and (sd < last or top_left or uni_flag):
                if cbook:
                    vals[here] = _tag_value(state, ctx, data, trace, el, coef, sd, d, parent, UT_NZFLAG_INDEX,
                                            UT_INDEX, UT_DELTA_INDEX, False)
                else:
                    vals[here] = _tag_value(state, ctx, data, trace, el, coef, sd, d, parent, UT_NZFLAG_Q, UT_ABS_Q,
                                            UT_DELTA_ABS_Q, False)
                _push(coef, abs(vals[here]))
        if d == last and vals[here] != 0 and not cbook:
            if _flag(state, ctx, data, trace, el, UT_SIGN_Q, 0):
                vals[here] = -vals[here]
            coef[0] = vals[here]
    return uni_flag


@_njit
def uni_tagtree_node(state, ctx, data, trace, el, shapes, offsets, flags, vals, mp, coef, cbook, sd, d, z, y, x,
                     uni_skip, tgt_skip):
    last = shapes.shape[0] - 1
    uni_flag = _uni_tag_node_value(state, ctx, data, trace, el, shapes, offsets, flags, vals, coef, cbook, sd, d, z,
                                   y, x, uni_skip, tgt_skip)
    here = _at(shapes, offsets, d, z, y, x)
    if state[fast.S_ERROR]:
        return
    if d == last:
        mp[z, y, x] = vals[here]
        return
    child_skip = (not uni_flag) if d >= sd else False
    if child_skip and (cbook or vals[here] == 0):
        _fill(shapes, mp, d, z, y, x, vals[here], True)
        return
    ch, cw = shapes[d + 1, 1], shapes[d + 1, 2]
    count = _child_count(0, ch, cw, z, y, x, True)
    magnitude = abs(vals[here])
    i = 0
    any_equal = False
    for dy in range(2):
        for dx in range(2):
            ky, kx = 2 * y + dy, 2 * x + dx
            if ky < ch and kx < cw:
                inferred = d >= sd and i == count - 1 and i > 0 and not any_equal
                if d + 1 == last:
                    _uni_tag_node_value(state, ctx, data, trace, el, shapes, offsets, flags, vals, coef, cbook, sd,
                                        d + 1, z, ky, kx, child_skip, inferred)
                    mp[z, ky, kx] = vals[_at(shapes, offsets, d + 1, z, ky, kx)]
                else:
                    uni_tagtree_node(state, ctx, data, trace, el, shapes, offsets, flags, vals, mp, coef, cbook, sd,
                                     d + 1, z, ky, kx, child_skip, inferred)
                if state[fast.S_ERROR]:
                    return
                any_equal = any_equal or magnitude == abs(vals[_at(shapes, offsets, d + 1, z, ky, kx)])
                i += 1


# ------------------------------------------------------------------------------------------------ Python side
def decode_tree(reader: "FastElementReader", tree: str, shapes: list[tuple[int, int, int]], start_depth: int,
                cbook_size: int, out_map: np.ndarray) -> None:
    """Decode one CU tree into ``out_map`` with the njit functions; raises CodecError on a corrupt stream."""
    shape_array = np.array(shapes, dtype=np.int64)
    sizes = shape_array.prod(axis=1)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    total = int(sizes.sum())
    coef = np.zeros(2, dtype=np.int64)
    nzp = np.zeros(2, dtype=np.int64)
    args = (reader.state, reader.ctx, reader.data, fast.NO_TRACE, ELEMENTS, shape_array, offsets)
    cbook = int(cbook_size != 0)
    if tree == "octree":
        octree_node(*args, np.ones(total, dtype=np.int8), out_map, coef, nzp, cbook, start_depth, 0, 0, 0, 0, False)
    elif tree == "unitree":
        unitree_node(*args, np.zeros(total, dtype=np.int8), out_map, coef, nzp, np.zeros(1, dtype=np.int64), cbook,
                     start_depth, 0, 0, 0, 0, False)
    elif tree == "tagtree":
        tagtree_node(*args, np.zeros(total, dtype=np.int64), out_map, coef, cbook, start_depth, 0, 0, 0, 0, False)
    else:
        flags, vals = np.zeros(total, dtype=np.int8), np.zeros(total, dtype=np.int64)
        for z in range(shapes[0][0]):
            uni_tagtree_node(*args, flags, vals, out_map, coef, cbook, start_depth, 0, z, 0, 0, False, False)
            if reader.state[fast.S_ERROR]:
                break
    fast.raise_on_error(reader.state, element=tree)


class FastElementReader:
    """ElementIO of the decoder over codec.fast's njit engine (see the module docstring)."""

    decoding = True

    def __init__(self, data: bytes):
        self.data = np.frombuffer(bytes(data), dtype=np.uint8)
        self.state = fast.new_state(self.data)
        self.ctx = fast.new_contexts()
        fast.raise_on_error(self.state)

    @property
    def bins_decoded(self) -> int:
        return int(self.state[fast.S_BINS])

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

    def decode_tree(self, tree: str, shapes: list[tuple[int, int, int]], start_depth: int, cbook_size: int,
                    out_map: np.ndarray) -> None:
        decode_tree(self, tree, shapes, start_depth, cbook_size, out_map)

    def finish(self) -> int:
        end = fast.finish(self.state, self.data, fast.NO_TRACE)
        fast.raise_on_error(self.state, element="terminator")
        return int(end)


__all__ = ["FastElementReader", "decode_tree", "CodecError"]
