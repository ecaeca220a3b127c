"""Syntax of the T/AI 115.1-2021 chapter-10 weight bitstream (Tables 322-336), coded in both directions.

One traversal serves the decoder and the encoder. Every syntax element goes through
``ElementIO.code(name, value, **inputs)``: a reader ignores ``value`` and returns the decoded element, a
writer codes ``value`` and returns it. Both directions then update the same parsing state (trees,
``NzFlagP``/``CoefP``, the codebook predictor) from the returned value, so decoder and encoder cannot drift
apart. The encoder-only inputs are the true levels of the sublayer and a *planner* that takes the free
decisions (split, tree, codebook, start depth, escape mode, z reordering); see ``codec.encoder``.

Where the printed text is broken the resolution of docs/codec.md is applied; the comments cite the defect id
(A1 ... A38 of the digest, spec/seed000_codec.md §11) and the source line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .contexts import ElementDecoder, ElementEncoder
from .engine import AecDecoder, AecEncoder
from .errors import CodecError, error_context

MAX_CBOOK_SIZE = 31          # MaxCbookSize, 10.5.6 [L21140-21247]
MAX_PREDICTOR_SIZE = 64      # MaxPredictorSize, 10.5.6
MIN_CU3D_SIZE = 8            # 10.1 [L17310-17314]
CTU_SIZES = (64, 32, 16, 8)  # maxCtu3dWidth3d by max_ctu3d_idx, 10.3.3 [L19355-19387]
SCAN_CK, SCAN_KC = 0, 1      # sublayer_scan_order
TREES = ("octree", "unitree", "tagtree", "uni_tagtree")
# (cu3d_map_mode, uni_mode or tag_mode) of each tree type (Table 329; 10.3.8)
TREE_MODE_BITS = {"octree": (0, 0), "unitree": (0, 1), "tagtree": (1, 1), "uni_tagtree": (1, 0)}

# Header field widths of Table 338 that the encoder has to check before writing (FL, bypass).
FIELD_BITS = {"total_trainable_layer": 16, "array1d_depth": 5, "total_sublayer": 4, "sublayer_cmaxw": 32,
              "sublayer_shape": 16, "sublayer_bitdepth": 5, "max_ctu3d_idx": 2}


@dataclass(frozen=True)
class DecoderLimits:
    """Bounds a decoder enforces on header values so that absurd streams fail instead of exhausting memory."""

    max_weights_per_sublayer: int = 1 << 25   # int64 levels: 256 MiB
    max_weights_per_stream: int = 1 << 26     # all layers of one nnc(): a container layer is a weight + its bias
    max_weights_per_container: int = 1 << 28  # every tensor a container's index declares
    max_zdepth: int = 4096
    max_level: int = (1 << 32) - 1    # |q| of any decoded level, tree value or codebook entry


DEFAULT_LIMITS = DecoderLimits()


class ElementIO(Protocol):
    """Reads (decoder) or writes (encoder) one syntax element; returns its value."""

    decoding: bool

    def code(self, name: str, value: int = 0, **inputs: int) -> int: ...


class Planner(Protocol):
    """The encoder's free decisions, asked for in coding order (see codec.encoder)."""

    def ctu_header(self, coder: "SublayerCoder", ctu: "CtuGeometry") -> "CtuChoice": ...

    def split(self, coder: "SublayerCoder", depth: int, y_idx: int, x_idx: int) -> bool: ...

    def leaf(self, coder: "SublayerCoder", depth: int, y_idx: int, x_idx: int) -> "LeafChoice": ...


# --------------------------------------------------------------------------------------------- helpers
def get_bitdepth(w: int) -> int:
    """Table 320 with A2 [L17612-17622]: the number of significant bits of w (1 for w = 0)."""
    return max(1, int(w).bit_length())


def dequantw(levels: np.ndarray, step_size: np.float32) -> np.ndarray:
    """Table 321 [L17633-17647]: sign(q)·(|q|·step) in float32; the clip bounds are computed but unused (A3)."""
    q = np.asarray(levels, dtype=np.int64)
    magnitude = np.abs(q).astype(np.float32) * np.float32(step_size)
    return np.where(q < 0, -magnitude, magnitude).astype(np.float32)


def step_size(cmaxw: int, bitdepth: int, integer_input: int, one_d: bool) -> np.float32:
    """SubLayerStepSize of Table 324 [L17870-17900] in float32, with A13: 3-D divides cmaxw by 256, 1-D not."""
    if integer_input:
        return np.float32(1.0)
    if bitdepth == 0:
        raise CodecError("sublayer_bitdepth 0 gives a zero step divisor", element="sublayer_bitdepth")
    scale = np.float32(cmaxw) if one_d else np.float32(np.float32(cmaxw) / np.float32(256.0))
    return np.float32(scale / np.float32((1 << bitdepth) - 1))


