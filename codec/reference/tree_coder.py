"""The four coding trees of a CU (Tables 332-335), coded in both directions: the pure-Python reference.

A CU's IndexMap (codebook indices, or the levels themselves) is coded as an octree, a unitree, a tagtree or a
uni-tagtree. The compiled path ports these walks to numba (``codec.compiled.tree_coders``) and must write
and read exactly the same bins; the tests compare the two.

Where the printed text is broken the resolution of docs/codec.md is applied; the comments cite the defect id
(A1 ... A38, docs/codec.md §2) and the clause or table of T/AI 115.1-2021.
"""
from __future__ import annotations

import numpy as np

from ..errors import CodecError
from .element_coder import ElementIO
from .geometry import tree_shapes
from .headers import DecoderLimits

TREES = ("octree", "unitree", "tagtree", "uni_tagtree")


def children(shape: tuple[int, int, int], z: int, y: int, x: int, planar: bool) -> list[tuple[int, int, int]]:
    """Existing children in coding order 000, 001, ..., 111 (x fastest; bExist/bLocation of 10.3.11-14)."""
    zdepth, height, width = shape
    nz, ny, nx = (z, y << 1, x << 1) if planar else (z << 1, y << 1, x << 1)
    result = []
    for dz in ((0,) if planar else (0, 1)):
        for dy in (0, 1):
            for dx in (0, 1):
                if nz + dz < zdepth and ny + dy < height and nx + dx < width:
                    result.append((nz + dz, ny + dy, nx + dx))
    return result


def pool_levels(leaves: np.ndarray, planar: bool, reducer) -> list[np.ndarray]:
    """Per-level reduction (np.minimum or np.maximum) of a leaf array over create_tree3d's tree, root first.

    Each level pairs index 2i with 2i+1 along every halved axis; an odd last index pairs with itself.
    """
    levels = [leaves]
    current = leaves
    axes = (1, 2) if planar else (0, 1, 2)
    while any(current.shape[axis] > 1 for axis in axes):
        for axis in axes:
            n = current.shape[axis]
            if n > 1:
                even = current.take(np.arange(0, n, 2), axis=axis)
                odd = current.take(np.minimum(np.arange(1, n + 1, 2), n - 1), axis=axis)
                current = reducer(even, odd)
        levels.append(current)
    return levels[::-1]


def leaf_group_uniform(magnitude: np.ndarray) -> np.ndarray:
    """Encoder: per 2x2 leaf group of a uni-tagtree, whether all existing |values| are equal (what its
    uni_tgt_nzflag codes when startDepth is the leaf level)."""
    zdepth, height, width = magnitude.shape
    big = np.iinfo(np.int64).max
    padded_min = np.pad(magnitude, ((0, 0), (0, height % 2), (0, width % 2)), constant_values=big)
    padded_max = np.pad(magnitude, ((0, 0), (0, height % 2), (0, width % 2)), constant_values=-1)
    hh, ww = padded_min.shape[1] // 2, padded_min.shape[2] // 2
    group_min = padded_min.reshape(zdepth, hh, 2, ww, 2).min(axis=(2, 4))
    group_max = padded_max.reshape(zdepth, hh, 2, ww, 2).max(axis=(2, 4))
    return group_min == group_max


