"""The arithmetic (AEC) engine of T/AI 115.1-2021 10.4.2 / 10.4.3.3, and its matching encoder.

The decoder is a line-by-line reading of the standard's pseudo-code (10.4.2 for the initialisation,
10.4.3.3.2 ``decode_decision``, 10.4.3.3.3 ``decode_aec_stuffing_bit``, 10.4.3.3.4 ``decode_bypass``,
10.4.3.3.5 ``update_ctx``). Only the bit fetch is byte-oriented: a run
of n bits the pseudo-code reads one at a time is fetched at once, which changes nothing observable.

The encoder is not in the standard; docs/codec-engine.md derives it. In short, the decoder's
(exponent, mantissa) range ``(256 + rT1) * 2**-rS1`` is a lazily normalised 9-bit range, so the encoder
keeps an always-normalised range ``R`` in 256..511 and a low end that grows one bit per normalising
shift; a bin's split is exactly the decoder's (MPS below, LPS above).

Termination (docs/codec-engine.md, resolving A23 / 10.4.3.3.1 where StuffingBitFlag is never set):
the encoder ends every stream with one stuffing bin of value 1 (``decode_aec_stuffing_bit``, an LPS of
width 1), writes the low end of the final interval and pads with 0 bits to a byte boundary. A decoder
that decodes that bin has then read exactly the written bits, never one more; ``AecDecoder.finish``
checks the bin and the padding and returns the bit position after the stream.
"""
from __future__ import annotations

import math

from ..errors import CodecError
from .elements import NUM_CONTEXTS

BOUND_S = 254                # boundS (10.4.2.2): not fixed by the text; AVS2's value
LG_PMPS_INIT = 1023          # 10.4.2.1: mps = 0, cycno = 0, lgPmps = 1023
LG_PMPS_MAX = 1023           # update_ctx flips the MPS above this (10.4.3.3.5)
BYPASS_LG_PMPS = 1024        # decode_bypass: lgPmps = 1024, mps = 0, no update (10.4.3.3.4)
STUFFING_LG_PMPS = 4         # decode_aec_stuffing_bit: lgPmps = 4, mps = 0, no update (10.4.3.3.3)
LPS_INCREMENT = (197, 95, 46)  # update_ctx's switch for cwr = 3, 4, 5 (10.4.3.3.5)
TRACE_BYPASS = -1            # trace ctxIdx of a bypass bin
TRACE_STUFFING = -2          # trace ctxIdx of a stuffing bin (the terminator)
TERMINATION_ZERO_BITS = 16   # zeros a lenient finish() may read past the data (an AVS2 flush ends up to 9 short)
RANGE_BITS = 9               # the range mantissa 256 + rT1 and the first read_bits(9)
LOW_FLUSH_BITS = 18          # encoder: low-end bits kept before a byte goes out (8 + 9 of range + 1 of carry)


class ContextModels:
    """The context array ``ctxArray`` (10.4.2.1): per ctxIdx the fields mps, cycno and lgPmps.

    Kept as three plain lists: the pure-Python engine indexes them per bin, where lists are several
    times faster than numpy arrays.
    """

    __slots__ = ("mps", "cycno", "lg_pmps")

    def __init__(self, count: int = NUM_CONTEXTS) -> None:
        if count <= 0:
            raise ValueError(f"num_contexts must be positive, got {count}")
        self.mps = [0] * count
        self.cycno = [0] * count
        self.lg_pmps = [LG_PMPS_INIT] * count

    def __len__(self) -> int:
        return len(self.mps)

    def copy(self) -> ContextModels:
        clone = ContextModels.__new__(ContextModels)
        clone.mps, clone.cycno, clone.lg_pmps = self.mps[:], self.cycno[:], self.lg_pmps[:]
        return clone

    def state(self, ctx_idx: int) -> tuple[int, int, int]:
        """(mps, cycno, lgPmps) of one context."""
        return self.mps[ctx_idx], self.cycno[ctx_idx], self.lg_pmps[ctx_idx]

    def update(self, ctx_idx: int, bin_val: int) -> None:
        """update_ctx (10.4.3.3.5)."""
        cycno = self.cycno[ctx_idx]
        lg_pmps = self.lg_pmps[ctx_idx]
        cwr = 3 if cycno <= 1 else (4 if cycno == 2 else 5)   # taken before cycno changes
        if bin_val != self.mps[ctx_idx]:
            self.cycno[ctx_idx] = cycno + 1 if cycno <= 2 else 3
            lg_pmps += LPS_INCREMENT[cwr - 3]
            if lg_pmps > LG_PMPS_MAX:
                lg_pmps = 2047 - lg_pmps
                self.mps[ctx_idx] ^= 1
        else:
            if cycno == 0:
                self.cycno[ctx_idx] = 1
            lg_pmps -= (lg_pmps >> cwr) + (lg_pmps >> (cwr + 2))
        self.lg_pmps[ctx_idx] = lg_pmps


