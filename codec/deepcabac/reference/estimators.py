"""Probability estimators behind one interface: what the arithmetic coder asks of a context.

The DeepCABAC patent leaves the estimator open ("SBMP, or the estimators of HEVC or VTM-4.0", DeepCABAC
patent (seed 004) §3). Each estimator here is one context's state and answers three questions: which bin is
more probable (``mps``), how much of the coder's 9-bit range the less probable one gets (``lps_range``), and
how the state moves after a coded bin (``update``). The coder (``engine``) needs nothing else, so every
estimator runs on the same coder.

* :class:`NncEstimator`: NNCodec's two-speed state estimator (S0 fast, S1 slow), one of nine parameter sets
  per context; the one that reads and writes NNC streams.
* :class:`HevcEstimator`: HEVC's 64-state machine, from the equiprobable state.
* :class:`DualRateEstimator`: a VTM-style estimator, the mean of two exponentially decaying probability
  counters with different rates (the VVC form: a 10-bit and a 14-bit counter).
"""
from __future__ import annotations

from .tables import (HEVC_LAST_STATE, HEVC_LPS_RANGE, HEVC_NEXT_STATE_LPS, NNC_ADAPTATION_CURVE, NNC_LPS_RANGE,
                     NNC_PARAMETER_SETS)

ESTIMATORS = ("nnc", "hevc", "dual_rate")


class NncEstimator:
    """NNCodec's estimator with parameter set ``parameter_set`` (0..8, NNC_PARAMETER_SETS).

    The state is S0 (fast) and the sum S0 + 16·S1-scaled, ``total`` (NNCodec's "S0plusS1"): its sign is the
    MPS and |total >> 7| (0..31) the LPS probability level. Each bin moves S0 by the adaptation curve at
    |S0| >> 3, scaled down by SH0 + 4, and the slow part S1 = total - 16·S0 by the curve at |S1| >> 7, scaled
    down by SH1.
    """

    __slots__ = ("s0", "total", "shift_fast", "shift_slow")

    def __init__(self, parameter_set: int = 0) -> None:
        if not 0 <= parameter_set < len(NNC_PARAMETER_SETS):
            raise ValueError(f"NNC parameter set must be 0..{len(NNC_PARAMETER_SETS) - 1}, got {parameter_set}")
        shift_fast, shift_slow, total, s0 = NNC_PARAMETER_SETS[parameter_set]
        self.s0, self.total = s0, total
        self.shift_fast, self.shift_slow = shift_fast + 4, shift_slow

    def mps(self) -> int:
        return 1 if self.total >= 0 else 0

    def lps_range(self, coder_range: int) -> int:
        return NNC_LPS_RANGE[(coder_range >> 5) & 7][abs(self.total >> 7)]

    def update(self, bin_value: int) -> None:
        toward = 1 if bin_value else -1
        slow = self.total - 16 * self.s0
        self.s0 += toward * (NNC_ADAPTATION_CURVE[16 + ((toward * self.s0) >> 3)] >> self.shift_fast)
        slow += toward * (NNC_ADAPTATION_CURVE[16 + ((toward * slow) >> 7)] >> self.shift_slow)
        self.total = slow + 16 * self.s0


class HevcEstimator:
    """HEVC's state machine (H.265 9.3.4.3.2): a state index 0..62 (0 = equiprobable) and the MPS value."""

    __slots__ = ("state", "most_probable")

    def __init__(self) -> None:
        self.state, self.most_probable = 0, 0

    def mps(self) -> int:
        return self.most_probable

    def lps_range(self, coder_range: int) -> int:
        return HEVC_LPS_RANGE[self.state][(coder_range >> 6) & 3]

    def update(self, bin_value: int) -> None:
        if bin_value == self.most_probable:
            self.state = min(self.state + 1, HEVC_LAST_STATE)
            return
        if self.state == 0:
            self.most_probable ^= 1
        self.state = HEVC_NEXT_STATE_LPS[self.state]


class DualRateEstimator:
    """Two counters of P(bin = 1), a fast one in 10 bits and a slow one in 14 bits, each moving by
    1/2^shift of its distance to the coded bin; their mean (15 bits) gives the MPS and the LPS range."""

    __slots__ = ("fast", "slow", "shift_fast", "shift_slow")

    def __init__(self, shift_fast: int = 4, shift_slow: int = 7) -> None:
        if not (1 <= shift_fast <= 9 and 1 <= shift_slow <= 13):
            raise ValueError(f"dual-rate shifts must be 1..9 and 1..13, got {shift_fast} and {shift_slow}")
        self.fast, self.slow = 512, 8192        # both at 1/2
        self.shift_fast, self.shift_slow = shift_fast, shift_slow

    def _probability_of_one(self) -> int:
        return self.slow + 16 * self.fast       # 0..32767

    def mps(self) -> int:
        return self._probability_of_one() >> 14

    def lps_range(self, coder_range: int) -> int:
        one = self._probability_of_one()
        lps = 32767 - one if one >> 14 else one
        return (((coder_range >> 5) * (lps >> 9)) >> 1) + 4

    def update(self, bin_value: int) -> None:
        self.fast += ((1023 * bin_value) >> self.shift_fast) - (self.fast >> self.shift_fast)
        self.slow += ((16383 * bin_value) >> self.shift_slow) - (self.slow >> self.shift_slow)


def estimator_factory(name: str, **parameters: int):
    """A function making a fresh context of estimator ``name`` (ESTIMATORS) with ``parameters``."""
    makers = {"nnc": NncEstimator, "hevc": HevcEstimator, "dual_rate": DualRateEstimator}
    if name not in makers:
        raise ValueError(f"unknown estimator {name!r}: one of {', '.join(ESTIMATORS)}")
    makers[name](**parameters)          # refuse bad parameters now, not at the first bin
    return lambda: makers[name](**parameters)