class TreeCoder:
    """The four coding trees of one CU (Tables 332-335) over its IndexMap.

    Trees and the map are indexed by *tree* z position (the plane is ZdepArray[z]); this is the A11
    resolution (parents looked up by tree index) and it equals the literal text for an identity ZdepArray.
    ``truth`` is the encoder's IndexMap in tree z order (None when decoding).
    """

    def __init__(self, io: ElementIO, cbook_size: int, truth: np.ndarray | None, shape: tuple[int, int, int],
                 zdep: list[int], limits: DecoderLimits):
        self.io, self.cbook_size, self.truth, self.limits = io, cbook_size, truth, limits
        self.shape = shape
        self.map = np.zeros(shape, dtype=np.int64)
        self.nzflag_p = [0, 0]        # NzFlagP[0], NzFlagP[1]
        self.coef_p = [0, 0]          # CoefP[0], CoefP[1]
        self.map_val = 0              # mapVal of the unitree

    def _check_level(self, value: int, element: str) -> int:
        if value > self.limits.max_level:
            raise CodecError(f"value {value} out of range", element=element)
        return value

    def _fill_leaves(self, depth: int, node: tuple[int, int, int], value: int, planar: bool) -> int:
        """Set the map under ``node`` to ``value``; returns how many leaves that is."""
        shift = len(self.levels) - 1 - depth
        z, y, x = node
        zs = slice(z, z + 1) if planar else slice(z << shift, (z + 1) << shift)
        block = self.map[zs, y << shift:(y + 1) << shift, x << shift:(x + 1) << shift]
        block[...] = value
        return block.size

    def _push_coef(self, value: int) -> None:
        self.coef_p[1] = self.coef_p[0]
        self.coef_p[0] = value

    # ---------------------------------------------------------------- octree, Table 333
    def octree(self, start_depth: int) -> None:
        shapes = tree_shapes(*self.shape, planar=False)
        self.levels = shapes
        self.flags = [np.ones(s, dtype=np.int8) for s in shapes]
        self.truth_nz = None if self.io.decoding else pool_levels((self.truth != 0).astype(np.int8), False, np.maximum)
        self._octree_node(start_depth, 0, 0, 0, 0, False)

    def _octree_node(self, start_depth: int, depth: int, z: int, y: int, x: int, skip: bool) -> None:
        io, last = self.io, len(self.levels) - 1
        flag = 1
        if depth >= start_depth:
            if not skip:
                truth = 0 if io.decoding else int(self.truth_nz[depth][z, y, x])
                flag = io.code("oct_nzflag", truth, n0=self.nzflag_p[0], n1=self.nzflag_p[1],
                               c0=self.coef_p[0], at_max_depth=int(depth == last))
                self.nzflag_p[1] = self.nzflag_p[0]
                self.nzflag_p[0] = flag
        self.flags[depth][z, y, x] = flag
        if not flag:
            return
        if depth < last:
            kids = children(self.levels[depth + 1], z, y, x, planar=False)
            any_nonzero = False
            for i, (cz, cy, cx) in enumerate(kids):
                inferred = depth >= start_depth and i == len(kids) - 1 and i > 0 and not any_nonzero  # nz1st, A28
                self._octree_node(start_depth, depth + 1, cz, cy, cx, inferred)
                any_nonzero = any_nonzero or bool(self.flags[depth + 1][cz, cy, cx])
            return
        truth = 0 if io.decoding else int(self.truth[z, y, x])
        if self.cbook_size:
            value = io.code("oct_index", truth)
        else:
            sign = io.code("oct_sign", int(truth < 0), c0=self.coef_p[0], c1=self.coef_p[1])
            magnitude = io.code("oct_abs_q", abs(truth), sign=sign)
            value = -magnitude if sign else magnitude
        self._check_level(abs(value), "oct_abs_q")
        self.map[z, y, x] = value
        self._push_coef(value)

    # ---------------------------------------------------------------- unitree, Table 332
    def unitree(self, start_depth: int) -> None:
        shapes = tree_shapes(*self.shape, planar=False)
        self.levels = shapes
        self.flags = [np.zeros(s, dtype=np.int8) for s in shapes]
        if not self.io.decoding:
            magnitude = np.abs(self.truth)
            self.truth_min = pool_levels(magnitude, False, np.minimum)
            self.truth_max = pool_levels(magnitude, False, np.maximum)
        self._unitree_node(start_depth, 0, 0, 0, 0, False)

    def _unitree_node(self, start_depth: int, depth: int, z: int, y: int, x: int, skip: bool) -> None:
        io, last = self.io, len(self.levels) - 1
        if depth < last:
            flag = 0
            if depth >= start_depth and not skip:
                uniform = io.decoding or self.truth_min[depth][z, y, x] == self.truth_max[depth][z, y, x]
                common = 0 if io.decoding else int(self.truth_min[depth][z, y, x])
                flag = io.code("uni_nzflag", int(not uniform))
                if not flag:
                    nonzero = io.code("uni_map_nzflag", int(common != 0), n0=self.nzflag_p[0], n1=self.nzflag_p[1])
                    self.nzflag_p[1] = self.nzflag_p[0]      # A12: NzFlagP[0], not NzFlag[0]
                    self.nzflag_p[0] = nonzero
                    self.map_val = 0                          # A12: reset when uni_map_nzflag == 0
                    if nonzero:
                        element = "uni_cmap_val" if self.cbook_size else "uni_qmap_val"
                        self.map_val = self._check_level(io.code(element, common), element)
            self.flags[depth][z, y, x] = flag
            child_skip = (not flag) if depth >= start_depth else False   # A12: uni_nzflag
            if child_skip and (self.cbook_size or not self.map_val):
                # a uniform subtree whose leaves code no bin: every leaf is mapVal (same result as the walk)
                leaves = self._fill_leaves(depth, (z, y, x), self.map_val, planar=False)
                self.coef_p = [self.map_val, self.map_val if leaves > 1 else self.coef_p[0]]
                return
            for cz, cy, cx in children(self.levels[depth + 1], z, y, x, planar=False):
                self._unitree_node(start_depth, depth + 1, cz, cy, cx, child_skip)
            return
        truth = 0 if io.decoding else int(self.truth[z, y, x])
        if start_depth == last or self.flags[depth - 1][z >> 1, y >> 1, x >> 1]:
            value = 0
            if io.code("uni_map_nzflag", int(truth != 0), n0=self.nzflag_p[0], n1=self.nzflag_p[1]):
                if self.cbook_size:
                    value = io.code("uni_index", truth)
                else:
                    sign = io.code("uni_sign", int(truth < 0), c0=self.coef_p[0])
                    magnitude = io.code("uni_abs_q", abs(truth))
                    value = -magnitude if sign else magnitude
                self._check_level(abs(value), "uni_abs_q")
        else:
            value = self.map_val
            if not self.cbook_size and self.map_val:
                if io.code("uni_map_sign", int(truth < 0), c0=self.coef_p[0]):
                    value = -self.map_val
        self.map[z, y, x] = value
        self._push_coef(value)

    # ---------------------------------------------------------------- tagtree, Table 334
    def tagtree(self, start_depth: int) -> None:
        shapes = tree_shapes(*self.shape, planar=False)
        self.levels = shapes
        self.values = [np.zeros(s, dtype=np.int64) for s in shapes]
        self.truth_min = None if self.io.decoding else pool_levels(np.abs(self.truth), False, np.minimum)
        self._tagtree_node(start_depth, 0, 0, 0, 0, False)

    def _tag_value(self, start_depth: int, depth: int, parent_value: int, truth: int, names: tuple) -> int:
        """The node value at or below startDepth: absolute at startDepth, parent + delta deeper."""
        io = self.io
        nzflag_name, abs_name, delta_name = names
        if depth == start_depth:
            value = 0
            inputs = {"c0": self.coef_p[0], "c1": self.coef_p[1]} if nzflag_name.startswith("tgtm") else {}
            if io.code(nzflag_name, int(truth != 0), **inputs):
                value = io.code(abs_name, truth)
        else:
            value = parent_value + io.code(delta_name, truth - parent_value)
        return self._check_level(value, abs_name)

    def _tagtree_node(self, start_depth: int, depth: int, z: int, y: int, x: int, skip: bool) -> None:
        io, last, values = self.io, len(self.levels) - 1, self.values
        if depth:
            values[depth][z, y, x] = values[depth - 1][z >> 1, y >> 1, x >> 1]
        if depth >= start_depth:
            if not skip:
                names = (("tgtm_nzflag_index", "tgtm_index", "tgtm_delta_index") if self.cbook_size
                         else ("tgtm_nzflag_q", "tgtm_abs_q", "tgtm_delta_abs_q"))
                truth = 0 if io.decoding else int(self.truth_min[depth][z, y, x])
                parent = int(values[depth - 1][z >> 1, y >> 1, x >> 1]) if depth else 0   # A11: tree index
                values[depth][z, y, x] = self._tag_value(start_depth, depth, parent, truth, names)
                self._push_coef(int(values[depth][z, y, x]))
            if depth == last and values[depth][z, y, x] != 0 and not self.cbook_size:
                truth = 0 if io.decoding else int(self.truth[z, y, x])
                if io.code("tgtm_sign_q", int(truth < 0)):
                    values[depth][z, y, x] = -values[depth][z, y, x]
                self.coef_p[0] = int(values[depth][z, y, x])
        if depth < last:
            self._tag_children(start_depth, depth, (z, y, x), planar=False)
            return
        self.map[z, y, x] = values[depth][z, y, x]

    def _tag_children(self, start_depth: int, depth: int, node: tuple[int, int, int], planar: bool,
                      uni_skip: bool = False) -> None:
        """Children of a tag node; the last one is inferred equal to the parent when no earlier one is (eq1st)."""
        parent = abs(int(self.values[depth][node]))
        kids = children(self.levels[depth + 1], *node, planar=planar)
        any_equal = False
        for i, kid in enumerate(kids):
            inferred = depth >= start_depth and i == len(kids) - 1 and i > 0 and not any_equal   # eq1st, A28
            if planar:
                self._uni_tagtree_node(start_depth, depth + 1, *kid, uni_skip, inferred)
            else:
                self._tagtree_node(start_depth, depth + 1, *kid, inferred)
            any_equal = any_equal or parent == abs(int(self.values[depth + 1][kid]))

    # ---------------------------------------------------------------- uni-tagtree, Table 335
    def uni_tagtree(self, start_depth: int) -> None:
        shapes = tree_shapes(*self.shape, planar=True)
        self.levels = shapes
        self.values = [np.zeros(s, dtype=np.int64) for s in shapes]
        self.flags = [np.zeros(s, dtype=np.int8) for s in shapes]
        if not self.io.decoding:
            magnitude = np.abs(self.truth)
            self.truth_min = pool_levels(magnitude, True, np.minimum)
            self.truth_max = pool_levels(magnitude, True, np.maximum)
            self.truth_group_uniform = leaf_group_uniform(magnitude)
        for z in range(self.shape[0]):
            self._uni_tagtree_node(start_depth, 0, z, 0, 0, False, False)

    def _uni_tagtree_node(self, start_depth: int, depth: int, z: int, y: int, x: int,
                          uni_skip: bool, tgt_skip: bool) -> None:
        io, last, values, flags = self.io, len(self.levels) - 1, self.values, self.flags
        uni_flag = 0
        flags[depth][z, y, x] = 0
        if depth:
            values[depth][z, y, x] = values[depth - 1][z, y >> 1, x >> 1]     # A11: tree index
        top_left = (y & 1) == 0 and (x & 1) == 0
        if depth >= start_depth:
            if not uni_skip:
                if start_depth < last or top_left:
                    if io.decoding:
                        truth = 0
                    elif depth == last:
                        truth = int(start_depth == last and not self.truth_group_uniform[z, y >> 1, x >> 1])
                    else:
                        truth = int(self.truth_min[depth][z, y, x] != self.truth_max[depth][z, y, x])
                    uni_flag = io.code("uni_tgt_nzflag", truth)
                else:
                    uni_flag = int(flags[depth][z, y & ~1, x & ~1])
                    values[depth][z, y, x] = abs(int(values[depth][z, y & ~1, x & ~1]))
                flags[depth][z, y, x] = uni_flag
                if not tgt_skip and (start_depth < last or top_left or uni_flag):
                    names = (("uni_tgt_nzflag_index", "uni_tgt_index", "uni_tgt_delta_index") if self.cbook_size
                             else ("uni_tgt_nzflag_q", "uni_tgt_abs_q", "uni_tgt_delta_abs_q"))
                    truth = 0 if io.decoding else int(self.truth_min[depth][z, y, x])
                    parent = int(values[depth - 1][z, y >> 1, x >> 1]) if depth else 0
                    values[depth][z, y, x] = self._tag_value(start_depth, depth, parent, truth, names)
                    self._push_coef(abs(int(values[depth][z, y, x])))
            if depth == last and values[depth][z, y, x] != 0 and not self.cbook_size:
                truth = 0 if io.decoding else int(self.truth[z, y, x])
                if io.code("uni_tgt_sign_q", int(truth < 0)):
                    values[depth][z, y, x] = -values[depth][z, y, x]
                self.coef_p[0] = int(values[depth][z, y, x])
        if depth < last:
            child_skip = (not uni_flag) if depth >= start_depth else False
            value = int(values[depth][z, y, x])
            if child_skip and (self.cbook_size or not value):
                # a uniform subtree that codes no bin (no signs): the leaves inherit the value
                self._fill_leaves(depth, (z, y, x), value, planar=True)
                return
            self._tag_children(start_depth, depth, (z, y, x), planar=True, uni_skip=child_skip)
            return
        self.map[z, y, x] = values[depth][z, y, x]