def _check_bin(bin_val: int) -> None:
    if bin_val not in (0, 1):
        raise ValueError(f"bin must be 0 or 1, got {bin_val!r}")


class AecDecoder:
    """Decodes bins from an AEC stream that starts ``bit_offset`` bits into ``data``.

    ``trace=True`` records every bin as (ctxIdx, bin) with ctxIdx = -1 for bypass and -2 for stuffing,
    so that an RTL decoder can be compared bin by bin. ``bound_s`` is boundS; it changes only when bits
    are fetched, never a decoded bin (docs/codec-engine.md).
    """

    def __init__(self, data: bytes, *, bit_offset: int = 0, num_contexts: int = NUM_CONTEXTS,
                 trace: bool = False, bound_s: int = BOUND_S) -> None:
        self._data = bytes(data)
        self._end = 8 * len(self._data)
        if not 0 <= bit_offset <= self._end:
            raise CodecError(f"bit_offset {bit_offset} outside the {len(self._data)}-byte buffer",
                             bit_position=bit_offset)
        if bound_s <= 0:
            raise ValueError(f"bound_s must be > 0, got {bound_s}")
        self._pos = bit_offset
        self._bound_s = bound_s
        self.contexts = ContextModels(num_contexts)
        self.trace: list[tuple[int, int]] | None = [] if trace else None
        self.bins_decoded = 0
        self._finished = False
        # 10.4.2.2
        self._rs1 = 0
        self._rt1 = 0xFF
        self._bflag = 0
        self._value_s = 0
        self._value_t = self._read_bits(RANGE_BITS)
        self._value_d = 1

    @property
    def bit_position(self) -> int:
        """Absolute position in ``data`` of the next bit the engine will fetch (it reads ahead)."""
        return self._pos

    def _read_bits(self, count: int) -> int:
        """read_bits(count), MSB first; past the end of the data is an error, never zeros."""
        if count == 0:
            return 0
        pos = self._pos
        stop = pos + count
        if stop > self._end:
            raise CodecError(f"reading past the end of the stream ({count} bits wanted, "
                             f"{self._end - pos} left)", bit_position=pos)
        first_byte, last_byte = pos >> 3, (stop + 7) >> 3
        chunk = int.from_bytes(self._data[first_byte:last_byte], "big")
        self._pos = stop
        return (chunk >> (8 * last_byte - stop)) & ((1 << count) - 1)

    def _decode(self, pred_mps: int, lg_pmps_full: int) -> int:
        """decode_decision (10.4.3.3.2) for one bin; returns binVal."""
        if self._finished:
            raise CodecError("decoding after finish()", bit_position=self._pos)
        lg_pmps = lg_pmps_full >> 2
        value_t = self._value_t
        if self._value_d or (self._bflag == 1 and self._rs1 == self._bound_s):
            self._rs1 = 0
            value_s = 0
            # while (valueT < 0x100 && valueS < boundS) { valueS++; valueT = valueT << 1 | read_bits(1) }
            while value_t < 0x100 and value_s < self._bound_s:
                # with a 1 in valueT, exactly 9 - bitlength more bits bring it to bit 8: fetch them at once
                step = min(RANGE_BITS - value_t.bit_length(), self._bound_s - value_s) if value_t else 1
                value_t = (value_t << step) | self._read_bits(step)
                value_s += step
            self._bflag = 1 if value_t < 0x100 else 0
            value_t &= 0xFF
            self._value_s = value_s
        value_s = self._value_s
        rs1, rt1 = self._rs1, self._rt1
        if rt1 >= lg_pmps:
            rs2, rt2, s_flag = rs1, rt1 - lg_pmps, 0
        else:
            rs2, rt2, s_flag = rs1 + 1, 256 + rt1 - lg_pmps, 1
        # C precedence of the printed test: A || (B && bFlag == 0); docs/codec-engine.md shows that
        # bFlag == 1 makes A false, so this equals AVS2's (A || B) && bFlag == 0.
        if rs2 > value_s or (rs2 == value_s and value_t >= rt2 and self._bflag == 0):   # LPS
            bin_val = 1 - pred_mps
            t_rlps = lg_pmps if s_flag == 0 else rt1 + lg_pmps
            if rs2 == value_s:
                value_t -= rt2
            else:
                value_t = 256 + ((value_t << 1) | self._read_bits(1)) - rt2
            # while (tRlps < 0x100) { tRlps <<= 1; valueT = valueT << 1 | read_bits(1) }
            shift = RANGE_BITS - t_rlps.bit_length()
            value_t = (value_t << shift) | self._read_bits(shift)
            self._rt1 = (t_rlps << shift) & 0xFF
            self._value_d = 1
        else:                                                                          # MPS
            bin_val = pred_mps
            self._rs1, self._rt1 = rs2, rt2
            self._value_d = 0
        self._value_t = value_t
        self.bins_decoded += 1
        return bin_val

    def decode_decision(self, ctx_idx: int) -> int:
        """A context-coded bin with ctx = ctxArray[ctx_idx] (cFlag = 1: the context adapts)."""
        contexts = self.contexts
        if not 0 <= ctx_idx < len(contexts.mps):
            raise IndexError(f"ctx_idx {ctx_idx} outside 0..{len(contexts.mps) - 1}")
        bin_val = self._decode(contexts.mps[ctx_idx], contexts.lg_pmps[ctx_idx])
        contexts.update(ctx_idx, bin_val)
        if self.trace is not None:
            self.trace.append((ctx_idx, bin_val))
        return bin_val

    def decode_bypass(self) -> int:
        """decode_bypass (10.4.3.3.4): an equiprobable bin through the engine, not a raw bit."""
        bin_val = self._decode(0, BYPASS_LG_PMPS)
        if self.trace is not None:
            self.trace.append((TRACE_BYPASS, bin_val))
        return bin_val

    def decode_bypass_bits(self, count: int) -> int:
        """``count`` bypass bins as an unsigned integer, first bin = MSB."""
        value = 0
        for _ in range(count):
            value = (value << 1) | self.decode_bypass()
        return value

    def decode_stuffing_bit(self) -> int:
        """decode_aec_stuffing_bit (10.4.3.3.3): lgPmps = 4, mps = 0, no context update."""
        bin_val = self._decode(0, STUFFING_LG_PMPS)
        if self.trace is not None:
            self.trace.append((TRACE_STUFFING, bin_val))
        return bin_val

    def finish(self, strict: bool = True) -> int:
        """Decode the terminator: a stuffing bin equal to 1, then (``strict``) 0-padding to a byte boundary.

        Returns the absolute bit position just after the stream, a multiple of 8 when strict. Not strict, the
        stuffing bin may read up to TERMINATION_ZERO_BITS zeros past the end of the data and nothing after it
        is read: any termination a conforming decoder accepts (docs/codec-engine.md, "Termination").
        """
        if not strict:
            end = self._end
            self._data += bytes(TERMINATION_ZERO_BITS // 8)
            self._end += TERMINATION_ZERO_BITS
            try:
                if self.decode_stuffing_bit() != 1:
                    raise CodecError("terminating stuffing bin is 0: stream corrupt or not at its end",
                                     bit_position=self._pos)
            except CodecError as error:      # placed inside the data, where the compiled engine places it
                error.bit_position = min(error.bit_position, end)
                raise
            self._finished = True
            return self._pos
        if self.decode_stuffing_bit() != 1:
            raise CodecError("terminating stuffing bin is 0: stream corrupt or not at its end",
                             bit_position=self._pos)
        padding = -self._pos % 8
        if self._read_bits(padding):
            raise CodecError("non-zero padding after the terminator", bit_position=self._pos - padding)
        self._finished = True
        return self._pos


class AecEncoder:
    """Encodes bins so that ``AecDecoder`` decodes them back (docs/codec-engine.md).

    ``fork()`` gives a copy that counts bits without producing output: encode a candidate coding into
    it and compare ``cost_bits`` to choose a mode by its actual cost.
    """

    def __init__(self, *, num_contexts: int = NUM_CONTEXTS) -> None:
        self.contexts = ContextModels(num_contexts)
        self.bins_encoded = 0
        self._range = 256 + 0xFF      # the decoder's initial rS1 = 0, rT1 = 0xFF
        self._shifts = 0              # normalising shifts so far: the stream has 9 + shifts bits
        self._low = 0                 # low end of the interval, the bits not yet in _out (+ carry)
        self._low_bits = RANGE_BITS   # how many stream bits _low spans
        self._out: bytearray | None = bytearray()
        self._finished = False

    def fork(self) -> AecEncoder:
        """A bit-counting copy: same contexts and interval, output discarded."""
        clone = AecEncoder.__new__(AecEncoder)
        clone.contexts = self.contexts.copy()
        clone.bins_encoded = self.bins_encoded
        clone._range, clone._shifts = self._range, self._shifts
        clone._low, clone._low_bits = 0, RANGE_BITS
        clone._out = None
        clone._finished = self._finished
        return clone

    @property
    def cost_bits(self) -> float:
        """Information written so far in bits (exact up to the final termination's ~9 bits)."""
        return self._shifts + RANGE_BITS - math.log2(self._range)

    def _encode(self, bin_val: int, mps: int, lg_pmps_full: int) -> None:
        """The interval split of decode_decision, seen from the encoder (MPS below, LPS above)."""
        if self._finished:
            raise ValueError("encoding after finish()")
        lg_pmps = lg_pmps_full >> 2
        surplus = self._range - 256                 # the decoder's rT1
        if surplus >= lg_pmps:                      # sFlag = 0: split at the current exponent
            mps_range, lps_range = self._range - lg_pmps, lg_pmps
            shift = 0
        else:                                       # sFlag = 1: split one exponent further
            mps_range, lps_range = 256 + surplus + 256 - lg_pmps, surplus + lg_pmps
            shift = 1
        if bin_val == mps:
            new_range = mps_range
            self._low <<= shift
        else:
            renorm = RANGE_BITS - lps_range.bit_length()
            new_range = lps_range << renorm
            self._low = ((self._low << shift) + mps_range) << renorm
            shift += renorm
        self._range = new_range
        self._shifts += shift
        self._low_bits += shift
        self.bins_encoded += 1
        if self._low_bits >= LOW_FLUSH_BITS:
            self._emit_bytes()

    def _emit_bytes(self) -> None:
        """Move whole bytes from the top of _low to the output, rippling a carry into earlier bytes."""
        out = self._out
        if out is None:              # a fork: only the bit count matters
            self._low, self._low_bits = 0, RANGE_BITS
            return
        while self._low_bits >= LOW_FLUSH_BITS:
            keep = self._low_bits - 8
            top = self._low >> keep
            self._low &= (1 << keep) - 1
            self._low_bits = keep
            self._append_with_carry(top)

    def _append_with_carry(self, top: int) -> None:
        """Append the byte ``top & 0xFF`` and add ``top >> 8`` into the bytes already written."""
        out = self._out
        carry = top >> 8
        out.append(top & 0xFF)
        index = len(out) - 2
        while carry:
            if index < 0:
                raise AssertionError("arithmetic-encoder carry out of the stream start")
            total = out[index] + carry
            out[index] = total & 0xFF
            carry = total >> 8
            index -= 1

    def encode_decision(self, ctx_idx: int, bin_val: int) -> None:
        _check_bin(bin_val)
        contexts = self.contexts
        if not 0 <= ctx_idx < len(contexts.mps):
            raise IndexError(f"ctx_idx {ctx_idx} outside 0..{len(contexts.mps) - 1}")
        self._encode(bin_val, contexts.mps[ctx_idx], contexts.lg_pmps[ctx_idx])
        contexts.update(ctx_idx, bin_val)

    def encode_bypass(self, bin_val: int) -> None:
        _check_bin(bin_val)
        self._encode(bin_val, 0, BYPASS_LG_PMPS)

    def encode_bypass_bits(self, value: int, count: int) -> None:
        """``count`` bypass bins of an unsigned value, MSB first."""
        if count < 0 or not 0 <= value < (1 << count):
            raise ValueError(f"value {value} does not fit in {count} bypass bins")
        for shift in range(count - 1, -1, -1):
            self._encode((value >> shift) & 1, 0, BYPASS_LG_PMPS)

    def encode_stuffing_bit(self, bin_val: int) -> None:
        """A stuffing bin (lgPmps = 4, mps = 0): 0 costs almost nothing, 1 costs about 8 bits."""
        _check_bin(bin_val)
        self._encode(bin_val, 0, STUFFING_LG_PMPS)

    def finish(self) -> bytes:
        """Terminate (stuffing bin 1, the interval's low end, 0-padding to a byte) and return the stream."""
        if self._out is None:
            raise ValueError("a fork counts bits and has no stream to finish")
        self.encode_stuffing_bit(1)
        self._finished = True
        padding = -self._low_bits % 8
        low = self._low << padding
        for keep in range(self._low_bits + padding - 8, -1, -8):
            self._append_with_carry(low >> keep)
            low &= (1 << keep) - 1
        return bytes(self._out)
