"""The binary arithmetic coder: a 9-bit-range M-coder (the CABAC engine of H.264/HEVC), both directions.

A context is any estimator (``estimators``): the coder asks it for the MPS and the LPS range and tells it the
coded bin. The arithmetic is NNCodec's, so an NNC payload decodes bit-exactly: the range starts at 510, the
decoder reads 9 bits first, an MPS keeps the lower part of the range, a bypass bin halves it without a
context, and the stream ends with a terminating bin of value 1 (range - 2), a stop bit 1 and zero bits up to
the byte boundary. The decoder reads one bit per renormalising shift, so its last bit is the stop bit; a
decoder that needs a bit past the data raises a CodecError at that position.

The encoder is the textbook one (H.264 9.3.4): a 10-bit low end, bits resolved at each shift, and bits whose
value waits on a carry counted as outstanding.
"""
from __future__ import annotations

import numpy as np

from ...errors import CodecError

FIRST_RANGE = 510
RANGE_BITS = 9
HALF = 256          # a normalised range is 256..510
TERMINATION_WIDTH = 2


class ArithmeticDecoder:
    """Decodes bins from ``data``, starting ``bit_offset`` bits in."""

    def __init__(self, data: bytes, bit_offset: int = 0) -> None:
        self._data = bytes(data)
        self._end = 8 * len(self._data)
        if not 0 <= bit_offset <= self._end:
            raise CodecError(f"bit offset {bit_offset} outside the {len(self._data)}-byte stream",
                             bit_position=bit_offset)
        self._position = bit_offset
        self._range = FIRST_RANGE
        self._offset = self._read_bits(RANGE_BITS)
        if self._offset >= FIRST_RANGE:         # the offset stays below the range for every stream an encoder writes
            raise CodecError(f"the stream starts with {self._offset}, at least the first range {FIRST_RANGE}",
                             bit_position=bit_offset)

    @property
    def bit_position(self) -> int:
        """The next bit the decoder reads."""
        return self._position

    def _read_bits(self, count: int) -> int:
        value = 0
        for _ in range(count):
            if self._position >= self._end:
                raise CodecError("reading past the end of the stream", bit_position=self._position)
            byte = self._data[self._position >> 3]
            value = (value << 1) | ((byte >> (7 - (self._position & 7))) & 1)
            self._position += 1
        return value

    def decode(self, context) -> int:
        """One bin in ``context``."""
        lps_range = context.lps_range(self._range)
        mps_range = self._range - lps_range
        mps = context.mps()
        if self._offset < mps_range:
            bin_value, self._range = mps, mps_range
        else:
            bin_value, self._range = 1 - mps, lps_range
            self._offset -= mps_range
        context.update(bin_value)
        while self._range < HALF:
            self._range <<= 1
            self._offset = (self._offset << 1) | self._read_bits(1)
        return bin_value

    def decode_bypass(self, count: int) -> int:
        """``count`` equiprobable bins, the first one the most significant bit of the result."""
        value = 0
        for _ in range(count):
            self._offset = (self._offset << 1) | self._read_bits(1)
            bin_value = int(self._offset >= self._range)
            self._offset -= bin_value * self._range
            value = (value << 1) | bin_value
        return value

    def finish(self) -> int:
        """Decode the terminating bin (it must be 1), check the stop bit and the zero padding, and return the
        bit position where the stream ends (a byte boundary)."""
        self._range -= TERMINATION_WIDTH
        if self._offset < self._range:
            raise CodecError("the stream does not end here (terminating bin 0)", bit_position=self._position)
        stop = self._position - 1
        if not (self._data[stop >> 3] >> (7 - (stop & 7))) & 1:
            raise CodecError("no stop bit after the terminating bin", bit_position=stop)
        end = -(-self._position // 8) * 8
        if self._read_bits(end - self._position):
            raise CodecError("the bits after the stop bit are not zero", bit_position=stop + 1)
        return end


class ArithmeticEncoder:
    """Codes bins; :meth:`finish` returns the stream."""

    def __init__(self) -> None:
        self._low = 0
        self._range = FIRST_RANGE
        self._outstanding = 0
        self._first_bit = True          # the first resolved bit is the carry place of the start: always 0
        self._bits: list[int] = []

    def encode(self, context, bin_value: int) -> None:
        """One bin in ``context``."""
        lps_range = context.lps_range(self._range)
        self._range -= lps_range
        if bin_value != context.mps():
            self._low += self._range
            self._range = lps_range
        context.update(bin_value)
        while self._range < HALF:
            self._shift()

    def encode_bypass(self, value: int, count: int) -> None:
        """``count`` equiprobable bins holding ``value``, most significant bit first."""
        for place in reversed(range(count)):
            self._low = (self._low << 1) + ((value >> place) & 1) * self._range
            self._resolve(1024)

    def _shift(self) -> None:
        self._resolve(512)
        self._low <<= 1
        self._range <<= 1

    def _resolve(self, top: int) -> None:
        """Emit the bit above the range's window of ``low`` if it is known (``low`` below top/2 or from top on),
        else count it as outstanding (it waits on a carry)."""
        half = top >> 1
        if self._low >= top:
            self._low -= top
            self._put(1)
        elif self._low < half:
            self._put(0)
        else:
            self._low -= half
            self._outstanding += 1

    def _put(self, bit: int) -> None:
        if self._first_bit:
            self._first_bit = False
        else:
            self._bits.append(bit)
        self._bits.extend([1 - bit] * self._outstanding)
        self._outstanding = 0

    @property
    def bits_written(self) -> int:
        """Bits resolved so far (the stream's size before the termination, give or take the outstanding)."""
        return len(self._bits) + self._outstanding

    def finish(self) -> bytes:
        """The terminating bin 1, the flush of the low end with the stop bit, zero bits to a byte boundary."""
        self._range -= TERMINATION_WIDTH
        self._low += self._range
        self._range = TERMINATION_WIDTH
        while self._range < HALF:
            self._shift()
        self._put((self._low >> 9) & 1)
        self._bits.extend(((self._low >> 8) & 1, 1))
        self._bits.extend([0] * (-len(self._bits) % 8))
        return np.packbits(np.array(self._bits, np.uint8)).tobytes()
