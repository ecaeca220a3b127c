"""The CTUs of a weight sublayer (Tables 326-331 and escape()), coded in both directions: the reference.

One traversal serves the decoder and the encoder. Every syntax element goes through
``ElementIO.code(name, value, **inputs)``: a reader ignores ``value`` and returns the decoded element, a
writer codes ``value`` and returns it. Both directions then update the same parsing state (trees,
``NzFlagP``/``CoefP``, the codebook predictor) from the returned value, so decoder and encoder cannot drift
apart. The encoder-only inputs are the true levels of the sublayer and a *planner* that takes the free
decisions (split, tree, codebook, start depth, escape mode, z reordering); see ``codec.encoder``.

An ElementIO of the compiled path may take over whole pieces: ``code_tree`` (one CU's tree, both
directions) and ``decode_weight_sublayer`` (every CTU of a sublayer, decoding); ``codec.compiled`` repeats
this module's element order and checks, and the tests compare the two.

Where the printed text is broken the resolution of docs/codec.md is applied; the comments cite the defect id
(A1 ... A38, docs/codec.md §2) and the clause or table of T/AI 115.1-2021.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import CodecError, error_context
from .element_coder import ElementIO
from .geometry import CtuGeometry, ctu_geometries, tree_shapes
from .headers import DEFAULT_LIMITS, DecoderLimits, StreamHeader, Sublayer
from .tree_coder import TREES, TreeCoder

MAX_CBOOK_SIZE = 31          # MaxCbookSize, 10.5.6
MAX_PREDICTOR_SIZE = 64      # MaxPredictorSize, 10.5.6
# (cu3d_map_mode, uni_mode or tag_mode) of each tree type (Table 329; 10.3.8)
TREE_MODE_BITS = {"octree": (0, 0), "unitree": (0, 1), "tagtree": (1, 1), "uni_tagtree": (1, 0)}
# The modes a sublayer's statistics count (the keys of SublayerCoder.stats; the compiled decoder counts the same)
MODE_STATS = ("select_map_mode_1", "select_map_mode_2", "select_map_mode_3", "zdep_reorder", *TREES, "codebook",
              "direct", "predicted_codebook", "escape_reorder", "start_depth", "escapes")


class Planner(Protocol):
    """The encoder's free decisions, asked for in coding order (see codec.encoder)."""

    def ctu_header(self, coder: "SublayerCoder", ctu: "CtuGeometry") -> "CtuChoice": ...

    def split(self, coder: "SublayerCoder", depth: int, y_idx: int, x_idx: int) -> bool: ...

    def leaf(self, coder: "SublayerCoder", depth: int, y_idx: int, x_idx: int) -> "LeafChoice": ...


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
        """ctu3d() and ctu3d_header(), Tables 326-327."""
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
        """zdep_array(), Table 328."""
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
        """cu3d(), Table 329: split recursion, then a leaf CU."""
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
            start_depth -= io.code(f"{prefix}_start_depth_delta", 0 if io.decoding else choice.start_depth_delta,
                                   max_value=leaf_level)      # a U element: never above max_value
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
        compiled_tree = getattr(io, "code_tree", None)     # codec.compiled: the same tree, njit
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
        """predicted_codebook(), Table 330 with A17."""
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
        """signalled_codebook(), Table 331 with A16 (nzflag_delta inferred 1)."""
        io = self.io
        cbook = [self.predictor[position] for position in predicted]
        wanted = [] if io.decoding else list(choice.codebook[len(predicted):])
        signalled_size = 0
        if len(predicted) < MAX_CBOOK_SIZE:
            signalled_size = io.code("signalled_size", len(wanted), max_value=MAX_CBOOK_SIZE - len(predicted))
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
        """escape(CbookEscMode) rewritten per 10.5.16 (A9; Table 336); returns levels."""
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
        compiled = getattr(io, "code_escapes", None)       # codec.compiled: the same elements, njit
        if compiled is not None:
            values = truth[tuple(escaped.T)]
            if values.size and int(np.abs(values).max()) > self.limits.max_level:
                raise CodecError(f"escaped level {int(np.abs(values).max())} out of range", element="esc_abs_q")
            compiled(values)
            levels[tuple(escaped.T)] = values
            return levels
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


def code_weight_sublayer(io: ElementIO, header: StreamHeader, sub: Sublayer, planner: Planner | None,
                         limits: DecoderLimits) -> dict[str, int]:
    """The CTU loop of Table 322 with end_of_last_layer_ctu_flag checked (10.3.2).

    Returns the mode statistics. A reader with ``decode_weight_sublayer`` (codec.compiled.element_io, the same loop
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
