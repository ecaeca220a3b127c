"""The DMA units' handlers: LOAD (strided DRAM to a buffer, with a padded border; codebook indices or
block-circulant first rows expanded on the way into WEIGHT), STORE (the output buffer to strided DRAM) and WDEC (a compressed weight stream in DRAM
decoded into the weight buffer)."""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from aipu.sim.interpreter.run_loop import load_row, store_row
from aipu.sim.interpreter.results import DRAM
from aipu.sim.interpreter.state import RunState, strided_view, view
from aipu.sim.golden.circulant import expand_circulant_rows, sign_bits
from aipu.sim.golden.codebook import expand_codebook
from aipu.sim.machine.arch import DTYPE_BYTES, DTYPE_NUMPY, Buffer, DType
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.isa import (CIRC_SIGNS_MAX, CODEBOOK_SLOT_BYTES, IndexBits, circ_sign_bytes, circ_size,
                                  load_expansion, load_tile_rows)
from aipu.sim.machine.program import Command

if TYPE_CHECKING:
    from aipu.sim.interpreter.preparer import Preparer


def load(preparer: Preparer, cmd: Command):
    buffer, elem = Buffer(cmd.buffer), DType(cmd.elem_type)
    signs = _circulant_signs(preparer, cmd)
    codebook = _codebook(preparer, cmd)
    source = preparer.strided_dram("dram_addr", cmd.dram_addr, cmd, write=False)
    rows, cols = load_tile_rows(cmd) + cmd.pad_top + cmd.pad_bottom, cmd.x_size + cmd.pad_left + cmd.pad_right
    info = np.iinfo(DTYPE_NUMPY[elem])
    if not info.min <= cmd.pad_value <= info.max:
        raise ExecutionError(f"{preparer.where}: field pad_value = {cmd.pad_value}: outside {elem.name} range")
    run_bytes = cmd.run * DTYPE_BYTES[elem]
    start, stop = preparer.span(buffer, "sram_addr", cmd.sram_addr, rows * cols * run_bytes, DTYPE_NUMPY[elem],
                                byte_address=True)
    preparer.stats.bytes_moved[f"DRAM->{buffer.name}"] += load_tile_rows(cmd) * cmd.x_size * source[1][2]   # a circulant row: L reads
    top, left, bottom, right, pad_value = cmd.pad_top, cmd.pad_left, cmd.pad_bottom, cmd.pad_right, cmd.pad_value
    inside = (slice(top, top + load_tile_rows(cmd)), slice(left, left + cmd.x_size))
    padded = top or left or bottom or right
    if codebook is None and signs is None:
        preparer.row = load_row(int(buffer), start, rows, cols, DTYPE_BYTES[elem], top, left, source, pad_value)

    def execute(state: RunState) -> None:
        target = state.spaces[buffer][start:stop]
        if padded:       # the border, element by element, then the data inside it
            elements = target.view(DTYPE_NUMPY[elem]).reshape(rows, cols, cmd.run)
            elements[:top] = elements[rows - bottom:] = pad_value
            elements[inside[0], :left] = elements[inside[0], cols - right:] = pad_value
        data = strided_view(state, source)
        if codebook is not None:
            data = expand_codebook(data, state.spaces[Buffer.LUT][codebook], cmd.index_bits).view(np.uint8)
        if signs is not None:
            negative = sign_bits(state.spaces[Buffer.LUT][signs], cmd.run)
            data = expand_circulant_rows(data, circ_size(cmd), negative).view(np.uint8)
        target.reshape(rows, cols, run_bytes)[inside] = data
    return execute


def _circulant_signs(preparer: Preparer, cmd: Command) -> slice | None:
    """A circulant LOAD (circ_size > 1): its sign bits' bytes in LUT memory, after the checks the hardware makes
    first, in its order (docs/rtl-dma.md, "Block-circulant rows"); None for any other LOAD."""
    size, dram_word = circ_size(cmd), preparer.config.dram.bytes_per_cycle
    if size == 1:
        return None
    pads = [name for name in ("pad_top", "pad_bottom", "pad_left", "pad_right") if getattr(cmd, name)]
    unaligned = [name for name in ("dram_addr", "dram_y_stride", "dram_x_stride") if getattr(cmd, name) % size]
    refusals = [
        (cmd.index_bits != IndexBits.PLAIN, "index_bits", cmd.index_bits, "PLAIN (the rows are int8 bytes)"),
        (cmd.buffer != Buffer.WEIGHT, "buffer", Buffer(cmd.buffer).name, "WEIGHT"),
        (DTYPE_BYTES[DType(cmd.elem_type)] != 1, "elem_type", DType(cmd.elem_type).name, "a one-byte type"),
        (size > dram_word, "circ_log2", cmd.circ_log2,
         f"2**circ_log2 at most dram.bytes_per_cycle = {dram_word} (a group within a word)"),
        (cmd.run % size or cmd.run > CIRC_SIGNS_MAX, "run", cmd.run,
         f"a multiple of circ_size {size}, at most {CIRC_SIGNS_MAX} (one sign bit a byte)"),
        (bool(unaligned), unaligned[0] if unaligned else "", getattr(cmd, unaligned[0]) if unaligned else 0,
         f"a multiple of circ_size {size}"),
        (bool(pads), pads[0] if pads else "", getattr(cmd, pads[0]) if pads else 0, "0 (no padding)")]
    for refused, name, value, allowed in refusals:
        if refused:
            raise ExecutionError(f"{preparer.where}: field {name} = {value}: a circulant LOAD (circ_size {size}) "
                                 f"needs {allowed}")
    first, count = cmd.codebook_addr * CODEBOOK_SLOT_BYTES, circ_sign_bytes(cmd)
    if first + count > preparer.sizes[Buffer.LUT]:
        raise ExecutionError(f"{preparer.where}: field codebook_addr = {cmd.codebook_addr:#x}: the sign bits end "
                             f"at byte {first + count:#x}, beyond LUT memory ({preparer.sizes[Buffer.LUT]:#x} bytes)")
    start, stop = preparer.span(Buffer.LUT, "codebook_addr", first, count, None, byte_address=True)
    return slice(start, stop)