def ctu_size_from_idx(max_ctu3d_idx: int) -> int:
    """maxCtu3dWidth3d = maxCtu3dHeight3d per 10.3.3 [L19355-19387]."""
    return CTU_SIZES[max_ctu3d_idx]


def tree_shapes(zdepth: int, height: int, width: int, planar: bool) -> list[tuple[int, int, int]]:
    """Level shapes of create_tree3d (Table 319), root first: halve (ceil) until 1 (planar: z kept).

    The extents are >= 1 (code_layer_header refuses 0); the loop tests ``> 1`` so that it ends after at most
    bit_length(max extent) halvings whatever it is given.
    """
    shapes = [(zdepth, height, width)]
    cd = 1 if planar else zdepth
    while height > 1 or width > 1 or cd > 1:
        height, width, cd = (height + 1) >> 1, (width + 1) >> 1, (cd + 1) >> 1
        shapes.append((zdepth if planar else cd, height, width))
    return shapes[::-1]


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


# --------------------------------------------------------------------------------------------- headers
@dataclass
class StreamHeader:
    """nnc_header(), Table 323 [L17782-17798]; total_trainable_layer is the number of layers coded."""

    integer_input: int = 0
    enable_escape_reorder: int = 1
    enable_zdep_reorder: int = 1
    enable_max_ctu3d_size: int = 0
    max_ctu3d_idx: int = 0
    array1d_depth: int = 16


