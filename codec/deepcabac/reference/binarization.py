"""A weight level as bins: sig_flag, sign_flag, abs_level_greater_X flags and a k-bit remainder.

DeepCABAC patent (seed 004) §1.2: k starts at k0 and the first threshold X at 1 << k0. Each
abs_level_greater_X flag says |l| > X; after a 1, k may grow and X advances by 1 << k. After the first 0, |l| is
one of the 2^k values X - 2^k + 1 .. X, sent in k bypass bits as ``rem = X - |l|`` or as
``rem' = 2^k - 1 - rem`` (the offset from the interval's low end). :class:`LevelLaw` holds the choices:

* how k grows: by one after every 1 (``x_prime=None``: Exp-Golomb, the patent's first variant), or, in the
  preferred embodiment, only once X > X' (``x_prime``), which gives X = 1, 2, ..., X'+1, X'+3, X'+7, ...;
* ``rem`` or ``rem_prime``;
* ``abs_max``: the largest |l|, known to both sides; no flag is sent for a threshold X >= abs_max (§1.2, the
  known-maximum truncation).

:func:`code_magnitude` runs the unary part and the remainder through a bin coder ``io`` (the layer coder's
reader or writer), so the encoder and the decoder share this one definition.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import CodecError

LEVEL_LIMIT = 2**31 - 1         # levels are int32: a decoder refuses a larger |l|
MAX_X_PRIME = 256               # NNC signals X' in 8 bits; the bound also bounds the unary run a decoder reads
MAX_K0 = 30
REMAINDERS = ("rem", "rem_prime")


@dataclass(frozen=True)
class LevelLaw:
    """The binarization's parameters (module docstring)."""

    k0: int = 0
    x_prime: int | None = 11
    remainder: str = "rem_prime"
    abs_max: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.k0 <= MAX_K0:
            raise ValueError(f"k0 must be 0..{MAX_K0}, got {self.k0}")
        if self.x_prime is not None and not 0 <= self.x_prime <= MAX_X_PRIME:
            raise ValueError(f"X' must be 0..{MAX_X_PRIME} or None, got {self.x_prime}")
        if self.remainder not in REMAINDERS:
            raise ValueError(f"remainder must be one of {REMAINDERS}, got {self.remainder!r}")
        if self.abs_max is not None and not 1 <= self.abs_max <= LEVEL_LIMIT:
            raise ValueError(f"abs_max must be 1..{LEVEL_LIMIT} or None, got {self.abs_max}")

    @property
    def limit(self) -> int:
        """The largest |l| this law codes."""
        return LEVEL_LIMIT if self.abs_max is None else self.abs_max

    def next_k(self, k: int, x: int) -> int:
        """k after a flag abs_level_greater_X = 1."""
        return k + 1 if self.x_prime is None or x > self.x_prime else k

    def sends_flag(self, x: int) -> bool:
        """Whether abs_level_greater_X is sent (not inferred 0 by the known maximum)."""
        return self.abs_max is None or x < self.abs_max

    def remainder_value(self, x: int, k: int, magnitude: int) -> int:
        rem = x - magnitude
        return rem if self.remainder == "rem" else (1 << k) - 1 - rem

    def magnitude(self, x: int, k: int, value: int) -> int:
        return x - value if self.remainder == "rem" else x + 1 + value - (1 << k)


def code_magnitude(io, law: LevelLaw, magnitude: int, greater_key) -> int:
    """The unary flags and the remainder of |l| >= 1 (``magnitude``, ignored by a reader); returns |l|.

    ``greater_key(j, x)`` names the context of the j-th flag (threshold x), None for a bypass bin."""
    k, x, j = law.k0, 1 << law.k0, 0
    while law.sends_flag(x):
        key = greater_key(j, x)
        greater = io.decision(key, int(magnitude > x)) if key is not None else io.bypass(1, int(magnitude > x))
        if not greater:
            break
        if x >= law.limit:
            raise CodecError(f"a level above {law.limit} (abs_level_greater_x at X = {x})",
                             element="abs_level_greater_x")
        k = law.next_k(k, x)
        x += 1 << k
        j += 1
    decoded = law.magnitude(x, k, io.bypass(k, law.remainder_value(x, k, magnitude)))
    if decoded > law.limit:
        raise CodecError(f"a level of magnitude {decoded} above {law.limit}", element="remainder")
    return decoded
