"""The arithmetic coder and the three estimators: round trips, state bounds and located errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.codec.deepcabac.reference.engine import ArithmeticDecoder, ArithmeticEncoder
from aipu.codec.deepcabac.reference.estimators import (DualRateEstimator, HevcEstimator, NncEstimator,
                                                       estimator_factory)
from aipu.codec.deepcabac.reference.tables import NNC_PARAMETER_SETS
from aipu.codec.errors import CodecError

QUICK = settings(max_examples=60, derandomize=True, deadline=None, database=None)
ESTIMATORS = [("nnc", {}), ("nnc", {"parameter_set": 3}), ("nnc", {"parameter_set": 8}), ("hevc", {}),
              ("dual_rate", {}), ("dual_rate", {"shift_fast": 1, "shift_slow": 13})]
# (context number or -1 for a bypass run, bin or bypass value, bypass length)
SYMBOLS = st.lists(st.one_of(st.tuples(st.integers(0, 3), st.integers(0, 1), st.just(0)),
                             st.integers(0, 12).flatmap(lambda n: st.tuples(st.just(-1), st.integers(0, 2**n - 1),
                                                                            st.just(n)))), max_size=400)


def _encode(symbols, make) -> bytes:
    encoder, contexts = ArithmeticEncoder(), [make() for _ in range(4)]
    for context, value, length in symbols:
        if context < 0:
            encoder.encode_bypass(value, length)
        else:
            encoder.encode(contexts[context], value)
    return encoder.finish()


@pytest.mark.parametrize("name, parameters", ESTIMATORS)
@QUICK
@given(symbols=SYMBOLS, skew=st.integers(0, 3))
def test_bins_and_bypass_runs_round_trip(name, parameters, symbols, skew):
    symbols = [(c, v if c < 0 or c >= skew else 1, n) for c, v, n in symbols]     # some contexts all ones
    make = estimator_factory(name, **parameters)
    data = _encode(symbols, make)
    decoder, contexts = ArithmeticDecoder(data), [make() for _ in range(4)]
    decoded = [(c, decoder.decode_bypass(n) if c < 0 else decoder.decode(contexts[c]), n) for c, _, n in symbols]
    assert decoded == symbols
    assert decoder.finish() == 8 * len(data)


def test_skewed_bins_cost_far_less_than_a_bit():
    symbols = [(0, 0, 0)] * 4000
    for name in ("nnc", "hevc", "dual_rate"):
        assert len(_encode(symbols, estimator_factory(name))) < 4000 / 8 / 20


def _reachable(parameter_set: int, part: int) -> set[int]:
    """Every value of S0 (part 0) or of the slow part S1 (part 1) reachable from the initial state: each part
    moves by its own value only, so the two are explored one at a time."""
    start = NncEstimator(parameter_set)
    seen, frontier = set(), [(start.s0, start.total - 16 * start.s0)[part]]
    while frontier:
        value = frontier.pop()
        if value in seen:
            continue
        seen.add(value)
        for bin_value in (0, 1):
            estimator = NncEstimator(parameter_set)
            s0, slow = (value, start.total - 16 * start.s0) if part == 0 else (start.s0, value)
            estimator.s0, estimator.total = s0, slow + 16 * s0
            toward = 1 if bin_value else -1
            assert 0 <= 16 + ((toward * (value if part == 0 else slow)) >> (3 if part == 0 else 7)) < 32
            estimator.update(bin_value)
            frontier.append((estimator.s0, estimator.total - 16 * estimator.s0)[part])
    return seen


@pytest.mark.parametrize("parameter_set", range(len(NNC_PARAMETER_SETS)))
def test_nnc_states_stay_inside_their_tables(parameter_set):
    """Every reachable state indexes the curve and the LPS table inside their bounds, and S0 fits NNCodec's
    int8 (no wrap-around for the reference to miss)."""
    fast, slow = _reachable(parameter_set, 0), _reachable(parameter_set, 1)
    assert -128 <= min(fast) and max(fast) <= 127 and len(slow) > 100    # set 7's S0 never leaves 0
    assert max(abs((s + 16 * f) >> 7) for s in (min(slow), max(slow)) for f in (min(fast), max(fast))) <= 31


def test_hevc_state_machine_moves_as_h265_says():
    estimator = HevcEstimator()
    estimator.update(1)                 # an LPS in state 0 flips the MPS
    assert (estimator.state, estimator.mps()) == (0, 1)
    for _ in range(70):
        estimator.update(1)
    assert estimator.state == 62
    estimator.update(0)
    assert (estimator.state, estimator.mps()) == (38, 1)
    assert estimator.lps_range(256) == 20 and estimator.lps_range(510) == 33     # Table 9-52, row 38


def test_dual_rate_estimator_leans_towards_the_bins():
    estimator = DualRateEstimator()
    assert estimator.lps_range(510) == (15 * 31 >> 1) + 4       # 1/2, just under
    ranges = []
    for _ in range(20):
        estimator.update(0)
        ranges.append(estimator.lps_range(510))
    assert estimator.mps() == 0 and ranges == sorted(ranges, reverse=True) and ranges[-1] < 150


def test_bad_estimator_choices_are_refused():
    with pytest.raises(ValueError, match="unknown estimator"):
        estimator_factory("sbmp")
    with pytest.raises(ValueError, match="parameter set"):
        estimator_factory("nnc", parameter_set=9)
    with pytest.raises(ValueError, match="shifts"):
        estimator_factory("dual_rate", shift_fast=0)


def test_decoder_errors_say_where():
    data = _encode([(0, 1, 0)] * 50, estimator_factory("nnc"))
    with pytest.raises(CodecError, match="past the end") as caught:
        ArithmeticDecoder(b"\x12")
    assert caught.value.bit_position == 8
    decoder, context = ArithmeticDecoder(data[:-1]), NncEstimator()
    with pytest.raises(CodecError) as caught:
        for _ in range(50):
            decoder.decode(context)
        decoder.finish()
    assert 0 < caught.value.bit_position <= 8 * len(data)
    decoder, context = ArithmeticDecoder(data), NncEstimator()
    decoder.decode(context)
    with pytest.raises(CodecError, match="terminating bin 0"):
        decoder.finish()
    assert data[-1] & 1 == 0            # this stream has padding after its stop bit
    decoder, context = ArithmeticDecoder(data[:-1] + bytes([data[-1] | 1])), NncEstimator()
    for _ in range(50):
        decoder.decode(context)
    with pytest.raises(CodecError, match="not zero"):
        decoder.finish()


def test_a_first_offset_no_encoder_writes_is_refused():
    """9 bits of 510 or 511 would put the offset outside the range, where no decision is defined."""
    with pytest.raises(CodecError, match="starts with 511") as caught:
        ArithmeticDecoder(b"\xff\x80", bit_offset=0)
    assert caught.value.bit_position == 0
    ArithmeticDecoder(b"\xfe\xff")          # 509