@dataclass
class Sublayer:
    """One sublayer: the layer_header() fields of Table 324 and its levels.

    ``levels`` is [K] for a 1-D sublayer and [R·S][C][K] otherwise (the standard's [RS][C][K]).
    ``dim`` is 1..4; it is coded as 0 when it is 4 (A4: the 2-bit field cannot hold 4).
    """

    dim: int
    shape: tuple[int, int, int, int]
    cmaxw: int = 0
    bitdepth: int = 8
    scan_order: int = SCAN_CK
    include_bias_array1d: int = 0
    levels: np.ndarray | None = None
    step: np.float32 = field(default_factory=lambda: np.float32(1.0))

    @property
    def zdepth(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def weights(self) -> int:
        return math.prod(self.shape)


# --------------------------------------------------------------------------------------------- CTU geometry
@dataclass(frozen=True)
class CtuChoice:
    """Encoder decisions of ctu3d_header() (Table 327, 328)."""

    select_map_mode: int        # 1: all unitree/octree, 2: all tagtree/uni-tagtree, 3: per CU
    enable_start_depth: int
    permutation: tuple[int, ...]  # ZdepArray: tree z position -> RS plane; permutation[0] == 0 (A7)


@dataclass(frozen=True)
class LeafChoice:
    """Encoder decisions of one leaf cu3d() (Table 329-331)."""

    tree: str                            # one of TREES
    start_depth_delta: int = 0           # oct/tag_start_depth_delta (only with enable_start_depth)
    codebook: tuple[int, ...] = ()       # signed levels: predicted entries first, then signalled ones
    predicted: tuple[int, ...] = ()      # predictor positions of the predicted entries, increasing
    escape_reorder: int = 0              # oct/tag_cbook_esc_mode (escape index 0 instead of Cbook.size())


class CtuGeometry:
    """CTU3D and CU3D geometry of 10.5.6 (create_tensor3d) and the CU rectangles of §7.6 (A14)."""

    def __init__(self, y_off: int, x_off: int, height: int, width: int, min_h: int, min_w: int, index: int):
        self.y_off, self.x_off, self.height, self.width = y_off, x_off, height, width
        self.min_h, self.min_w, self.index = min_h, min_w, index
        grid_h, grid_w = -(-height // min_h), -(-width // min_w)
        grids = [(grid_h, grid_w)]
        while grid_h > 1 or grid_w > 1:       # ends after bit_length(max grid) halvings, as tree_shapes
            grid_h, grid_w = (grid_h + 1) >> 1, (grid_w + 1) >> 1
            grids.append((grid_h, grid_w))
        self.grids = grids[::-1]          # grids[d]: CU grid at depth d (d = 0 is the whole CTU)
        self.depth = len(self.grids)      # Ctu3dDepth

    def cu_rect(self, depth: int, y_idx: int, x_idx: int) -> tuple[int, int, int, int]:
        """(y offset, x offset, height, width) of a CU, relative to the CTU."""
        cu_h = self.min_h << (self.depth - 1 - depth)
        cu_w = self.min_w << (self.depth - 1 - depth)
        y0, x0 = y_idx * cu_h, x_idx * cu_w
        return y0, x0, min(cu_h, self.height - y0), min(cu_w, self.width - x0)


def max_ctu_dims(header: StreamHeader, sub: Sublayer) -> tuple[int, int]:
    """MaxCtu3dHeight/Width of 10.5.4 [L21026-21125]."""
    size = ctu_size_from_idx(header.max_ctu3d_idx)
    if not header.enable_max_ctu3d_size:
        return size, size
    if sub.dim == 4 and sub.shape[2] == 1:
        return 1 << (get_bitdepth(size * size // sub.zdepth) - 1), 1
    if sub.dim == 4 and sub.shape[3] == 1:
        return 1, 1 << (get_bitdepth(size * size // sub.zdepth) - 1)
    return 1 << (get_bitdepth(size // sub.shape[1]) - 1), 1 << (get_bitdepth(size // sub.shape[0]) - 1)


def ctu_geometries(header: StreamHeader, sub: Sublayer) -> list[CtuGeometry]:
    """CTUs of a sublayer in scan order (Table 322) with their CU geometry (10.5.6; A25 clamps min CU to 1)."""
    max_h, max_w = max_ctu_dims(header, sub)
    ctu_depth = get_bitdepth(max(max_h, max_w) // MIN_CU3D_SIZE)
    min_h = max(1, max_h >> (ctu_depth - 1))
    min_w = max(1, max_w >> (ctu_depth - 1))
    channels, kernels = sub.shape[2], sub.shape[3]
    origins = [(c, k) for c in range(0, channels, max_h) for k in range(0, kernels, max_w)]
    if sub.scan_order == SCAN_KC:
        origins = [(c, k) for k in range(0, kernels, max_w) for c in range(0, channels, max_h)]
    return [CtuGeometry(c, k, min(max_h, channels - c), min(max_w, kernels - k), min_h, min_w, i)
            for i, (c, k) in enumerate(origins)]


# --------------------------------------------------------------------------------------------- z reordering
def zdep_queue(permutation: tuple[int, ...]) -> list[int]:
    """The cycle queue of Table 328 for a permutation with P[0] == 0 (encoder side of zdep_array)."""
    seen = [False] * len(permutation)
    queue: list[int] = []
    for z in range(len(permutation)):
        if seen[z]:
            continue
        seen[z] = True
        if permutation[z] == z:
            queue.append(-1)
            continue
        cur = z
        while permutation[cur] != z:
            queue.append(permutation[cur])
            cur = permutation[cur]
            seen[cur] = True
        queue.append(-2)
    return queue


def zdep_from_queue(queue: list[int]) -> list[int]:
    """Table 328's cycle walk (A7: the inner while has an empty body), with every index checked."""
    zdepth = len(queue)
    zdep = [-1] * zdepth
    qidx, zidx = 0, -1
    while qidx < zdepth:
        zidx += 1
        while zidx < zdepth and zdep[zidx] != -1:
            zidx += 1
        if zidx >= zdepth:
            raise CodecError("ZdepArray cycles cover more planes than exist", element="qval_minus_one")
        if queue[qidx] == -1:
            zdep[zidx] = zidx
        else:
            first = zidx
            while queue[qidx] != -2:
                target = queue[qidx]
                if not 0 <= target < zdepth or zdep[zidx] != -1:
                    raise CodecError(f"ZdepArray entry {target} out of range or repeated", element="qval_minus_one")
                zdep[zidx] = target
                zidx = target
                qidx += 1
                if qidx >= zdepth:
                    raise CodecError("ZdepArray cycle is not closed", element="signalled_flag")
            if zdep[zidx] != -1:
                raise CodecError("ZdepArray cycle revisits a plane", element="qval_minus_one")
            zdep[zidx] = first
            zidx = first
        qidx += 1
    if sorted(zdep) != list(range(zdepth)):
        raise CodecError("ZdepArray is not a permutation", element="qval_minus_one")
    return zdep


# --------------------------------------------------------------------------------------------- sublayer coder
class SublayerCoder:
    """Codes the CTUs of one weight sublayer (dim >= 2): Tables 326-336.

    Decoding fills ``sub.levels``; encoding codes ``sub.levels`` with the decisions of ``planner``.
    The codebook predictor (A15) is one running state per sublayer, updated after every leaf CU.
    """

    def __init__(self, io: ElementIO, header: StreamHeader, sub: Sublayer, planner: Planner | None = None,
                 limits: DecoderLimits = DEFAULT_LIMITS):
        self.io, self.header, self.sub, self.planner, self.limits = io, header, sub, planner, limits
        self.predictor: list[int] = []       # CbookPredictor
        self.prev_predicted_size = 0         # PrevPredictedSize (= PrevPredictedCbookSize)
        self.ctu: CtuGeometry | None = None
        self.ctu_choice: CtuChoice | None = None
        self.zdep: list[int] = []
        self.select_map_mode = 3
        self.enable_start_depth = 0
        self.stats: dict[str, int] = {}

    # ---------------------------------------------------------------- state snapshots for trial encodes
    def snapshot(self) -> tuple:
        return (list(self.predictor), self.prev_predicted_size, dict(self.stats))

    def restore(self, state: tuple) -> None:
        self.predictor, self.prev_predicted_size, self.stats = list(state[0]), state[1], dict(state[2])

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    # ---------------------------------------------------------------- CTU
    def code_ctu(self, ctu: CtuGeometry) -> None:
        """ctu3d() and ctu3d_header(), Tables 326-327 [L17964-18000]."""
        io = self.io
        self.ctu = ctu
        choice = None if io.decoding else self.planner.ctu_header(self, ctu)
        self.ctu_choice = choice
        select_flag = io.code("select_map_mode_flag", 0 if io.decoding else int(choice.select_map_mode == 3))
        self.select_map_mode = 3
        if not select_flag:             # A6: follow the syntax, flag 0 selects a common mode
            map_flag = io.code("map_mode_flag", 0 if io.decoding else int(choice.select_map_mode == 1))
            self.select_map_mode = 1 if map_flag else 2
        self.enable_start_depth = io.code("enable_start_depth", 0 if io.decoding else choice.enable_start_depth)
        self.zdep = self.zdep_array(None if io.decoding else choice.permutation)
        self._count(f"select_map_mode_{self.select_map_mode}")
        if self.zdep != list(range(len(self.zdep))):
            self._count("zdep_reorder")
        self.code_cu(0, 0, 0)

    def zdep_array(self, permutation: tuple[int, ...] | None) -> list[int]:
        """zdep_array(), Table 328 [L18011-18102]."""
        io, zdepth = self.io, self.sub.zdepth
        reorder = 0
        if self.header.enable_zdep_reorder and zdepth > 2:
            truth = 0 if io.decoding else int(tuple(permutation) != tuple(range(zdepth)))
            reorder = io.code("reorder_flag", truth)
        if not reorder:
            return list(range(zdepth))
        truth_queue = [0] * zdepth if io.decoding else zdep_queue(permutation)
        queue = [0] * zdepth
        queue[0] = -1
        for n in range(1, zdepth - 1):
            flag = io.code("signalled_flag", int(truth_queue[n] > 0))
            queue[n] = 1 if flag else (-2 if queue[n - 1] > 0 else -1)
        queue[zdepth - 1] = -2 if queue[zdepth - 2] > 0 else -1
        for n in range(zdepth):
            if queue[n] == 1:
                queue[n] = io.code("qval_minus_one", truth_queue[n] - 1) + 1
        return zdep_from_queue(queue)

    # ---------------------------------------------------------------- CU
    def code_cu(self, depth: int, y_idx: int, x_idx: int) -> None:
        """cu3d(), Table 329 [L18124-18250]: split recursion, then a leaf CU."""
        grid_h, grid_w = self.ctu.grids[depth]
        if y_idx >= grid_h or x_idx >= grid_w:
            return
        io = self.io
        if depth < self.ctu.depth - 1:
            truth = 0 if io.decoding else int(self.planner.split(self, depth, y_idx, x_idx))
            if io.code("split_flag", truth):
                for dy, dx in ((0, 0), (1, 0), (0, 1), (1, 1)):   # y changes first
                    self.code_cu(depth + 1, (y_idx << 1) + dy, (x_idx << 1) + dx)
                return
        choice = None if io.decoding else self.planner.leaf(self, depth, y_idx, x_idx)
        self.code_leaf_cu(depth, y_idx, x_idx, choice)

    def cu_truth(self, depth: int, y_idx: int, x_idx: int) -> np.ndarray:
        """Encoder: the CU's levels in tree z order ([tree z][y][x], tree z = ZdepArray position)."""
        y0, x0, height, width = self.ctu.cu_rect(depth, y_idx, x_idx)
        rows = slice(self.ctu.y_off + y0, self.ctu.y_off + y0 + height)
        cols = slice(self.ctu.x_off + x0, self.ctu.x_off + x0 + width)
        return self.sub.levels[self.zdep, rows, cols]

    def code_leaf_cu(self, depth: int, y_idx: int, x_idx: int, choice: LeafChoice | None) -> None:
        """The leaf part of cu3d(): codebooks, map mode, tree, escapes; stores the CU's levels."""
        io = self.io
        y0, x0, height, width = self.ctu.cu_rect(depth, y_idx, x_idx)
        zdepth = self.sub.zdepth
        predicted = self._predicted_codebook(choice)
        cbook = self._signalled_codebook(predicted, choice)
        truth_levels = None if io.decoding else self.cu_truth(depth, y_idx, x_idx)

        if self.select_map_mode == 3:
            map_mode = io.code("cu3d_map_mode", 0 if io.decoding else TREE_MODE_BITS[choice.tree][0])
        else:
            map_mode = 0 if self.select_map_mode == 1 else 1
        if not io.decoding and TREE_MODE_BITS[choice.tree][0] != map_mode:
            raise CodecError(f"tree {choice.tree} is not allowed by SelectMapMode {self.select_map_mode}")

        planar_shapes = tree_shapes(zdepth, height, width, planar=True)
        cube_shapes = tree_shapes(zdepth, height, width, planar=False)
        prefix = "oct" if map_mode == 0 else "tag"
        if map_mode == 0:
            leaf_level = len(cube_shapes) - 1
        else:
            tag_mode = io.code("tgt_mode", 0 if io.decoding else TREE_MODE_BITS[choice.tree][1])
            leaf_level = (len(cube_shapes) if tag_mode else len(planar_shapes)) - 1
        start_depth = leaf_level
        if self.enable_start_depth:
            delta = io.code(f"{prefix}_start_depth_delta", 0 if io.decoding else choice.start_depth_delta,
                            max_value=leaf_level)
            if delta > leaf_level:
                raise CodecError(f"start depth delta {delta} exceeds the tree depth {leaf_level}",
                                 element=f"{prefix}_start_depth_delta")
            start_depth -= delta
        esc_mode = 1 if cbook else 0                       # CbookEscMode
        if self.header.enable_escape_reorder and cbook:    # A9: the override belongs inside this if
            reorder = io.code(f"{prefix}_cbook_esc_mode", 0 if io.decoding else choice.escape_reorder)
            esc_mode = 2 if reorder else 1
        if map_mode == 0:
            uni_mode = io.code("uni_mode", 0 if io.decoding else TREE_MODE_BITS[choice.tree][1])
            tree = "unitree" if uni_mode else "octree"
        else:
            tree = "tagtree" if tag_mode else "uni_tagtree"
        self._count(tree)
        self._count("codebook" if cbook else "direct")
        if predicted:
            self._count("predicted_codebook")
        if esc_mode == 2:
            self._count("escape_reorder")
        if start_depth != leaf_level:
            self._count("start_depth")

        if io.decoding:
            index_map = None
        else:
            index_map = map_to_indices(truth_levels, cbook, esc_mode)
        tree_coder = TreeCoder(io, len(cbook), index_map, (zdepth, height, width), self.zdep, self.limits)
        compiled_tree = getattr(io, "code_tree", None)     # codec.syntax_fast: the same tree, njit
        if compiled_tree is not None:
            compiled_tree(tree, planar_shapes if tree == "uni_tagtree" else cube_shapes, start_depth, len(cbook),
                          tree_coder.map, index_map)
        else:
            getattr(tree_coder, tree)(start_depth)
        levels = self._escape(tree_coder.map, cbook, esc_mode, truth_levels)

        if io.decoding:
            rows = slice(self.ctu.y_off + y0, self.ctu.y_off + y0 + height)
            cols = slice(self.ctu.x_off + x0, self.ctu.x_off + x0 + width)
            self.sub.levels[self.zdep, rows, cols] = levels
        # A15: predictor update, HEVC-SCC palette style (docs/codec.md)
        taken = set(predicted)
        unused = [value for position, value in enumerate(self.predictor) if position not in taken]
        self.predictor = (list(cbook) + unused)[:MAX_PREDICTOR_SIZE]
        self.prev_predicted_size = len(predicted)

    # ---------------------------------------------------------------- codebooks
    def _predicted_codebook(self, choice: LeafChoice | None) -> list[int]:
        """predicted_codebook(), Table 330 [L18262-18296] with A17."""
        io = self.io
        if not self.predictor:
            return []
        wanted = () if io.decoding else choice.predicted
        diff = len(wanted) - self.prev_predicted_size
        abs_diff = io.code("abs_predicted_diff", abs(diff))
        sign = io.code("predicted_sign", int(diff < 0)) if abs_diff else 0
        size = (-abs_diff if sign else abs_diff) + self.prev_predicted_size
        if not 0 <= size <= min(len(self.predictor), MAX_CBOOK_SIZE):
            raise CodecError(f"predicted codebook size {size} outside 0..{len(self.predictor)}",
                             element="abs_predicted_diff")
        predicted: list[int] = []
        for position in range(MAX_PREDICTOR_SIZE):
            if len(predicted) == size:
                break
            if position >= len(self.predictor):
                raise CodecError("predicted_flag beyond the predictor", element="predicted_flag")
            if io.code("predicted_flag", int(position in wanted)):
                predicted.append(position)
        return predicted

    def _signalled_codebook(self, predicted: list[int], choice: LeafChoice | None) -> list[int]:
        """signalled_codebook(), Table 331 [L18305-18375] with A16 (nzflag_delta inferred 1)."""
        io = self.io
        cbook = [self.predictor[position] for position in predicted]
        wanted = [] if io.decoding else list(choice.codebook[len(predicted):])
        signalled_size = 0
        if len(predicted) < MAX_CBOOK_SIZE:
            signalled_size = io.code("signalled_size", len(wanted), max_value=MAX_CBOOK_SIZE - len(predicted))
            if len(predicted) + signalled_size > MAX_CBOOK_SIZE:
                raise CodecError(f"codebook size {len(predicted) + signalled_size} exceeds {MAX_CBOOK_SIZE}",
                                 element="signalled_size")
        prev = abs(cbook[-1]) if cbook else 0
        magnitudes = list(cbook)
        for n in range(len(predicted), len(predicted) + signalled_size):
            target = 0 if io.decoding else abs(wanted[n - len(predicted)])
            delta = target - prev
            exist = n >= 2 and any(abs(magnitudes[m]) == abs(magnitudes[n - 1]) for m in range(n - 1))
            nonzero = 1
            if not exist:
                nonzero = io.code("nzflag_delta", int(delta != 0))
            elif not io.decoding and delta == 0:
                raise CodecError("codebook magnitude repeated a third time", element="nzflag_delta")
            if nonzero:
                sign = io.code("sign_delta", int(delta < 0))
                magnitude = io.code("abs_delta", abs(delta), sign=sign)
                delta = -magnitude if sign else magnitude
            else:
                delta = 0
            value = delta + prev
            if abs(value) > self.limits.max_level:
                raise CodecError(f"codebook entry {value} out of range", element="abs_delta")
            magnitudes.append(value)
            prev = value
        entries = list(cbook)
        for n in range(len(predicted), len(magnitudes)):
            value = magnitudes[n]
            if value:
                negative = io.code("cbook_sign", 0 if io.decoding else int(wanted[n - len(predicted)] < 0))
                value = -abs(value) if negative else abs(value)
            entries.append(value)
        return entries

    # ---------------------------------------------------------------- escape
    def _escape(self, index_map: np.ndarray, cbook: list[int], esc_mode: int,
                truth: np.ndarray | None) -> np.ndarray:
        """escape(CbookEscMode) rewritten per 10.5.16 (A9) [L19268-19336, L21572-21598]; returns levels."""
        if esc_mode == 0:
            return index_map
        io = self.io
        if index_map.size and int(index_map.max()) > len(cbook):
            raise CodecError(f"codebook index {int(index_map.max())} beyond codebook size {len(cbook)}",
                             element="escape")
        escape_index = len(cbook) if esc_mode == 1 else 0
        table = np.array(list(cbook) + [0] if esc_mode == 1 else [0] + list(cbook), dtype=np.int64)
        levels = table[index_map]
        escaped = np.argwhere(index_map == escape_index)
        if len(escaped):
            self._count("escapes")
        for z, y, x in escaped:
            value = 0 if io.decoding else int(truth[z, y, x])
            q = 0
            if io.code("esc_nzflag", int(value != 0)):
                sign = io.code("esc_sign", int(value < 0))
                magnitude = io.code("esc_abs_q", abs(value), sign=sign)
                if magnitude > self.limits.max_level:
                    raise CodecError(f"escaped level {magnitude} out of range", element="esc_abs_q")
                q = -magnitude if sign else magnitude
            levels[z, y, x] = q
        return levels


def map_to_indices(levels: np.ndarray, cbook: list[int], esc_mode: int) -> np.ndarray:
    """Encoder: the IndexMap of a CU (codebook index, escape index, or the level itself without codebook)."""
    if esc_mode == 0:
        return levels.astype(np.int64)
    escape_index = len(cbook) if esc_mode == 1 else 0
    offset = 0 if esc_mode == 1 else 1
    result = np.full(levels.shape, escape_index, dtype=np.int64)
    for index, value in enumerate(cbook):
        result[levels == value] = index + offset
    return result


# --------------------------------------------------------------------------------------------- trees
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

    # ---------------------------------------------------------------- octree, Table 333 [L18558-18740]
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

    # ---------------------------------------------------------------- unitree, Table 332 [L18386-18546]
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

    # ---------------------------------------------------------------- tagtree, Table 334 [L18756-19020]
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

    # ---------------------------------------------------------------- uni-tagtree, Table 335 [L19035-19251]
    def uni_tagtree(self, start_depth: int) -> None:
        shapes = tree_shapes(*self.shape, planar=True)
        self.levels = shapes
        self.values = [np.zeros(s, dtype=np.int64) for s in shapes]
        self.flags = [np.zeros(s, dtype=np.int8) for s in shapes]
        if not self.io.decoding:
            magnitude = np.abs(self.truth)
            self.truth_min = pool_levels(magnitude, True, np.minimum)
            self.truth_max = pool_levels(magnitude, True, np.maximum)
            self.truth_group_uniform = self._leaf_group_uniform(magnitude)
        for z in range(self.shape[0]):
            self._uni_tagtree_node(start_depth, 0, z, 0, 0, False, False)

    @staticmethod
    def _leaf_group_uniform(magnitude: np.ndarray) -> np.ndarray:
        """Encoder: per 2x2 leaf group, whether all existing |values| are equal (startDepth at the leaves)."""
        zdepth, height, width = magnitude.shape
        big = np.iinfo(np.int64).max
        padded_min = np.pad(magnitude, ((0, 0), (0, height % 2), (0, width % 2)), constant_values=big)
        padded_max = np.pad(magnitude, ((0, 0), (0, height % 2), (0, width % 2)), constant_values=-1)
        hh, ww = padded_min.shape[1] // 2, padded_min.shape[2] // 2
        group_min = padded_min.reshape(zdepth, hh, 2, ww, 2).min(axis=(2, 4))
        group_max = padded_max.reshape(zdepth, hh, 2, ww, 2).max(axis=(2, 4))
        return group_min == group_max

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


# --------------------------------------------------------------------------------------------- element IO
class ElementReader:
    """ElementIO of the decoder: ``value`` is ignored, the element is read."""

    decoding = True

    def __init__(self, decoder: AecDecoder):
        self.engine = decoder
        self._read = ElementDecoder(decoder).read

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        return self._read(name, **inputs)


class ElementWriter:
    """ElementIO of the encoder; ``fork()`` gives a bit-counting writer for trial encodes."""

    decoding = False

    def __init__(self, encoder: AecEncoder):
        self.engine = encoder
        self._write = ElementEncoder(encoder).write

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        value = int(value)
        self._write(name, value, **inputs)
        return value

    def fork(self) -> ElementWriter:
        return ElementWriter(self.engine.fork())

    @property
    def cost_bits(self) -> float:
        return self.engine.cost_bits


# --------------------------------------------------------------------------------------------- nnc()
def code_nnc_header(io: ElementIO, header: StreamHeader | None, layer_count: int) -> tuple[StreamHeader, int]:
    """nnc_header(), Table 323 [L17782-17798]."""
    src = header or StreamHeader()
    integer_input = io.code("integer_input", src.integer_input)
    layers = io.code("total_trainable_layer", layer_count)
    result = StreamHeader(
        integer_input=integer_input,
        enable_escape_reorder=io.code("enable_escape_reorder", src.enable_escape_reorder),
        enable_zdep_reorder=io.code("enable_zdep_reorder", src.enable_zdep_reorder),
        enable_max_ctu3d_size=io.code("enable_max_ctu3d_size", src.enable_max_ctu3d_size),
        max_ctu3d_idx=io.code("max_ctu3d_idx", src.max_ctu3d_idx),
        array1d_depth=io.code("array1d_depth", src.array1d_depth))
    return result, layers


def code_layer_header(io: ElementIO, header: StreamHeader, sublayers: list[Sublayer] | None,
                      limits: DecoderLimits = DEFAULT_LIMITS) -> list[Sublayer]:
    """layer_header(), Table 324 [L17812-17903]; returns the sublayers (levels not yet coded)."""
    total = io.code("total_sublayer", 0 if io.decoding else len(sublayers))
    if total == 0:
        raise CodecError("total_sublayer is 0: the do-while of Table 322 needs one sublayer",
                         element="total_sublayer")
    result: list[Sublayer] = []
    include_bn_shape = include_bias = False
    for index in range(total):
        with error_context(sublayer=index):
            src = None if io.decoding else sublayers[index]
            cmaxw = io.code("sublayer_cmaxw", 0 if io.decoding else src.cmaxw)
            shape = [1, 1, 1, 1]
            if not include_bias:
                dim = io.code("sublayer_dim", 0 if io.decoding else src.dim % 4) or 4   # A4: 0 codes 4
                if dim != 1 or not include_bn_shape:
                    for d in range(4 - dim, 4):
                        shape[d] = io.code("sublayer_shape", 0 if io.decoding else src.shape[d])
                else:
                    shape[3] = result[index - 1].shape[3]
                if dim == 1:
                    include_bn_shape = True
            else:
                include_bias = False
                shape[3] = result[index - 1].shape[3]
                dim = 1
            if 0 in shape:     # L19403-19413 are silent on 0; an empty tensor is not a coded sublayer
                raise CodecError(f"sublayer_shape {tuple(shape)} has a zero extent", element="sublayer_shape")
            sub = Sublayer(dim=dim, shape=tuple(shape), cmaxw=cmaxw)
            if not io.decoding and sub.shape != tuple(src.shape):
                raise CodecError(f"sublayer shape {tuple(src.shape)} cannot be signalled: the 1-D length is "
                                 f"inherited as {sub.shape[3]}")
            if dim != 1:
                if index + 1 < total:
                    sub.include_bias_array1d = io.code("include_bias_array1d",
                                                       0 if io.decoding else src.include_bias_array1d)
                    include_bias = bool(sub.include_bias_array1d)
                sub.scan_order = io.code("sublayer_scan_order", 0 if io.decoding else src.scan_order)
                sub.bitdepth = io.code("sublayer_bitdepth", 0 if io.decoding else src.bitdepth)
            else:
                sub.bitdepth = header.array1d_depth
            if header.integer_input == 0 and cmaxw:
                with error_context(element="sublayer_bitdepth"):
                    sub.step = step_size(cmaxw, sub.bitdepth, 0, one_d=dim == 1)
            elif header.integer_input:
                sub.step = np.float32(1.0)
            else:
                sub.step = np.float32(0.0)
            if sub.weights > limits.max_weights_per_sublayer or sub.zdepth > limits.max_zdepth:
                raise CodecError(f"sublayer shape {tuple(shape)} exceeds the decoder limits "
                                 f"({limits.max_weights_per_sublayer} weights, z depth {limits.max_zdepth})",
                                 element="sublayer_shape")
            result.append(sub)
    return result


def code_array1d(io: ElementIO, header: StreamHeader, sub: Sublayer, truth: np.ndarray | None) -> np.ndarray:
    """array1d(), Table 325 [L17915-17952] with A18 (q = 0 unless bias_nz_flag)."""
    length = sub.shape[3]
    levels = np.zeros(length, dtype=np.int64)
    if not sub.cmaxw:
        if truth is not None and np.any(truth):
            raise CodecError("a 1-D sublayer with sublayer_cmaxw 0 must be all zero")
        return levels
    for n in range(length):
        value = 0 if truth is None else int(truth[n])
        if io.code("bias_nz_flag", int(value != 0)):
            sign = io.code("bias_sign", int(value < 0))
            magnitude = io.code("bias_abs_q", abs(value) - 1, length=header.array1d_depth) + 1
            levels[n] = -magnitude if sign else magnitude
    return levels


def _code_weight_sublayer(io: ElementIO, header: StreamHeader, sub: Sublayer, planner: Planner | None,
                          limits: DecoderLimits) -> dict[str, int]:
    """The CTU loop of Table 322 [L17720-17750] with end_of_last_layer_ctu_flag checked (10.3.2).

    Returns the mode statistics. A reader with ``decode_weight_sublayer`` (codec.decode_fast, the same loop
    in numba) decodes the whole sublayer in one call.
    """
    if io.decoding:
        sub.levels = np.zeros((sub.zdepth, sub.shape[2], sub.shape[3]), dtype=np.int64)
        compiled = getattr(io, "decode_weight_sublayer", None)
        if compiled is not None:
            return compiled(header, sub, limits)
    coder = SublayerCoder(io, header, sub, planner, limits)
    ctus = ctu_geometries(header, sub)
    for ctu in ctus:
        with error_context(ctu=ctu.index):
            coder.code_ctu(ctu)
            last = int(ctu.index == len(ctus) - 1)
            if coder.io.code("end_of_last_layer_ctu_flag", last) != last:
                raise CodecError("end_of_last_layer_ctu_flag disagrees with the CTU count",
                                 element="end_of_last_layer_ctu_flag")
    return coder.stats


def code_nnc(io: ElementIO, header: StreamHeader | None = None, layers: list[list[Sublayer]] | None = None,
             planner: Planner | None = None, limits: DecoderLimits = DEFAULT_LIMITS
             ) -> tuple[StreamHeader, list[list[Sublayer]], list[dict[str, int]]]:
    """nnc(), Table 322 [L17665-17760] with A1 (the do-while increments after the if/else).

    Returns the stream header, the layers (decoded levels filled in) and per-layer mode statistics.
    """
    header, layer_count = code_nnc_header(io, header, 0 if io.decoding else len(layers))
    if header.max_ctu3d_idx > 3:
        raise CodecError(f"max_ctu3d_idx {header.max_ctu3d_idx} out of range", element="max_ctu3d_idx")
    decoded_layers, layer_stats = [], []
    weights = 0
    for layer_index in range(layer_count):
        with error_context(layer=layer_index):
            source = None if io.decoding else layers[layer_index]
            subs = code_layer_header(io, header, source, limits)
            weights += sum(sub.weights for sub in subs)
            if weights > limits.max_weights_per_stream:
                raise CodecError(f"the layers claim {weights} weights, above the decoder limit of "
                                 f"{limits.max_weights_per_stream} per stream", element="sublayer_shape")
            stats: dict[str, int] = {}
            index = 0
            while True:
                with error_context(sublayer=index):
                    sub = subs[index]
                    truth = None if io.decoding else source[index].levels
                    if sub.dim == 1:
                        sub.levels = code_array1d(io, header, sub, truth)
                        last = int(index == len(subs) - 1)
                        if io.code("end_of_last_layer_flag", last) != last:
                            raise CodecError("end_of_last_layer_flag disagrees with total_sublayer",
                                             element="end_of_last_layer_flag")
                        index += 1
                    else:
                        include_bias = index + 1 < len(subs) and subs[index + 1].dim == 1
                        if include_bias:
                            bias_truth = None if io.decoding else source[index + 1].levels
                            subs[index + 1].levels = code_array1d(io, header, subs[index + 1], bias_truth)
                        if not io.decoding:
                            sub.levels = np.asarray(truth, dtype=np.int64)
                        sublayer_stats = _code_weight_sublayer(io, header, sub, planner, limits)
                        for key, count in sublayer_stats.items():
                            stats[key] = stats.get(key, 0) + count
                        index += 2 if include_bias else 1
                if index >= len(subs):
                    break
            decoded_layers.append(subs)
            layer_stats.append(stats)
    return header, decoded_layers, layer_stats
