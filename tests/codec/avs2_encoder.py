"""An arithmetic encoder written the way AVS2's reference encoder works (a 10-bit ``low``, outstanding
``follow`` bits, the first output bit dropped), ending its streams as AVS2 ends a slice: a stuffing bin of 1,
then the two top bits of ``low`` and a 1, then zero padding. Its bins are this project's decoder's bins; only
the termination differs from the project's encoder, which writes the final interval's exact low end. The
default (lenient) decoders must accept its streams, and the strict ones may refuse them (docs/codec-engine.md,
"Termination")."""
from __future__ import annotations

from aipu.codec.reference.engine import BYPASS_LG_PMPS, STUFFING_LG_PMPS, ContextModels


class Avs2Encoder:
    def __init__(self) -> None:
        self.contexts = ContextModels()
        self.low, self.s1, self.t1, self.follow = 0, 0, 0xFF, 0
        self.bits: list[int] = []

    def _put_plus(self, bit: int) -> None:
        self.bits.append(bit)
        self.bits.extend([1 - bit] * self.follow)
        self.follow = 0

    def _emit(self, bit_o: int, bit_oa: int) -> int:
        """One bit out of ``low``: known (put with its outstanding bits) or outstanding; the new bit_oa."""
        if bit_o:
            self._put_plus(1)
        elif not bit_oa:
            self._put_plus(0)
        else:
            self.follow += 1
            bit_oa = 0
        return bit_oa

    def encode(self, symbol: int, mps: int, lg_pmps_full: int) -> None:
        lg = lg_pmps_full >> 2
        if self.t1 >= lg:
            s2, t2, sflag = self.s1, self.t1 - lg, 0
        else:
            s2, t2, sflag = self.s1 + 1, 256 + self.t1 - lg, 1
        if symbol == mps:
            self.s1, self.t1 = s2, t2
            if self.s1 == 8:
                bit_oa = self._emit((self.low >> 9) & 1, (self.low >> 8) & 1)
                self.s1 -= 1
                self.low = ((bit_oa << 8) | (self.low & 0xFF)) << 1
            return
        width = lg if sflag == 0 else self.t1 + lg
        window = [self.low + ((t2 + 256) >> s2), (t2 << (8 - s2)) & 0xFF, 0]
        while width < 256:
            width <<= 1
            s2 += 1
        current, position, word = window[0], 9, 0
        bit_oa = (current >> 9) & 1
        for _ in range(s2):
            bit_o = bit_oa
            position -= 1
            if position < 0:
                word, position = word + 1, 7
                current = window[word]
            bit_oa = self._emit(bit_o, (current >> position) & 1)
        low = bit_oa
        for _ in range(9):
            position -= 1
            if position < 0:
                word, position = word + 1, 7
                current = window[word]
            low = (low << 1) | ((current >> position) & 1)
        self.low, self.s1, self.t1 = low, 0, width & 0xFF

    def encode_decision(self, ctx_idx: int, bin_val: int) -> None:
        self.encode(bin_val, self.contexts.mps[ctx_idx], self.contexts.lg_pmps[ctx_idx])
        self.contexts.update(ctx_idx, bin_val)

    def encode_bypass(self, bin_val: int) -> None:
        self.encode(bin_val, 0, BYPASS_LG_PMPS)

    def encode_stuffing_bit(self, bin_val: int) -> None:
        self.encode(bin_val, 0, STUFFING_LG_PMPS)

    def finish(self) -> bytes:
        """AVS2's end of a slice: a stuffing bin of 1, ``low``'s two top bits and a 1, zeros to a byte; the
        first output bit dropped."""
        self.encode_stuffing_bit(1)
        self._put_plus((self.low >> 9) & 1)
        self.bits += [(self.low >> 8) & 1, 1]
        bits = self.bits[1:]
        bits += [0] * (-len(bits) % 8)
        return bytes(int("".join(map(str, bits[i:i + 8])), 2) for i in range(0, len(bits), 8))
