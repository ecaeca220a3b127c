"""The NPU hardware profile: the subset of the chapter-10 syntax the on-chip weight decoder (WDEC) executes.

A profile stream is what ``encode(..., NPU_OPTIONS)`` emits for one 4-D weight tensor without a bias: one
layer of one sublayer (dim 4, scan order 0), no z reordering, no kernel-adapted CTUs, and every CTU a
single CU (no split) coded as a unitree whose start depth is the leaf level (no start-depth signalling)
without a codebook. Each leaf is then coded alone, in the tree's depth-first (Morton) order:
``uni_map_nzflag``, and for a non-zero level ``uni_sign`` and ``uni_abs_q``. docs/codec.md §11 lists the
profile; ``decode_profile_stream`` decodes it the way the hardware does and refuses, at the element that
leaves the profile, every stream outside it (``CodecError`` with ``element`` naming it).

The walk here uses the reference engine and the element table, so its bins are the general decoder's bins
(the tests compare the traces). It also counts what the hardware's cycle formula needs (rtl/wdec.py):
the Morton candidates outside the CU that the leaf walk steps over, the engine cycles spent on runs of
zero bits longer than the engine's one-cycle renormalisation window, and the leaves' cascade runs (the bins
of a leaf, cut before each bin that needs such zero-run cycles) by length, from which ``bin_cycles`` gives
the cycles of the bins for any ``wdec.bins_per_cycle``.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from aipu.sim.machine.arch import WDEC_MAX_PARTS as MAX_PARTS

from .compiled.aec_decoder import (MAX_RUN, NO_TRACE, POSITIONS_TRACE_COLUMNS, S_RUNS, S_ZERO_RUN_BITS, S_ZERO_RUNS,
                                  raise_on_error)
from .compiled.contexts import Element
from .compiled.element_io import FastElementReader, FastElementWriter
from .compiled.profile_walk import (CUBE_SHIFT, CYCLE_SKIP, MARK_CUBE, MARK_LEAF, MARK_LEVEL, WALK_CTU, WALK_CUBES,
                                    WALK_ELEMENT, WALK_END_FLAG, WALK_ERROR, WALK_LAST_CUBE, WALK_OUTSIDE, WALK_POS,
                                    WALK_SKIPS, WALK_STATUS_SIZE, WALK_VALUE, decode_profile_ctus, profile_cycles,
                                    profile_entries)
from .errors import CodecError, check_stream_end, error_context
from .reference.element_coder import ElementDecoder
from .reference.elements import element_spec
from .reference.engine import RANGE_BITS, AecDecoder
from .reference.geometry import ctu_size_from_idx
from .reference.headers import DEFAULT_LIMITS, step_size
from .reference.sublayer_coder import MAX_CBOOK_SIZE, code_weight_sublayer

ZERO_RUN_BITS = 8           # the hardware renormalises past at most this many leading zero bits per cycle
PROFILE_CTU_FLAGS = (("select_map_mode_flag", 0), ("map_mode_flag", 1), ("enable_start_depth", 0))
PROFILE_CU_FLAGS = (("signalled_size", 0), ("uni_mode", 1))     # after split_flag: no codebook, a unitree
PROFILE_SPLIT_FLAG = ("split_flag", 0)                           # coded only in a CTU larger than a minimum CU
SPLIT_FLAG_MIN_CU = 8       # MIN_CU3D_SIZE: a CTU wider or taller than one minimum CU codes split_flag


def with_profile(options):
    """``options`` (CodecOptions) restricted so that the encoder emits the profile; quantisation is kept."""
    from .encoder import EncoderOptions

    return replace(options, enable_zdep_reorder=False, enable_max_ctu3d_size=False, scan_order=0,
                   encoder=EncoderOptions(trees=("unitree",), codebook="off", start_depth="leaf", split="never",
                                          zdep="off"))


def encoder_options(max_ctu_size: int = 64):
    """CodecOptions for integer weights in the profile (``aipu codec encode --profile npu``)."""
    from .api import CodecOptions

    return with_profile(CodecOptions(max_ctu_size=max_ctu_size))


def encode_profile_stream(weights: np.ndarray, max_ctu_size: int = 64, continuation: bool = False) -> bytes:
    """One layer's bare stream of integer weights [O, I, KH, KW] in the profile: the bytes the compiler places
    in DRAM for a WDEC command (a container layer's payload, without the container). ``continuation``: a
    continuation part instead, CONTINUATION_HEADER's fields and then the same CTUs (docs/codec.md §11)."""
    from .api import layer_sublayers
    from .encoder import TrialPlanner, encode_stream

    options = encoder_options(max_ctu_size)
    header, subs, _ = layer_sublayers({"weight": np.asarray(weights)}, "weight", None, options)
    if not continuation:
        return encode_stream(header, [subs], options.encoder).data
    writer = FastElementWriter()
    for name, _ in CONTINUATION_HEADER:
        writer.code(name, getattr(header, name))
    code_weight_sublayer(writer, header, subs[0], TrialPlanner(options.encoder), DEFAULT_LIMITS)
    return writer.finish()


@dataclass
class ProfileDecode:
    """A decoded profile stream: levels in the tensor's [O][I][KH][KW] layout and the cycle model's counts."""

    levels: np.ndarray
    bins: int = 0                    # every bin, the terminating stuffing bin included
    morton_skips: int = 0            # leaf-walk candidates outside their CU
    zero_run_cycles: int = 0         # extra engine cycles on long zero runs
    leaf_runs: np.ndarray = field(default_factory=lambda: np.zeros(MAX_RUN + 1, np.int64))   # [n]: runs of n bins
    cube_runs: int = 0               # runs of leaves of one 8x8x8 cube (with a positions trace only)


def bin_cycles(counts, bins_per_cycle: int) -> int:
    """Engine cycles of the bins of a decoded stream (``counts``: a ProfileDecode, or anything with its
    ``bins`` and ``leaf_runs``) on an engine of ``bins_per_cycle`` stages (docs/rtl-wdec.md, "Cycles"): a
    cascade run of n leaf bins takes ceil(n / B) cycles, every other bin one."""
    lengths = np.arange(len(counts.leaf_runs))
    leaf_bins = int(lengths @ counts.leaf_runs)
    return counts.bins - leaf_bins + int(-(-lengths // bins_per_cycle) @ counts.leaf_runs)


class _CountingDecoder(AecDecoder):
    """The reference engine, counting the cycles the hardware spends on zero runs before a bin and the
    cascade runs of the leaves (``run_from``: the bin that began the open run, None outside a leaf); with
    ``cycles`` a list, it also receives the stream bits the hardware's engine takes in each of those cycles
    and in each bin's."""

    def __init__(self, data: bytes, cycles: list[int] | None = None) -> None:
        super().__init__(data, trace=True)
        self.zero_run_cycles = 0
        self.cycles = cycles
        self.leaf_runs = np.zeros(MAX_RUN + 1, np.int64)
        self.run_from: int | None = None

    def end_run(self) -> None:
        """The open run ends before the next bin (one after zero-run steps, or past a leaf's end), if it holds
        a bin; the next run begins there."""
        if self.run_from is not None and self.run_from < self.bins_decoded:
            self.leaf_runs[min(self.bins_decoded - self.run_from, MAX_RUN)] += 1
            self.run_from = self.bins_decoded

    def _decode(self, pred_mps: int, lg_pmps_full: int) -> int:
        runs, position = 0, self._pos
        if (self._value_d or (self._bflag == 1 and self._rs1 == self._bound_s)) and self._value_t == 0:
            value_s = 0
            while self._bound_s - value_s > ZERO_RUN_BITS and self._zero_bits_at(self._pos + value_s):
                value_s += ZERO_RUN_BITS
                runs += 1
        self.zero_run_cycles += runs
        if runs:
            self.end_run()
        bin_val = super()._decode(pred_mps, lg_pmps_full)
        if self.cycles is not None:
            self.cycles.extend([ZERO_RUN_BITS] * runs)
            self.cycles.append(self._pos - position - runs * ZERO_RUN_BITS)
        return bin_val

    def _zero_bits_at(self, position: int) -> bool:
        """The ZERO_RUN_BITS stream bits from ``position`` are all 0 (bits past the end read as 0)."""
        for bit in range(position, position + ZERO_RUN_BITS):
            if bit < self._end and (self._data[bit >> 3] >> (7 - (bit & 7))) & 1:
                return False
        return True


def _outside(element: str, value: int, wanted: int) -> CodecError:
    return CodecError(f"{element} = {value} is outside the npu profile (needs {wanted})", element=element)


def morton_leaves(zdepth: int, height: int, width: int):
    """The unitree's leaf order (its depth-first walk of 10.3.11, as the tests check): Morton order with the z
    bit above y above x at every level. Yields (z, y, x) per leaf and None per candidate outside the CU; the
    hardware steps over a whole out-of-range subtree per such candidate, as here."""
    levels = max(int(zdepth - 1).bit_length(), int(height - 1).bit_length(), int(width - 1).bit_length())
    extents = (zdepth, height, width)
    index = 0
    while index < 1 << (3 * levels):
        coords = tuple(sum(((index >> (3 * bit + 2 - axis)) & 1) << bit for bit in range(levels)) for axis in range(3))
        outside = [(coord ^ (extent - 1)).bit_length() - 1
                   for coord, extent in zip(coords, extents) if coord >= extent]
        if outside:
            yield None
            index = (index | ((1 << (3 * max(outside))) - 1)) + 1
        else:
            yield coords
            index += 1


# nnc_header() and layer_header() of a profile stream: element -> the value the profile needs (None: any)
PROFILE_HEADER = (("integer_input", None), ("total_trainable_layer", 1), ("enable_escape_reorder", None),
                  ("enable_zdep_reorder", 0), ("enable_max_ctu3d_size", 0), ("max_ctu3d_idx", None),
                  ("array1d_depth", None), ("total_sublayer", 1), ("sublayer_cmaxw", None), ("sublayer_dim", 0),
                  ("sublayer_shape", "R"), ("sublayer_shape", "S"), ("sublayer_shape", "C"), ("sublayer_shape", "K"),
                  ("sublayer_scan_order", 0), ("sublayer_bitdepth", None))
# what a continuation part (every part of a parts stream but the first) keeps of them: the one field its CTU
# walk needs; the rest is the first part's
CONTINUATION_HEADER = (("max_ctu3d_idx", None),)
SHAPE_AXES = "RSCK"


def read_header(read: Callable[[str], int], sublayer_shape: tuple[int, int, int, int],
                continuation: bool = False) -> dict[str, int]:
    """The stream and layer headers (of a continuation part: CONTINUATION_HEADER), each field checked as soon as
    ``read(element)`` returns it: the profile's values, the sublayer shape (R, S, C, K) the caller expects, and
    the step size's zero bit depth (codec.md §2, A13)."""
    header: dict[str, int] = {}
    if continuation:
        return {name: read(name) for name, _ in CONTINUATION_HEADER}
    for name, wanted in PROFILE_HEADER:
        value = read(name)
        if isinstance(wanted, str):
            expected = sublayer_shape[SHAPE_AXES.index(wanted)]
            if value != expected:
                raise CodecError(f"sublayer_shape {wanted} = {value}, the command expects {expected}",
                                 element="sublayer_shape")
        elif wanted is not None and value != wanted:
            raise _outside(name, value, wanted)
        header[name] = value
    if header["integer_input"] == 0 and header["sublayer_cmaxw"]:
        step_size(header["sublayer_cmaxw"], header["sublayer_bitdepth"], 0, one_d=False)
    return header


def _ctu_origins(header: dict[str, int], in_c: int, out_c: int) -> list[tuple[int, int]]:
    """(first input channel, first output channel) of every CTU, in the stream's order."""
    size = ctu_size_from_idx(header["max_ctu3d_idx"])
    return [(c, k) for c in range(0, in_c, size) for k in range(0, out_c, size)]


def decode_profile_stream(stream: bytes, shape: tuple[int, int, int, int], trace: list | None = None,
                          cycles: list | None = None, continuation: bool = False) -> ProfileDecode:
    """Decode a profile stream of an [O][I][KH][KW] tensor (``continuation``: a continuation part, whose
    header is CONTINUATION_HEADER); CodecError outside the profile or on corruption.
    ``trace`` receives the (ctxIdx, bin) of every bin decoded, also those before an error; ``cycles`` the
    stream bits the hardware's engine takes in each cycle after its 9-bit start (a zero-run step, a bin, the
    stuffing bin included), or None for a Morton candidate outside its CU (a cycle of the leaf walk alone),
    for the NPU's cycle model."""
    out_c, in_c, k_h, k_w = (int(n) for n in shape)
    decoder = _CountingDecoder(stream, cycles)
    reader = ElementDecoder(decoder)
    result = ProfileDecode(levels=np.zeros((out_c, in_c, k_h, k_w), dtype=np.int64))
    try:
        header = read_header(reader.read, (k_h, k_w, in_c, out_c), continuation)
        zdepth = k_h * k_w
        origins = _ctu_origins(header, in_c, out_c)
        size = ctu_size_from_idx(header["max_ctu3d_idx"])
        for index, (c0, k0) in enumerate(origins):
            with error_context(ctu=index):
                height, width = min(size, in_c - c0), min(size, out_c - k0)
                for name, wanted in PROFILE_CTU_FLAGS:
                    if (value := reader.read(name)) != wanted:
                        raise _outside(name, value, wanted)
                if height > SPLIT_FLAG_MIN_CU or width > SPLIT_FLAG_MIN_CU:
                    name, wanted = PROFILE_SPLIT_FLAG
                    if (value := reader.read(name)) != wanted:
                        raise _outside(name, value, wanted)
                for name, wanted in PROFILE_CU_FLAGS:
                    inputs = {"max_value": MAX_CBOOK_SIZE} if name == "signalled_size" else {}
                    if (value := reader.read(name, **inputs)) != wanted:
                        raise _outside(name, value, wanted)
                previous = 0
                for leaf in morton_leaves(zdepth, height, width):
                    if leaf is None:
                        result.morton_skips += 1
                        if cycles is not None:
                            cycles.append(None)
                        continue
                    z, y, x = leaf
                    value = 0
                    decoder.run_from = decoder.bins_decoded
                    if reader.read("uni_map_nzflag", n0=0, n1=0):
                        sign = reader.read("uni_sign", c0=previous)
                        magnitude = reader.read("uni_abs_q")
                        value = -magnitude if sign else magnitude
                    decoder.end_run()
                    decoder.run_from = None
                    result.levels[k0 + x, c0 + y, z // k_w, z % k_w] = value
                    previous = value
                last = int(index == len(origins) - 1)
                if reader.read("end_of_last_layer_ctu_flag") != last:
                    raise CodecError("end_of_last_layer_ctu_flag disagrees with the CTU count",
                                     element="end_of_last_layer_ctu_flag")
        result.bins = decoder.bins_decoded + 1
        end = decoder.finish()
    except CodecError as error:
        raise error.add_context(bit_position=decoder.bit_position)
    finally:
        if trace is not None:
            trace.extend(decoder.trace)
    check_stream_end(stream, end)
    result.zero_run_cycles, result.leaf_runs = decoder.zero_run_cycles, decoder.leaf_runs
    return result


def _flag_table(flags) -> np.ndarray:
    """Rows (Element, value needed, the unary element's max_value or -1) for the compiled walk."""
    return np.array([(Element[name], wanted, MAX_CBOOK_SIZE if element_spec(name).binarization == "U" else -1)
                     for name, wanted in flags], dtype=np.int64).reshape(-1, 3)


NO_CUBES = np.zeros((0, 3), dtype=np.int64)
_FLAG_TABLES = tuple(_flag_table(flags) for flags in (PROFILE_CTU_FLAGS, (PROFILE_SPLIT_FLAG,), PROFILE_CU_FLAGS))
_PROFILE_FLAG_VALUES = dict((*PROFILE_CTU_FLAGS, PROFILE_SPLIT_FLAG, *PROFILE_CU_FLAGS))


def decode_profile_compiled(stream: bytes, shape: tuple[int, int, int, int], trace: np.ndarray = NO_TRACE,
                            cubes: np.ndarray = NO_CUBES, continuation: bool = False) -> ProfileDecode:
    """``decode_profile_stream`` over the compiled engine (codec.compiled.profile_walk): the same levels, bins,
    Morton skips, zero-run cycles, leaf runs and refusals, about a hundred times faster. ``trace``: the engine's
    trace array (codec.compiled.aec_decoder), filled with every bin; with a positions trace, ``cubes`` (int64
    rows) receives the cube (k >> 3, z >> 3, c >> 3) of each run of leaves of one cube, as many as it holds
    (``cube_runs`` counts them)."""
    out_c, in_c, k_h, k_w = (int(n) for n in shape)
    reader = FastElementReader(stream, trace)
    reader.state[S_ZERO_RUN_BITS] = ZERO_RUN_BITS
    levels = np.zeros((out_c, in_c, k_h, k_w), dtype=np.int64)
    status = np.zeros(WALK_STATUS_SIZE, dtype=np.int64)
    status[WALK_LAST_CUBE] = -1
    try:
        header = read_header(reader.code, (k_h, k_w, in_c, out_c), continuation)
        size = ctu_size_from_idx(header["max_ctu3d_idx"])
        ctus = np.array([(c, k, min(size, in_c - c), min(size, out_c - k))
                         for c, k in _ctu_origins(header, in_c, out_c)], dtype=np.int64).reshape(-1, 4)
        decode_profile_ctus(reader.state, reader.ctx, reader.data, trace, levels, ctus, k_h * k_w, k_w,
                            *_FLAG_TABLES, SPLIT_FLAG_MIN_CU, status, cubes)
        element = Element(int(status[WALK_ELEMENT])).name
        with error_context(ctu=int(status[WALK_CTU])):
            raise_on_error(reader.state, element=element)
            if status[WALK_ERROR] == WALK_OUTSIDE:
                raise _outside(element, int(status[WALK_VALUE]), _PROFILE_FLAG_VALUES[element]).add_context(
                    bit_position=int(status[WALK_POS]))
            if status[WALK_ERROR] == WALK_END_FLAG:
                raise CodecError("end_of_last_layer_ctu_flag disagrees with the CTU count", element=element,
                                 bit_position=int(status[WALK_POS]))
        bins = reader.bins_decoded + 1
        end = reader.finish()
    except CodecError as error:
        raise error.add_context(bit_position=reader.bit_position)
    check_stream_end(stream, end)
    return ProfileDecode(levels, bins, int(status[WALK_SKIPS]), int(reader.state[S_ZERO_RUNS]),
                         reader.state[S_RUNS:S_RUNS + MAX_RUN + 1].copy(), int(status[WALK_CUBES]))


def profile_cycles_compiled(stream: bytes, shape: tuple[int, int, int, int], counts=None,
                            continuation: bool = False) -> np.ndarray:
    """``decode_profile_stream(..., cycles=)``'s list from the compiled walk, as int8 with CYCLE_SKIP for
    None: the stream bits WDEC's engine takes in each cycle after its 9-bit start. The stream is decoded with
    a positions trace of exactly as many rows as it has bins and Morton skips: ``counts`` (its ``bins``,
    ``morton_skips`` and ``zero_run_cycles``) if the caller has them, else from a decode first."""
    counts = decode_profile_compiled(stream, shape, continuation=continuation) if counts is None else counts
    trace = np.zeros((counts.bins + counts.morton_skips, POSITIONS_TRACE_COLUMNS), dtype=np.int32)
    decode_profile_compiled(stream, shape, trace, continuation=continuation)
    cycles = np.empty(len(trace) + counts.zero_run_cycles, dtype=np.int8)
    profile_cycles(trace, RANGE_BITS, ZERO_RUN_BITS, cycles)
    return cycles


def cube_grid(shape: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """The aligned 8x8x8 cubes of (k, z, c) along each axis of an [O][I][KH][KW] tensor (docs/rtl-wdec.md)."""
    out_c, in_c, k_h, k_w = (int(n) for n in shape)
    return tuple(-(-n // (1 << CUBE_SHIFT)) for n in (out_c, k_h * k_w, in_c))


def profile_entries_compiled(stream: bytes, shape: tuple[int, int, int, int], bins_per_cycle: int,
                             counts=None, continuation: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The engine's cycles after its 9-bit start on an engine of ``bins_per_cycle`` (B) stages (docs/rtl-wdec.md,
    "The cascade"): up to B consecutive bins of one leaf a cycle, cut before a bin that needs zero-run steps,
    every other bin one a cycle, a cycle per zero-run step and per Morton skip (CYCLE_SKIP). Returns (bits,
    marks, cubes): int8 stream bits per cycle; uint8 marks per cycle, MARK_LEVEL where it completes a level
    (decodes a leaf's last bin), MARK_LEAF on a leaf's cycles (its bins' and their zero-run steps), MARK_CUBE on
    the first cycle of each cube's leaves (its ordinal counts the MARK_CUBE cycles up to it, less one); and the
    cubes' (k >> 3, z >> 3, c >> 3) by ordinal (int64 rows). As many cycles as ``bin_cycles(counts, B) +
    morton_skips + zero_run_cycles``; for B = 1 the bits are ``profile_cycles_compiled``'s. Each cube's leaves
    are contiguous in the Morton order (AssertionError if not)."""
    counts = decode_profile_compiled(stream, shape, continuation=continuation) if counts is None else counts
    trace = np.zeros((counts.bins + counts.morton_skips, POSITIONS_TRACE_COLUMNS), dtype=np.int32)
    cubes = np.zeros((int(np.prod(cube_grid(shape))), 3), dtype=np.int64)
    runs = decode_profile_compiled(stream, shape, trace, cubes, continuation).cube_runs
    if runs != len(cubes):
        raise AssertionError(f"{runs} runs of one cube's leaves, {len(cubes)} cubes: a cube's leaves not contiguous")
    size = bin_cycles(counts, bins_per_cycle) + counts.morton_skips + counts.zero_run_cycles
    bits, marks = np.empty(size, dtype=np.int8), np.zeros(size, dtype=np.uint8)
    written = profile_entries(trace, RANGE_BITS, ZERO_RUN_BITS, bins_per_cycle, bits, marks)
    if written != size:
        raise AssertionError(f"the profile walk gave {written} engine cycles at B = {bins_per_cycle}, its counts "
                             f"{size} (-1: more)")
    return bits, marks, cubes


def cube_writes(cubes: np.ndarray, wgt_addr: int, shape: tuple[int, int, int, int], port_bytes: int) -> np.ndarray:
    """WRITES of each cube (rows (k >> 3, z >> 3, c >> 3)) of a part whose levels go to WEIGHT from ``wgt_addr``
    (its first kernel's byte), ``shape`` the part's [O][I][KH][KW]: the stager writes a cube as rows, one per
    valid (k, z), of its channels c0 .. c0 + nc - 1 at byte A = wgt_addr + (k * taps + z) * in_c + c0, each row
    one write per WEIGHT word of ``port_bytes`` it touches (docs/rtl-wdec.md, "Stager"). int64 per cube."""
    out_c, in_c, k_h, k_w = (int(n) for n in shape)
    taps, side = k_h * k_w, 1 << CUBE_SHIFT
    cubes = np.asarray(cubes, dtype=np.int64).reshape(-1, 3)
    offsets = np.arange(side)
    k = (cubes[:, 0:1] << CUBE_SHIFT) + offsets                    # [n, 8] kernels, taps, first channel
    z = (cubes[:, 1:2] << CUBE_SHIFT) + offsets
    c0 = cubes[:, 2] << CUBE_SHIFT
    nc = np.minimum(side, in_c - c0)
    start = wgt_addr + (k[:, :, None] * taps + z[:, None, :]) * in_c + c0[:, None, None]      # [n, 8, 8]
    words = (start + nc[:, None, None] - 1) // port_bytes - start // port_bytes + 1
    valid = (k < out_c)[:, :, None] & (z < taps)[:, None, :]
    return np.where(valid, words, 0).sum(axis=(1, 2))


# --- Parts: one tile's stream split by output channels for parallel engines -----------------------------------
PART_LENGTH = struct.Struct("<I")     # the parts header: one little-endian u32 byte length per part


class Part(NamedTuple):
    """One part of a parts stream: its bytes' place in the whole stream and its output channels k0 .. k1-1."""

    offset: int
    length: int
    k0: int
    k1: int


def part_channels(out_c: int, parts: int) -> list[tuple[int, int]]:
    """The output channels of each part: [floor(i·out_c/parts), floor((i+1)·out_c/parts))."""
    return [(i * out_c // parts, (i + 1) * out_c // parts) for i in range(parts)]


def _check_parts(parts: int, out_c: int) -> None:
    if not 1 <= parts <= MAX_PARTS:
        raise CodecError(f"parts = {parts} is outside 1..{MAX_PARTS}", element="parts")
    if parts > out_c:
        raise CodecError(f"parts = {parts} exceeds out_c = {out_c}: every part needs an output channel",
                         element="parts")


def encode_parts_stream(weights: np.ndarray, parts: int, max_ctu_size: int = 64) -> bytes:
    """A WDEC stream of integer weights [O, I, KH, KW] in ``parts`` parts (docs/codec.md §11): for 1 the
    profile stream itself, else the header of part lengths, the first part's profile stream and the others'
    continuation parts, so that ``parts`` engines can decode it at once."""
    weights = np.asarray(weights)
    _check_parts(parts, weights.shape[0])
    if parts == 1:
        return encode_profile_stream(weights, max_ctu_size)
    streams = [encode_profile_stream(weights[k0:k1], max_ctu_size, continuation=index > 0)
               for index, (k0, k1) in enumerate(part_channels(len(weights), parts))]
    return b"".join(PART_LENGTH.pack(len(stream)) for stream in streams) + b"".join(streams)


def split_parts(stream: bytes, out_c: int, parts: int) -> list[Part]:
    """The parts of a WDEC stream of ``out_c`` output channels, its header checked: CodecError naming the
    element (``parts``, ``part i length``) at its byte in the stream."""
    _check_parts(parts, out_c)
    if parts == 1:
        return [Part(0, len(stream), 0, out_c)]
    offset = PART_LENGTH.size * parts
    if len(stream) < offset:
        raise CodecError(f"the header of {parts} part lengths needs {offset} bytes, the stream has {len(stream)}",
                         element=f"part {len(stream) // PART_LENGTH.size} length", bit_position=8 * len(stream))
    result = []
    for index, (k0, k1) in enumerate(part_channels(out_c, parts)):
        (length,) = PART_LENGTH.unpack_from(stream, PART_LENGTH.size * index)
        if length == 0 or offset + length > len(stream):
            raise CodecError(f"part {index} length = {length} is not 1..{len(stream) - offset}, the bytes left",
                             element=f"part {index} length", bit_position=8 * PART_LENGTH.size * index)
        result.append(Part(offset, length, k0, k1))
        offset += length
    if offset != len(stream):
        raise CodecError(f"the part lengths sum to {offset - PART_LENGTH.size * parts} bytes, {len(stream) - offset} "
                         "fewer than follow the header", element=f"part {parts - 1} length",
                         bit_position=8 * PART_LENGTH.size * (parts - 1))
    return result


def decode_parts(stream: bytes, shape: tuple[int, int, int, int], parts: int, decode: Callable) -> list:
    """(Part, ``decode(part bytes, part shape, continuation=)``) of every part, in stream order (every part but
    the first a continuation part); a CodecError of a part names the part and counts its position from the start
    of the whole stream."""
    out_c, in_c, k_h, k_w = (int(n) for n in shape)
    result = []
    for index, part in enumerate(split_parts(stream, out_c, parts)):
        try:
            part_shape = (part.k1 - part.k0, in_c, k_h, k_w)
            result.append((part, decode(stream[part.offset:part.offset + part.length], part_shape,
                                        continuation=index > 0)))
        except CodecError as error:
            raise (error.relocate(8 * part.offset).add_context(part=index) if parts > 1 else error) from None
    return result


def _joined(stream: bytes, shape, parts: int, decode: Callable) -> ProfileDecode:
    """The whole tensor of a parts stream, with the counts of all parts summed."""
    joined = ProfileDecode(levels=np.zeros(tuple(int(n) for n in shape), dtype=np.int64))
    for part, decoded in decode_parts(stream, shape, parts, decode):
        joined.levels[part.k0:part.k1] = decoded.levels
        joined.bins += decoded.bins
        joined.morton_skips += decoded.morton_skips
        joined.zero_run_cycles += decoded.zero_run_cycles
        joined.leaf_runs += decoded.leaf_runs
    return joined


def decode_parts_stream(stream: bytes, shape: tuple[int, int, int, int], parts: int) -> ProfileDecode:
    """The reference decoder of a WDEC stream of ``parts`` parts (``decode_profile_stream`` per part)."""
    return _joined(stream, shape, parts, decode_profile_stream)


def decode_parts_compiled(stream: bytes, shape: tuple[int, int, int, int], parts: int) -> ProfileDecode:
    """``decode_parts_stream`` over the compiled walk (``decode_profile_compiled`` per part)."""
    return _joined(stream, shape, parts, decode_profile_compiled)