def _codebook(preparer: Preparer, cmd: Command) -> slice | None:
    """A LOAD of codebook indices (index_bits > 0): its codebook's bytes in LUT memory, after the checks the
    hardware makes first, in its order (docs/rtl-dma.md, "Faults"); None for a plain LOAD."""
    if cmd.index_bits == IndexBits.PLAIN:
        return None
    expansion = load_expansion(cmd)
    if cmd.buffer != Buffer.WEIGHT:
        raise ExecutionError(f"{preparer.where}: field buffer = {Buffer(cmd.buffer).name}: codebook indices "
                             f"(index_bits = {cmd.index_bits}) load into WEIGHT only")
    if DTYPE_BYTES[DType(cmd.elem_type)] != 1:
        raise ExecutionError(f"{preparer.where}: field elem_type = {DType(cmd.elem_type).name}: codebook entries "
                             f"are one byte")
    if cmd.run % expansion:
        raise ExecutionError(f"{preparer.where}: field run = {cmd.run}: not a multiple of the {expansion} "
                             f"indices a DRAM byte holds (index_bits = {cmd.index_bits})")
    first = cmd.codebook_addr * CODEBOOK_SLOT_BYTES
    if first + (1 << cmd.index_bits) > preparer.sizes[Buffer.LUT]:
        raise ExecutionError(f"{preparer.where}: field codebook_addr = {cmd.codebook_addr:#x}: the codebook "
                             f"ends at byte {first + (1 << cmd.index_bits):#x}, beyond LUT memory "
                             f"({preparer.sizes[Buffer.LUT]:#x} bytes)")
    start, stop = preparer.span(Buffer.LUT, "codebook_addr", first, 1 << cmd.index_bits, None, byte_address=True)
    return slice(start, stop)


def store(preparer: Preparer, cmd: Command):
    run_bytes = cmd.run * DTYPE_BYTES[DType(cmd.elem_type)]
    source = preparer.tensor(Buffer.OUT, "sram_addr", cmd.sram_addr, (cmd.y_size, cmd.x_size, run_bytes), np.uint8)
    target = preparer.strided_dram("dram_addr", cmd.dram_addr, cmd, write=True)
    preparer.stats.bytes_moved["OUT->DRAM"] += cmd.y_size * cmd.x_size * run_bytes
    preparer.row = store_row(source[1], target)

    def execute(state: RunState) -> None:
        strided_view(state, target)[...] = view(state, source)
    return execute


def wdec(preparer: Preparer, cmd: Command):
    engines = preparer.config.wdec.engines
    if cmd.parts > min(engines, cmd.out_c):
        raise ExecutionError(f"{preparer.where}: field parts = {cmd.parts}: a stream splits into at most "
                             f"min(wdec.engines, out_c) = {min(engines, cmd.out_c)} parts, one per part decoder")
    start, stop = preparer.span(DRAM, "dram_addr", cmd.dram_addr, cmd.length, None)
    shape = (cmd.out_c, cmd.in_c, cmd.k_h, cmd.k_w)
    out = preparer.tensor(Buffer.WEIGHT, "wgt_addr", cmd.wgt_addr, (cmd.out_c, cmd.k_h, cmd.k_w, cmd.in_c), np.int8,
                          written=True)
    preparer.stats.bytes_moved["DRAM->WDEC"] += cmd.length
    preparer.stats.bytes_moved["WDEC->WEIGHT"] += math.prod(shape)

    def execute(state: RunState) -> None:
        stream = state.spaces[DRAM][start:stop].tobytes()
        try:
            levels = decode_weight_stream(stream, shape, cmd.parts)
        except ValueError as error:
            raise ValueError(f"the weight stream at dram_addr = {cmd.dram_addr:#x} ({cmd.length} bytes) {error}"
                             ) from None
        view(state, out)[...] = levels.transpose(0, 2, 3, 1)
    return execute


DECODED_STREAMS_KEPT = 256     # weight tiles whose decoded levels the interpreter keeps


@functools.lru_cache(maxsize=DECODED_STREAMS_KEPT)
def decode_weight_stream(stream: bytes, shape: tuple[int, int, int, int], parts: int = 1) -> np.ndarray:
    """WDEC's decoder: one layer's bare nnc() stream of an [O, I, KH, KW] weight tensor in the npu profile
    (what rtl/wdec.py executes; the full chapter-10 syntax is refused as the hardware refuses it), or such
    streams of ``parts`` channel ranges behind their lengths (docs/codec.md §11), to int8 levels (read-only);
    levels outside int8 are an error, never a wrap. The last DECODED_STREAMS_KEPT results are kept: a network
    run on many inputs decodes each of its weight tiles once."""
    from aipu import codec

    try:
        levels = codec.decode_parts_compiled(stream, shape, parts).levels
    except codec.CodecError as exc:
        raise ValueError(f"does not decode in the npu profile: {exc}") from None
    info8 = np.iinfo(np.int8)
    if levels.size and (levels.min() < info8.min or levels.max() > info8.max):
        raise ValueError(f"decodes to levels {levels.min()}..{levels.max()}, which do not fit int8")
    levels = levels.astype(np.int8)
    levels.flags.writeable = False
    return levels
