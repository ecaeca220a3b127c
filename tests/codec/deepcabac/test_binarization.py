"""The level binarization of DeepCABAC patent (seed 004) §1: the flags and remainder of a level, bin by bin."""
from __future__ import annotations

import pytest

from aipu.codec.deepcabac.reference.binarization import LevelLaw, code_magnitude
from aipu.codec.errors import CodecError


class Spy:
    """A bin coder that writes nothing and lists the bins: ('gt', X) flags, ('bypass', count, value)."""

    def __init__(self, replies=None):
        self.bins, self.replies = [], replies

    def decision(self, key, bin_value):
        bin_value = self.replies.pop(0) if self.replies is not None else bin_value
        self.bins.append((key, bin_value))
        return bin_value

    def bypass(self, count, value):
        value = self.replies.pop(0) if self.replies is not None else value
        self.bins.append(("bypass", count, value))
        return value


def flags(law, magnitude):
    spy = Spy()
    assert code_magnitude(spy, law, magnitude, lambda j, x: ("gt", x)) == magnitude
    return spy.bins


def test_the_digest_worked_example():
    """X' = 2, |l| = 6: flags at X = 1, 2, 3, 5 are 1 and at X = 9 is 0, then k = 2 bits: rem 3 or rem' 0."""
    ones = [(("gt", x), 1) for x in (1, 2, 3, 5)]
    assert flags(LevelLaw(x_prime=2, remainder="rem"), 6) == [*ones, (("gt", 9), 0), ("bypass", 2, 3)]
    assert flags(LevelLaw(x_prime=2, remainder="rem_prime"), 6) == [*ones, (("gt", 9), 0), ("bypass", 2, 0)]


def test_thresholds_of_the_preferred_embodiment():
    """X = 1, 2, ..., X', X'+1, X'+3, X'+7, ...: X'+1 unit steps, then X'+2^j-1."""
    law = LevelLaw(x_prime=4)
    thresholds = [key[1] for key, *_ in flags(law, 10**6) if key != "bypass"]
    assert thresholds[:9] == [1, 2, 3, 4, 5, 7, 11, 19, 35]
    assert all(b - a == 2 ** (j + 1) for j, (a, b) in enumerate(zip(thresholds[4:], thresholds[5:])))


def test_exp_golomb_variant_grows_k_after_every_flag():
    """x_prime None: k += 1 after each 1, so X = 1, 3, 7, 15 (k0 = 0) and the remainder has as many bits
    as ones before it (Exp-Golomb)."""
    bins = flags(LevelLaw(x_prime=None, remainder="rem"), 12)
    assert bins == [(("gt", 1), 1), (("gt", 3), 1), (("gt", 7), 1), (("gt", 15), 0), ("bypass", 3, 3)]
    assert flags(LevelLaw(k0=2, x_prime=None), 3) == [(("gt", 4), 0), ("bypass", 2, 2)]


def test_every_magnitude_round_trips_through_its_bins():
    for law in (LevelLaw(), LevelLaw(x_prime=0), LevelLaw(k0=3, x_prime=None, remainder="rem"), LevelLaw(x_prime=5)):
        for magnitude in [*range(1, 300), 2**31 - 1]:
            bins = flags(law, magnitude)
            replies = [entry[-1] for entry in bins]
            assert code_magnitude(Spy(replies), law, 0, lambda j, x: ("gt", x)) == magnitude


def test_known_maximum_omits_the_flags_it_implies():
    """abs_max = 3: no flag at X >= 3; |l| = 3 ends its run without a terminating 0."""
    law = LevelLaw(x_prime=10, abs_max=3)
    assert flags(law, 3) == [(("gt", 1), 1), (("gt", 2), 1), ("bypass", 0, 0)]
    assert flags(law, 2) == [(("gt", 1), 1), (("gt", 2), 0), ("bypass", 0, 0)]
    assert flags(LevelLaw(abs_max=1), 1) == [("bypass", 0, 0)]


def test_a_decoder_refuses_levels_beyond_the_limit():
    law = LevelLaw(x_prime=None)
    with pytest.raises(CodecError, match="above 2147483647"):
        code_magnitude(Spy([1] * 40), law, 0, lambda j, x: ("gt", x))
    law = LevelLaw(x_prime=2, abs_max=4, remainder="rem_prime")       # 4 is reached at X = 5, k = 1
    with pytest.raises(CodecError, match="magnitude 5 above 4"):
        code_magnitude(Spy([1, 1, 1, 1]), law, 0, lambda j, x: ("gt", x))


@pytest.mark.parametrize("fields", [{"k0": -1}, {"k0": 31}, {"x_prime": 257}, {"remainder": "flc"},
                                    {"abs_max": 0}, {"abs_max": 2**31}])
def test_bad_laws_are_refused(fields):
    with pytest.raises(ValueError):
        LevelLaw(**fields)
