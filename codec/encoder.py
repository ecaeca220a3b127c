"""Encoder decisions: split, tree type, start depth, codebook, escape mode and z reordering by actual cost.

The syntax (codec.reference.sublayer_coder) asks a planner for every free decision in coding order. Both
planners decide by trial encodes: a candidate is coded into a bit-counting fork of the arithmetic encoder (same
contexts, same interval) and the cheapest is kept.

* ``SublayerPlanner`` (``search="sublayer"``, the default) chooses one mode for a whole sublayer by coding a
  sample of it (blocks spread over it, ``_sample``) with each candidate; the sublayer is then coded in one pass.
  On real CNN weights a mode per CU saves next to nothing over the best mode per sublayer, and this search finds
  that mode at a fraction of the per-CU search's cost (docs/codec.md §7).
* ``TrialPlanner`` (``search="cu"``) tries the candidates on every CU and remembers the decision, so the real pass
  replays it; it reaches every syntax path (a tree per CU, splits), which the tests use.

Candidates can be restricted (``EncoderOptions``) to force one mode, which the tests use to reach every
syntax path and the benchmark uses for the "best single fixed mode" comparison.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .compiled.element_io import FastElementWriter
from .reference.element_coder import ElementWriter
from .reference.engine import AecEncoder
from .reference.geometry import CtuGeometry, tree_shapes
from .reference.headers import StreamHeader, Sublayer
from .reference.nnc import code_nnc
from .reference.sublayer_coder import (MAX_CBOOK_SIZE, TREE_MODE_BITS, CtuChoice, LeafChoice, SublayerCoder,
                                       code_weight_sublayer)
from .reference.tree_coder import TREES

CODEBOOK_CHOICES = ("off", "on", "auto")
START_DEPTH_CHOICES = ("leaf", "root", "auto")
SPLIT_CHOICES = ("never", "always", "auto")
ZDEP_CHOICES = ("off", "on", "auto")
ESCAPE_CHOICES = ("off", "on", "auto")
SEARCH_CHOICES = ("sublayer", "cu")
SAMPLE_EXTENT = 32      # the sublayer search's sample: blocks of 32 channels x 32 kernels, every z plane, ...
SAMPLE_FRACTION = 16    # ... about one block in 16 ...
SAMPLE_BLOCKS = 8       # ... and at most 8 of them


@dataclass(frozen=True)
class EncoderOptions:
    """Which candidates the planner may try; a single candidate forces that mode."""

    trees: tuple[str, ...] = TREES
    codebook: str = "auto"          # off: direct levels; on: always a codebook (escapes for the rest)
    escape_reorder: str = "auto"    # on: oct/tag_cbook_esc_mode = 1 (escape index 0)
    start_depth: str = "auto"       # leaf: code only leaves; root: code the whole tree
    split: str = "auto"             # CU quadtree split
    zdep: str = "auto"              # on: reorder RS planes by energy (plane 0 stays first)
    max_split_trials: int = 1       # cu search: CU depths (from the CTU) at which a split is evaluated by trial
    search: str = "sublayer"        # sublayer: one mode per sublayer, tried on a sample; cu: tried on every CU

    def __post_init__(self) -> None:
        for name, allowed in (("codebook", CODEBOOK_CHOICES), ("start_depth", START_DEPTH_CHOICES),
                              ("split", SPLIT_CHOICES), ("zdep", ZDEP_CHOICES),
                              ("escape_reorder", ESCAPE_CHOICES), ("search", SEARCH_CHOICES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not self.trees or any(tree not in TREES for tree in self.trees):
            raise ValueError(f"trees must be a non-empty subset of {TREES}, got {self.trees!r}")


def build_codebook(values: np.ndarray, predictor: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A codebook for a CU: its most frequent levels (<= MaxCbookSize); predicted entries first.

    Returns (codebook, predicted predictor positions). Levels outside the codebook are escaped.
    """
    levels, counts = np.unique(values, return_counts=True)
    order = np.lexsort((np.abs(levels), -counts))[:MAX_CBOOK_SIZE]
    chosen = [int(v) for v in levels[order]]
    chosen_set = set(chosen)
    predicted, seen = [], set()
    for position, value in enumerate(predictor):
        if value in chosen_set and value not in seen:
            predicted.append(position)
            seen.add(value)
    signalled = [v for v in chosen if v not in seen]
    return tuple(predictor[p] for p in predicted) + tuple(signalled), tuple(predicted)


