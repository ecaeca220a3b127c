"""How a conv layer is cut into tiles: output channels x output rows (always the full width), the input
channels of a tile in chunks that CONV accumulates, each tile's data in half of every buffer. A layer with few
input channels may instead run unrolled (im2col.py: LOAD gathers its kernel windows as the channels of a 1x1
conv); those plans compete with the plain ones on the same estimate.

Among every even split of K and every halving of C and of the output rows that fits, the plan with the
fewest estimated cycles wins, and among the plans within ESTIMATE_TOLERANCE of it the one with the fewest
commands (docs/compiler.md, "Tiling"). The estimate (:class:`CostEstimate`) adds up the units' own timing
(``aipu.sim.timing``) over a plan's commands, before they are placed in DRAM and in the buffers. Under the
"hidden" compression policy, a layer's weights become WDEC streams only where its best compressed plan is
within HIDDEN_SLACK of its best raw plan.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from aipu.compiler.compression import compression_policy
from aipu.compiler.lowering.base import field_max
from aipu.compiler.lowering.conv_layer import DIM_MAX, ConvLayer, output_size
from aipu.compiler.lowering.im2col import UnrolledWindow
from aipu.compiler.lowering.wdec_cost import LayerStream, WdecCost
from aipu.compiler.lowering.weight_streams import PARTS_OVERHEAD, decodable
from aipu.sim.machine.arch import (BUFFER_UNIT_BYTES, DEFAULT, PARAM_RECORD_BYTES, Buffer, DType,
                                   HardwareConfig, elements_bytes)
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.conv import ConvTiming
from aipu.sim.timing.dma import least_cycles, walk_words

ESTIMATE_TOLERANCE = 1.02   # plans whose estimated cycles are this close to the fastest count as ties
HIDDEN_SLACK = 0.01         # "hidden" compression: the estimated cycles decoding may add to a layer's best plan
_PIXELS_MAX = field_max(DEFAULT, Opcode.REQUANT, "pixels")      # output pixels of one tile


@dataclass(frozen=True)
class TilePlan:
    tile_k: int          # output channels per tile (groups > 1: a whole number of groups)
    tile_c: int          # input channels per CONV, chunks accumulated (groups > 1: per group; below C/G only
                         # when the tile holds one group, which then runs as a dense conv)
    tile_rows: int       # output rows per tile
    out_h: int
    out_w: int
    unrolled: bool = False   # the kernel window gathered by LOAD, run as a 1x1 conv (im2col.py); tile_c = C
    parts_overhead: float = PARTS_OVERHEAD   # compressed: the bytes WDEC parts may add (weight_streams.parts_of)
    compressed: bool = False     # the weight tiles are WDEC streams where they are smaller (weight_streams.py)
    weight_item_cycles: float = 0.0   # estimated CONV cycles on one weight tile, under which the next layer's
                                      # first decode may run (plan_tiles' ``hidden_under``)


@dataclass(frozen=True)
class ConvGeometry:
    """The sizes of a layer that its plan weighs, taken once per layer."""

    c: int               # input channels
    w: int               # input width
    k: int               # output channels
    cg: int              # input channels per group
    kh: int
    kw: int
    groups: int
    out_h: int
    out_w: int
    in_w: int            # padded input width
    out_type: DType      # INT4: two a byte, tiles of an even channel count
    stride_h: int
    dilation_h: int
    w_type: DType        # INT4: weights two a byte, chunks of an even channel count
    in_type: DType       # INT4: two a byte
    weight_dram_bits: int     # 8, INT4's 4, or a codebook index's bits
    planes: int               # dual INT4: 2 weight planes, 2·K CONV output channels and accumulators
    circ_size: int = 1        # block-circulant: tiles of whole block rows, every input channel in one chunk

    @classmethod
    def of(cls, layer: ConvLayer) -> ConvGeometry:
        _, c, _, w = layer.x.shape
        k, cg, kh, kw = layer.w.shape
        return cls(c, w, k, cg, kh, kw, layer.groups, *output_size(layer), w + layer.padding[1] + layer.padding[3],
                   layer.out_type, layer.stride[0], layer.dilation[0], layer.w_type, layer.in_type,
                   layer.weight_dram_bits, layer.planes, layer.circ_size)

    def weight_bytes(self, count: int) -> int:
        """Bytes of ``count`` weights in WEIGHT."""
        return elements_bytes(count, self.w_type)

    def out_bytes(self, count: int) -> int:
        """Bytes of ``count`` output elements."""
        return elements_bytes(count, self.out_type)

    def act_bytes(self, count: int) -> int:
        """Bytes of ``count`` input elements."""
        return elements_bytes(count, self.in_type)

    @property
    def k_step(self) -> int:
        """Output channels a tile is a multiple of: whole groups, and an even count for INT4 outputs."""
        return math.lcm(self.k // self.groups if self.groups > 1 else 1, 2 if self.out_type == DType.INT4 else 1,
                        self.circ_size)

    def weight_dram_bytes(self, count: int) -> int:
        """Bytes of ``count`` weights in DRAM."""
        return -(-count * self.weight_dram_bits // 8)

    @property
    def channel_step(self) -> int:
        """Input channels a chunk is a multiple of: those of a whole byte of weights in DRAM (1 for int8)."""
        return 8 // self.weight_dram_bits

    def input_rows(self, rows: int) -> int:
        """Input rows that ``rows`` output rows read."""
        return (rows - 1) * self.stride_h + self.dilation_h * (self.kh - 1) + 1

    def input_channels(self, tk: int, tc: int) -> int:
        """Input channels a tile of ``tk`` output channels reads per CONV."""
        return tc if self.groups == 1 else tk // (self.k // self.groups) * tc


def plan_tiles(layer: ConvLayer, config: HardwareConfig = DEFAULT, *, tile_k: int | None = None,
               tile_c: int | None = None, tile_rows: int | None = None, unrolled: bool | None = None,
               compress: str | None = None, hidden_under: float = 0.0, k_boundary: int | None = None) -> TilePlan:
    """Tiles that fit half of every buffer, chosen among even splits of K and halvings of C and of the output
    rows, plain or unrolled (im2col.py): the fewest commands among the plans within ESTIMATE_TOLERANCE of the
    fewest estimated cycles (:class:`CostEstimate`; docs/compiler.md, "Tiling").
    Explicitly given sizes are kept; ``unrolled`` True or False forces the mapping (None: the estimate's).
    ``compress`` (a policy of compiler/compression.py): the layer's weight tiles will be WDEC streams where
    WDEC takes them (weight_streams.py), so each plan's weights are weighed as WDEC's estimated decoding
    (wdec_cost.py) rather than as raw LOADs; "hidden" keeps the best raw plan, weights raw, where the best
    compressed one is estimated more than HIDDEN_SLACK slower, counting what its first decode takes beyond
    ``hidden_under``: the previous layer's CONV cycles on its last weight tile (TilePlan.weight_item_cycles),
    which the decode overlaps (it writes the other half of WEIGHT). ``k_boundary``: an output channel a tile
    boundary must fall on (only tile sizes dividing it are weighed): the end of the filters several models
    share, whose weights and records then lie in tiles of their own (docs/multimodel.md)."""
    shape = ConvGeometry.of(layer)
    step_k = shape.k_step
    if tile_k is not None and (tile_k % step_k or not 1 <= tile_k <= shape.k):
        raise ValueError(f"tile_k = {tile_k}: must be 1..{shape.k} and a multiple of {step_k} (the output channels "
                         "per group; even for INT4 outputs)")
    if ((tile_c is not None and not 1 <= tile_c <= shape.c)
            or (tile_rows is not None and not 1 <= tile_rows <= shape.out_h)):
        raise ValueError(f"tile_c = {tile_c} / tile_rows = {tile_rows}: must be 1..{shape.c} / 1..{shape.out_h}")
    if tile_c is not None and tile_c % shape.channel_step:
        raise ValueError(f"tile_c = {tile_c}: {shape.weight_dram_bits}-bit weights need chunks of a multiple of "
                         f"{shape.channel_step} input channels (whole bytes)")
    window = UnrolledWindow.of(layer) if unrolled is not False and tile_c in (None, shape.c) else None
    if window is not None and unrolled is None and not _unrolling_saves_blocks(shape, window, config):
        window = None
    if unrolled and window is None:
        raise ValueError("unrolled: the layer cannot run unrolled (groups = 1, horizontal dilation 1, a kernel "
                         "larger than 1x1, every output row reading the image, tile_c = C)")
    if k_boundary is not None and 0 < k_boundary < shape.k:
        if k_boundary % step_k or (tile_k is not None and k_boundary % tile_k):
            raise ValueError(f"k_boundary = {k_boundary}: must be a multiple of {step_k} and of tile_k")
    else:
        k_boundary = None
    sizes = (tile_k, tile_c, tile_rows, k_boundary)
    policy = compression_policy(compress)
    wdec = WdecCost(config, LayerStream.of(layer.w)) if policy and decodable(layer) else None
    cycles, plan, first_decode = _best_plan(shape, config, sizes, window, unrolled, wdec)
    if wdec is not None and policy == "hidden":
        raw_cycles, raw, _ = _best_plan(shape, config, sizes, window, unrolled, None)
        if cycles + max(0.0, first_decode - hidden_under) > raw_cycles * (1 + HIDDEN_SLACK):
            return raw
    return plan


def _best_plan(shape: ConvGeometry, config: HardwareConfig, sizes: tuple, window: UnrolledWindow | None,
               unrolled: bool | None, wdec: WdecCost | None) -> tuple[float, TilePlan, float]:
    """(estimated cycles, plan, its first decode's estimated cycles) of the best plan keeping ``sizes`` (tile_k,
    tile_c, tile_rows, None where free; k_boundary, which tile_k divides), plain unless ``unrolled`` and unrolled over ``window`` where given;
    compressed with ``wdec``."""
    tile_k, tile_c, tile_rows, k_boundary = sizes
    tks = [tile_k] if tile_k else [n * shape.k_step for n in _even_splits(shape.k // shape.k_step)
                                   if k_boundary is None or k_boundary % (n * shape.k_step) == 0]
    all_rows = [tile_rows] if tile_rows else _halvings(shape.out_h)
    halves = {buffer: config.buffer(buffer).bytes // 2 for buffer in Buffer}
    plain = CostEstimate(shape, config, wdec)
    candidates = [] if unrolled else _weighed(plain, halves, _plain_sizes(shape, tks, all_rows, tile_c), None)
    if window is not None:
        candidates += _weighed(UnrolledCost(shape, config, window, wdec), halves,
                               [(tk, shape.c, rows) for tk in tks for rows in all_rows], window)
    if not candidates:
        tk, rows = tile_k or shape.k_step, tile_rows or 1
        tc = shape.c if unrolled else tile_c or 1 if shape.groups == 1 else 1
        failed = [name for name, good in _fits(shape, halves, tk, tc, rows, window if unrolled else None).items()
                  if not good]
        raise ValueError(f"layer does not fit the buffers even with tile_k={tk}, tile_c={tc}, tile_rows={rows} "
                         f"(too large for: {', '.join(failed)})")
    # The estimate is not exact to a few percent: among the plans that close to the fastest, the fewest commands
    # (the plain mapping on a tie).
    fastest = min(candidate[0] for candidate in candidates)
    best = min(candidates, key=lambda candidate: (candidate[0] > fastest * ESTIMATE_TOLERANCE, candidate[1:]))
    cycles, *_, tk, tc, rows, is_unrolled = best
    estimate = UnrolledCost(shape, config, window, wdec) if is_unrolled else plain
    plan = TilePlan(tk, tc, rows, shape.out_h, shape.out_w, is_unrolled, estimate.parts_overhead(tk, tc, rows),
                    compressed=wdec is not None, weight_item_cycles=estimate.between_decodes(tk, tc, rows))
    return cycles, plan, estimate.first_decode(tk, tc, rows)


def _unrolling_saves_blocks(shape: ConvGeometry, window: UnrolledWindow, config: HardwareConfig) -> bool:
    """Whether the unrolled CONV has fewer row chunks per output pixel than the plain one's taps x chunks:
    otherwise it cannot be faster (it reads more DRAM with more LOADs) and is not weighed."""
    rows = config.mac.rows
    return -(-window.depth // rows) < shape.kh * shape.kw * -(-shape.c // rows)


def _plain_sizes(shape: ConvGeometry, tks: list[int], all_rows: list[int],
                 tile_c: int | None) -> list[tuple[int, int, int]]:
    """The plain plans (tk, tc, rows) to weigh. A grouped tile reads whole groups (tile_c = C/G), or, holding
    one group, a chunk of its channels."""
    group_k = shape.k // shape.groups
    step = shape.channel_step                     # a chunk's weights fill whole bytes in DRAM
    channels = ([tile_c] if tile_c else [step * tc for tc in _halvings(shape.c // step)]) if shape.groups == 1 \
        else [step * tc for tc in _halvings(shape.cg // step)]
    if shape.circ_size > 1:                       # a circulant LOAD's signs cover all of the input channels
        channels = [shape.c]
    return [(tk, tc, rows) for tk in tks for tc in channels for rows in all_rows
            if shape.groups == 1 or tc == shape.cg or tk == group_k]


def _weighed(estimate: CostEstimate, halves: dict[Buffer, int], sizes: list[tuple[int, int, int]],
             window: UnrolledWindow | None) -> list[tuple]:
    """(cycles, commands, -rows, tk, tc, rows, unrolled) of each of the plans ``sizes`` that fits."""
    return [(*estimate(tk, tc, rows), -rows, tk, tc, rows, window is not None) for tk, tc, rows in sizes
            if all(_fits(estimate.shape, halves, tk, tc, rows, window).values())]


def _halvings(full: int) -> list[int]:
    sizes = [full]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // 2))
    return sizes


def _even_splits(full: int) -> list[int]:
    """Every tile size that splits ``full`` into n tiles as evenly as possible (ceil(full / n))."""
    return sorted({-(-full // n) for n in range(1, full + 1)}, reverse=True)


def _fits(shape: ConvGeometry, halves: dict[Buffer, int], tk: int, tc: int, rows: int,
          window: UnrolledWindow | None = None) -> dict[str, bool]:
    """For each limit, whether the tile (tk, tc, rows) keeps it: ``halves`` of the buffers (bytes), the CONV
    and REQUANT fields. Unrolled (``window``), the ACT tile is [rows][out_w][window depth]."""
    if window is None:
        channels, in_rows, in_w = shape.input_channels(tk, tc), shape.input_rows(rows), shape.in_w
    else:
        channels, in_rows, in_w = window.depth, rows, shape.out_w
    mac_k = tk * shape.planes
    return {"weight": mac_k * shape.kh * shape.kw * shape.weight_bytes(tc) <= halves[Buffer.WEIGHT],
            "param": tk * PARAM_RECORD_BYTES <= halves[Buffer.PARAM],
            "acc": rows * shape.out_w * mac_k * BUFFER_UNIT_BYTES[Buffer.ACC] <= halves[Buffer.ACC],
            "out": rows * shape.out_w * shape.out_bytes(tk) <= halves[Buffer.OUT],
            "act": in_rows * in_w * shape.act_bytes(channels) <= halves[Buffer.ACT],
            "fields": max(mac_k, channels, in_rows) <= DIM_MAX and rows * shape.out_w <= _PIXELS_MAX}


class CostEstimate:
    """(cycles, commands) of a layer's plans (tk, tc, rows), from the units' own timing (``aipu.sim.timing``):
    each CONV's cycles on a full tile (edge tiles counted as full), and the DMA's walk, a slot per DRAM word
    plus each LOAD's and STORE's fixed cycles. Inputs are re-read per k-tile (groups == 1; a grouped tile reads
    only its own groups' channels), weights per row tile when the input channels are split (the weight half
    then changes every step). The DMA and the MAC array overlap across tiles (double buffering): the busier
    one's cycles plus the other's share of one tile, the pipeline's fill. With ``wdec`` (compressed weights)
    the weight tiles leave the DMA for WDEC, a third stage weighed by :class:`WdecCost`, so that plans whose
    decoding would outlast the MACs lose (``_pipelined``). :class:`UnrolledCost` replaces the activations'
    LOADs and words and the CONVs' cycles."""

    def __init__(self, shape: ConvGeometry, config: HardwareConfig, wdec: WdecCost | None = None) -> None:
        self.shape, self.config, self.wdec = shape, config, wdec
        self.conv = ConvTiming.of(config, shape.w_type, shape.in_type)   # the constants, taken once per layer
        self.load, self.store = (least_cycles(config, opcode) for opcode in (Opcode.LOAD, Opcode.STORE))

    def __call__(self, tk: int, tc: int, rows: int) -> tuple[float, int]:
        shape = self.shape
        k_tiles, row_tiles = -(-shape.k // tk), -(-shape.out_h // rows)
        chunks = -(-(shape.c if shape.groups == 1 else shape.cg) // tc)
        tiles = k_tiles * row_tiles
        steps = tiles * chunks
        weight_loads = steps if chunks > 1 else k_tiles
        decoded = self._decoded(tk, tc)
        loads = self._activation_loads(k_tiles, steps) + (0 if decoded else weight_loads) + k_tiles  # + records
        dma = (self._input_words(tk, tc, rows, k_tiles, row_tiles, chunks)
               + (0 if decoded else self._weight_words(tc, row_tiles, chunks))
               + self._output_words(tk, k_tiles) + self.load * loads + self.store * tiles)
        mac = steps * self._conv_cycles(tk, tc, rows)
        commands = loads + tiles + steps + tiles + (weight_loads if decoded else 0)
        if not decoded:
            return max(dma, mac) + min(dma, mac) / tiles, commands
        wdec = weight_loads * self.wdec.cycles(tk, self._tile_weights(tk, tc), mac / weight_loads)[0]
        return self._pipelined(dma, mac, wdec, tiles, steps), commands

    def parts_overhead(self, tk: int, tc: int, rows: int) -> float:
        """The cap on the bytes the plan's WDEC parts may add: PARTS_OVERHEAD, or more where its decode would
        outlast the CONVs between two decodes (WdecCost.cycles)."""
        return self._one_decode(tk, tc, rows)[1] if self._decoded(tk, tc) else PARTS_OVERHEAD

    def first_decode(self, tk: int, tc: int, rows: int) -> float:
        """The estimated cycles of the plan's first WDEC command (0 where its weights are loaded raw), which
        the previous layer may not hide: the "hidden" policy adds them to the plan's estimate."""
        return self._one_decode(tk, tc, rows)[0] if self._decoded(tk, tc) else 0.0

    def _one_decode(self, tk: int, tc: int, rows: int) -> tuple[float, float]:
        """(cycles, parts' overhead cap) of one of the plan's WDEC commands, with the CONVs between two decodes
        to hide under (WdecCost.cycles)."""
        return self.wdec.cycles(tk, self._tile_weights(tk, tc), self.between_decodes(tk, tc, rows))

    def between_decodes(self, tk: int, tc: int, rows: int) -> float:
        """CONV cycles on one weight tile: a CONV step's where chunks reload the weights every step, else the
        k-tile's row tiles'."""
        row_tiles = -(-self.shape.out_h // rows)
        chunks = -(-(self.shape.c if self.shape.groups == 1 else self.shape.cg) // tc)
        return self._conv_cycles(tk, tc, rows) * (1 if chunks > 1 else row_tiles)

    def _tile_weights(self, tk: int, tc: int) -> int:
        """Weights of one weight tile (a k-tile's, or one chunk's of it)."""
        return tk * self.shape.planes * self.shape.kh * self.shape.kw * min(tc, self.shape.cg)

    def _decoded(self, tk: int, tc: int) -> bool:
        """Whether the plan's weight tiles are WDEC streams (compressed layers, where they fit WDEC's fields)."""
        return self.wdec is not None and self.wdec.decodes(tk, min(tc, self.shape.cg), self._tile_weights(tk, tc))

    @staticmethod
    def _pipelined(dma: float, mac: float, wdec: float, tiles: int, steps: int) -> float:
        """DMA, WDEC and the MAC array overlapped: the busiest one's cycles plus the pipeline's fill. Under the
        MAC array, the first tile's loads, as without WDEC (the first decode may run under the previous layer's
        last CONVs; counting it would favour plans that decode the same weights once per CONV step, reading
        their streams from DRAM as often: ``first_decode`` counts it apart); under WDEC or the DMA, the last
        CONV follows the last decode (one CONV step) or the last load (one tile)."""
        if mac >= max(dma, wdec):
            return mac + dma / tiles
        return wdec + mac / steps if wdec >= dma else dma + mac / tiles

    def _activation_loads(self, k_tiles: int, steps: int) -> int:
        return steps

    def _conv_cycles(self, tk: int, tc: int, rows: int) -> int:
        """One CONV's cycles on a full tile."""
        shape = self.shape
        dense = shape.groups == 1 or tc < shape.cg
        kg = shape.k // shape.groups
        return self.conv.cycles(self.config, groups=1 if dense else tk // kg, group_in=tc if dense else shape.cg,
                                group_out=(tk if dense else kg) * shape.planes, taps=shape.kh * shape.kw,
                                pixels=rows * shape.out_w)

    def _input_words(self, tk: int, tc: int, rows: int, k_tiles: int, row_tiles: int, chunks: int) -> int:
        """DRAM words the DMA walks for the plan's inputs (a slice of a few channels of an HWC tensor costs a
        word per pixel at least; adjacent runs merge)."""
        shape = self.shape
        return k_tiles * chunks * walk_words(self.config.dram.bytes_per_cycle,
                                             row_tiles * shape.input_rows(rows) * shape.w,
                                             shape.act_bytes(shape.input_channels(tk, tc)), shape.act_bytes(shape.c))

    def _weight_words(self, tc: int, row_tiles: int, chunks: int) -> int:
        """DRAM words of the raw weight LOADs: every chunk's, once per row tile when chunks reload them."""
        shape, word = self.shape, self.config.dram.bytes_per_cycle
        return (chunks * walk_words(word, shape.k * shape.planes * shape.kh * shape.kw,
                                    shape.weight_dram_bytes(min(tc, shape.cg)), shape.weight_dram_bytes(shape.cg))
                * (row_tiles if chunks > 1 else 1))

    def _output_words(self, tk: int, k_tiles: int) -> int:
        shape, word = self.shape, self.config.dram.bytes_per_cycle
        return k_tiles * walk_words(word, shape.out_h * shape.out_w, shape.out_bytes(tk), shape.out_bytes(shape.k))


class UnrolledCost(CostEstimate):
    """The estimate of an unrolled plan (im2col.py): one CONV per tile, a 1x1 conv over the window's depth;
    every output row's LOADs once per k-tile (their DRAM words counted exactly, taken once per layer)."""

    def __init__(self, shape: ConvGeometry, config: HardwareConfig, window: UnrolledWindow,
                 wdec: WdecCost | None = None) -> None:
        super().__init__(shape, config, wdec)
        self.window = window
        self.window_words = window.input_words(config.dram.bytes_per_cycle)

    def _activation_loads(self, k_tiles: int, steps: int) -> int:
        return k_tiles * self.window.out_h * self.window.loads_per_row()

    def _conv_cycles(self, tk: int, tc: int, rows: int) -> int:
        return self.conv.cycles(self.config, groups=1, group_in=self.window.depth, group_out=tk * self.shape.planes,
                                taps=1, pixels=rows * self.shape.out_w)

    def _input_words(self, tk: int, tc: int, rows: int, k_tiles: int, row_tiles: int, chunks: int) -> int:
        return k_tiles * self.window_words