@dataclass
class TrialPlanner:
    """The Planner of codec.reference.sublayer_coder that decides by trial encodes (see module docstring)."""

    options: EncoderOptions = field(default_factory=EncoderOptions)
    memo: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ trial machinery
    @staticmethod
    def _trial(coder: SublayerCoder, action) -> float:
        """Cost in bits of ``action()`` coded from the current state; the state is restored afterwards."""
        state = coder.snapshot()
        real_io = coder.io
        coder.io = real_io.fork()
        try:
            action()
            return coder.io.cost_bits
        finally:
            coder.io = real_io
            coder.restore(state)

    @staticmethod
    def _key(coder: SublayerCoder, *where) -> tuple:
        # decisions do not depend on the plane order (a CU holds the same values), so a search made
        # with one order is replayed with the other (see ctu_header)
        return where

    # ------------------------------------------------------------------ CTU header
    def ctu_header(self, coder: SublayerCoder, ctu: CtuGeometry) -> CtuChoice:
        self.memo = {}       # decisions are per CTU: made in the trials below, replayed by the real pass
        zdepth = coder.sub.zdepth
        identity = tuple(range(zdepth))
        perms = [identity]
        if self.options.zdep != "off" and coder.header.enable_zdep_reorder and zdepth > 2:
            block = coder.sub.levels[:, ctu.y_off:ctu.y_off + ctu.height, ctu.x_off:ctu.x_off + ctu.width]
            energy = np.abs(block).reshape(zdepth, -1).sum(axis=1)
            rest = sorted(range(1, zdepth), key=lambda z: (-energy[z], z))
            reordered = (0, *rest)
            if reordered != identity:
                perms = [reordered] if self.options.zdep == "on" else [identity, reordered]
        options = self.options
        single_map_mode = len({TREE_MODE_BITS[t][0] for t in options.trees}) == 1
        if len(perms) == 1 and single_map_mode and options.start_depth != "auto":
            coder.zdep = list(perms[0])   # header known in advance: decisions are made during the real pass
            return CtuChoice(select_map_mode=1 if TREE_MODE_BITS[options.trees[0]][0] == 0 else 2,
                             enable_start_depth=int(options.start_depth == "root"), permutation=perms[0])
        # search the modes with the first plane order; replay those decisions with the other order
        costs = [self._trial(coder, lambda p=p: self._code_ctu_body(coder, p)) for p in perms]
        perm = perms[int(np.argmin(costs))]
        coder.zdep = list(perm)
        trees, deltas = self._collect(coder, 0, 0, 0)
        map_modes = {TREE_MODE_BITS[tree][0] for tree in trees}
        select = 3 if len(map_modes) > 1 else (1 if map_modes == {0} else 2)
        return CtuChoice(select_map_mode=select, enable_start_depth=int(any(deltas)), permutation=perm)

    def _code_ctu_body(self, coder: SublayerCoder, perm: tuple[int, ...]) -> None:
        """Trial of zdep_array and the CU tree, every CU free to choose (SelectMapMode 3, start depths on)."""
        coder.zdep = coder.zdep_array(perm)
        coder.select_map_mode = 3
        coder.enable_start_depth = int(self.options.start_depth != "leaf")
        coder.code_cu(0, 0, 0)

    def _collect(self, coder: SublayerCoder, depth: int, y_idx: int, x_idx: int) -> tuple[list[str], list[int]]:
        """Trees and start-depth deltas of the leaf CUs the trial chose."""
        grid_h, grid_w = coder.ctu.grids[depth]
        if y_idx >= grid_h or x_idx >= grid_w:
            return [], []
        if self.memo.get(self._key(coder, depth, y_idx, x_idx, "split")):
            trees, deltas = [], []
            for dy, dx in ((0, 0), (1, 0), (0, 1), (1, 1)):
                t, d = self._collect(coder, depth + 1, (y_idx << 1) + dy, (x_idx << 1) + dx)
                trees += t
                deltas += d
            return trees, deltas
        choice = self.memo[self._key(coder, depth, y_idx, x_idx, "leaf")]
        return [choice.tree], [choice.start_depth_delta]

    # ------------------------------------------------------------------ split
    def split(self, coder: SublayerCoder, depth: int, y_idx: int, x_idx: int) -> bool:
        key = self._key(coder, depth, y_idx, x_idx, "split")
        if key not in self.memo:
            mode = self.options.split
            if mode == "auto" and depth >= self.options.max_split_trials:
                mode = "never"
            if mode == "auto":
                def as_leaf() -> None:
                    coder.io.code("split_flag", 0)
                    coder.code_leaf_cu(depth, y_idx, x_idx, self.leaf(coder, depth, y_idx, x_idx))

                def as_split() -> None:
                    coder.io.code("split_flag", 1)
                    for dy, dx in ((0, 0), (1, 0), (0, 1), (1, 1)):
                        coder.code_cu(depth + 1, (y_idx << 1) + dy, (x_idx << 1) + dx)
                leaf_cost = self._trial(coder, as_leaf)
                split_cost = self._trial(coder, as_split)
                self.memo[key] = split_cost < leaf_cost
            else:
                self.memo[key] = mode == "always"
        return self.memo[key]

    # ------------------------------------------------------------------ leaf CU
    def leaf(self, coder: SublayerCoder, depth: int, y_idx: int, x_idx: int) -> LeafChoice:
        """Staged search: tree and start depth first (first codebook option), then the codebook options."""
        key = self._key(coder, depth, y_idx, x_idx, "leaf")
        if key not in self.memo:
            shapes, books = self._candidates(coder, depth, y_idx, x_idx)

            def cost(choice: LeafChoice) -> float:
                return self._trial(coder, lambda: coder.code_leaf_cu(depth, y_idx, x_idx, choice))

            stage_a = [LeafChoice(tree=tree, start_depth_delta=delta, codebook=books[0][0], predicted=books[0][1],
                                  escape_reorder=books[0][2]) for tree, delta in shapes]
            best = stage_a[0]
            if len(stage_a) > 1 or len(books) > 1:
                costs = [cost(choice) for choice in stage_a]
                best, best_cost = stage_a[int(np.argmin(costs))], min(costs)
                for cbook, predicted, reorder in books[1:]:
                    choice = LeafChoice(tree=best.tree, start_depth_delta=best.start_depth_delta, codebook=cbook,
                                        predicted=predicted, escape_reorder=reorder)
                    choice_cost = cost(choice)
                    if choice_cost < best_cost:
                        best, best_cost = choice, choice_cost
            self.memo[key] = best
        return self.memo[key]

    def _candidates(self, coder: SublayerCoder, depth: int, y_idx: int, x_idx: int
                    ) -> tuple[list[tuple[str, int]], list[tuple[tuple[int, ...], tuple[int, ...], int]]]:
        """(tree, start depth delta) pairs and (codebook, predicted, escape reorder) options allowed."""
        options = self.options
        _, _, height, width = coder.ctu.cu_rect(depth, y_idx, x_idx)
        zdepth = coder.sub.zdepth
        trees = [t for t in options.trees
                 if coder.select_map_mode == 3 or TREE_MODE_BITS[t][0] == (0 if coder.select_map_mode == 1 else 1)]
        shapes = []
        for tree in trees:
            leaf_level = len(tree_shapes(zdepth, height, width, tree == "uni_tagtree")) - 1
            deltas = {"leaf": [0], "root": [leaf_level], "auto": sorted({0, leaf_level})}[options.start_depth]
            shapes += [(tree, delta) for delta in (deltas if coder.enable_start_depth else [0])]
        books: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []
        if options.codebook != "on":
            books.append(((), (), 0))
        if options.codebook != "off":
            values = coder.cu_truth(depth, y_idx, x_idx)
            cbook, predicted = build_codebook(values, coder.predictor)
            escapes = not np.isin(values, cbook).all()
            reorder_modes = [0]
            if coder.header.enable_escape_reorder:
                reorder_modes = {"off": [0], "on": [1], "auto": [0, 1] if escapes else [0]}[options.escape_reorder]
            books += [(cbook, predicted, r) for r in reorder_modes]
        return shapes, books


@dataclass
class SublayerPlanner:
    """The Planner of the sublayer search (see module docstring): at a sublayer's first CTU it chooses the
    sublayer's fixed options by trial encodes of a sample, then a ``TrialPlanner`` of those options (one candidate
    each, so no further trial) answers every decision of the sublayer."""

    options: EncoderOptions = field(default_factory=EncoderOptions)
    _sub: Sublayer | None = None
    _fixed: TrialPlanner | None = None

    def ctu_header(self, coder: SublayerCoder, ctu: CtuGeometry) -> CtuChoice:
        if coder.sub is not self._sub:
            self._sub, self._fixed = coder.sub, TrialPlanner(self.choose(coder))
        return self._fixed.ctu_header(coder, ctu)

    def split(self, coder: SublayerCoder, depth: int, y_idx: int, x_idx: int) -> bool:
        return self._fixed.split(coder, depth, y_idx, x_idx)

    def leaf(self, coder: SublayerCoder, depth: int, y_idx: int, x_idx: int) -> LeafChoice:
        return self._fixed.leaf(coder, depth, y_idx, x_idx)

    def choose(self, coder: SublayerCoder) -> EncoderOptions:
        """The sublayer's options, staged as the CU search on the sample's first block: every tree x start depth
        with the first option of the rest, then on the best of them a codebook, plane reordering and CU splits,
        each kept if it codes the block in fewer bits. The two best trees, with those changes, then race on the
        whole sample."""
        options = self.options
        first = replace(options, split="always" if options.split == "always" else "never",
                        codebook="on" if options.codebook == "on" else "off",
                        zdep="on" if options.zdep == "on" else "off",
                        escape_reorder="on" if options.escape_reorder == "on" else "off")
        starts = ("leaf", "root") if options.start_depth == "auto" else (options.start_depth,)
        stage_a = [replace(first, trees=(tree,), start_depth=start) for tree in options.trees for start in starts]
        stage_b = []
        if options.codebook == "auto":
            reorders = ("off", "on") if options.escape_reorder == "auto" else (options.escape_reorder,)
            stage_b += [{"codebook": "on", "escape_reorder": reorder} for reorder in reorders]
        if options.zdep == "auto" and coder.header.enable_zdep_reorder and coder.sub.zdepth > 2:
            stage_b.append({"zdep": "on"})
        if options.split == "auto":
            stage_b.append({"split": "always"})
        if len(stage_a) == 1 and not stage_b:
            return first

        sample = _sample(coder.sub)
        block = replace(sample, shape=(*sample.shape[:2], min(sample.shape[2], SAMPLE_EXTENT), sample.shape[3]),
                        levels=sample.levels[:, :SAMPLE_EXTENT])

        def cost(candidate: EncoderOptions, sublayer: Sublayer) -> float:
            fork = coder.io.fork()
            code_weight_sublayer(fork, coder.header, sublayer, TrialPlanner(candidate), coder.limits)
            return fork.cost_bits

        ranked = sorted(zip((cost(candidate, block) for candidate in stage_a), range(len(stage_a))))
        best_cost, best = ranked[0][0], stage_a[ranked[0][1]]
        changes: dict = {}
        for change in stage_b:
            candidate = replace(best, **change)
            candidate_cost = cost(candidate, block)
            if candidate_cost < best_cost:
                best, best_cost, changes = candidate, candidate_cost, {**changes, **change}
        if len(ranked) == 1 or sample.levels.shape[1] == block.levels.shape[1]:
            return best
        finalists = [best, replace(stage_a[ranked[1][1]], **changes)]
        return min(finalists, key=lambda candidate: cost(candidate, sample))


def _sample(sub: Sublayer) -> Sublayer:
    """The sublayer search's sample of ``sub``: up to SAMPLE_BLOCKS blocks of SAMPLE_EXTENT channels x kernels
    (every z plane), about one in SAMPLE_FRACTION of the sublayer's blocks, evenly spaced in raster order and stacked
    along the channel axis; each block keeps the neighbourhoods the trees code. A block of the last row or column is
    moved back inside the sublayer, so that all are whole."""
    _, channels, kernels = sub.levels.shape
    rows, cols = -(-channels // SAMPLE_EXTENT), -(-kernels // SAMPLE_EXTENT)
    count = min(SAMPLE_BLOCKS, max(1, rows * cols // SAMPLE_FRACTION))
    height, width = min(channels, SAMPLE_EXTENT), min(kernels, SAMPLE_EXTENT)
    blocks = []
    for index in np.linspace(0, rows * cols - 1, count).round().astype(int):
        y, x = divmod(int(index), cols)
        y0, x0 = min(y * SAMPLE_EXTENT, channels - height), min(x * SAMPLE_EXTENT, kernels - width)
        blocks.append(sub.levels[:, y0:y0 + height, x0:x0 + width])
    levels = np.concatenate(blocks, axis=1)
    return replace(sub, shape=(*sub.shape[:2], *levels.shape[1:]), levels=levels)


# One fixed mode without trial encodes (CLI --fast): 10-30x faster than the search, 0.3-2 % larger.
FAST_OPTIONS = EncoderOptions(trees=("octree",), codebook="off", start_depth="root", split="never", zdep="off")


@dataclass
class EncodedStream:
    data: bytes
    bins: int
    stats: list[dict[str, int]]


def encode_stream(header: StreamHeader, layers: list[list[Sublayer]], options: EncoderOptions | None = None,
                  reference: bool = False) -> EncodedStream:
    """One nnc() bitstream for ``layers`` (sublayers with integer levels), modes chosen by trial (``options.search``).

    The trees are coded by the compiled path (codec.compiled) unless ``reference`` asks for the pure-Python
    encoder (codec.reference); both write the same bytes.
    """
    writer = ElementWriter(AecEncoder()) if reference else FastElementWriter()
    options = options or EncoderOptions()
    planner = SublayerPlanner(options) if options.search == "sublayer" else TrialPlanner(options)
    _, _, stats = code_nnc(writer, header, layers, planner)
    bins = writer.engine.bins_encoded
    return EncodedStream(writer.engine.finish(), bins, stats)
