"""Bad payloads never crash, hang or allocate without bound: they decode to levels or raise a CodecError saying
where, and the compiled NNC decoder agrees with the reference on every input, to the message.

Every case runs in the codec fuzzer's sandbox (tests/sandbox.py: a forked child under a memory limit, killed
when a case hangs). Inputs: random bytes; truncations, bit flips and extensions of valid payloads; for the
generic coder, the same under option sets that stretch the unary run (X' = 256), cap it (abs_max) or send
every flag above X' in bypass. The default suite runs a seeded quick subset; ``-m slow`` the long random runs.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import strategies as st

from aipu.codec.deepcabac.compiled import nnc_coder as fast
from aipu.codec.deepcabac.reference import nnc as reference
from aipu.codec.deepcabac.reference.binarization import LevelLaw
from aipu.codec.deepcabac.reference.layer_coder import DeepCabacOptions, decode_layer, encode_layer
from aipu.codec.errors import CodecError
from tests.sandbox import Sandbox, fuzz, profiles, run_case

OPTION_SETS = (
    DeepCabacOptions(),
    DeepCabacOptions(sig_context="template", sign_context="template", estimator="hevc",
                     law=LevelLaw(x_prime=256, remainder="rem"), greater_split=300),
    DeepCabacOptions(sig_context="distance", distance_window=5, estimator="dual_rate",
                     law=LevelLaw(k0=3, x_prime=None), greater_above="bypass"),
    DeepCabacOptions(sig_context="previous", law=LevelLaw(x_prime=2, abs_max=40), greater_above="shared"),
)
SHAPES = st.sampled_from([(1,), (7,), (3, 5), (4, 4, 3), (64, 80), (0,), (2, 0)])
UNARY = st.sampled_from([1, 11, 200])


@pytest.fixture(scope="module")
def sandbox():
    """Forked after the kernels are compiled or loaded (compiling in the child would take seconds per case)."""
    levels = np.arange(-5, 5, dtype=np.int32)
    fast.decode_nnc_layer(fast.encode_nnc_layer(levels), levels.shape)
    box = Sandbox()
    yield box
    box.close()


def _outcome(decode) -> tuple:
    try:
        levels = decode()
    except CodecError as error:
        return ("error", error.reason, error.bit_position, str(error))
    return ("levels", levels.shape, hashlib.sha256(np.ascontiguousarray(levels)).hexdigest())


def decode_nnc_both(case: tuple) -> tuple:
    """Child side: the reference's and the compiled decoder's outcomes."""
    data, shape, unary_length = case
    return tuple(_outcome(lambda module=module: module.decode_nnc_layer(data, shape, unary_length))
                 for module in (reference, fast))


def decode_generic(case: tuple) -> tuple:
    data, shape, option_set = case
    return _outcome(lambda: decode_layer(data, shape, OPTION_SETS[option_set]))


def assert_located(outcome: tuple, data: bytes) -> None:
    if outcome[0] == "error":
        assert outcome[2] is not None and 0 <= outcome[2] <= 8 * len(data), f"{outcome[3]}\ninput: {data.hex()}"


def check_nnc(sandbox, case) -> tuple:
    ours, compiled = run_case(sandbox, decode_nnc_both, case)
    assert ours == compiled, f"reference {ours[:3]}, compiled {compiled[:3]}\ninput: {case[0].hex()}"
    assert_located(ours, case[0])
    return ours


def check_generic(sandbox, case) -> tuple:
    outcome = run_case(sandbox, decode_generic, case)
    assert_located(outcome, case[0])
    return outcome


def mutated(payload: bytes, cut: int, flips: list[int], tail: bytes) -> bytes:
    data = bytearray(payload[: max(0, len(payload) - cut)] if cut else payload)
    for bit in flips:
        if data:
            data[(bit // 8) % len(data)] ^= 0x80 >> (bit % 8)
    return bytes(data) + tail


LEVELS = st.integers(0, 2**32 - 1).map(lambda seed: np.round(np.random.default_rng(seed).laplace(
    0, 3, (6, 14))).astype(np.int32))
MUTATIONS = st.tuples(st.integers(0, 40), st.lists(st.integers(0, 4000), max_size=4), st.binary(max_size=3))


@pytest.mark.parametrize("profile", profiles(150, 5000))
def test_random_bytes_nnc(sandbox, profile):
    def check(case):
        check_nnc(sandbox, case)
    fuzz(profile, st.tuples(st.binary(max_size=200), SHAPES, UNARY), check)


@pytest.mark.parametrize("profile", profiles(150, 5000))
def test_mutated_nnc_payloads(sandbox, profile):
    def check(case):
        levels, unary_length, (cut, flips, tail) = case
        payload = reference.encode_nnc_layer(levels, unary_length)
        check_nnc(sandbox, (mutated(payload, cut, flips, tail), levels.shape, unary_length))
    fuzz(profile, st.tuples(LEVELS, UNARY, MUTATIONS), check)


@pytest.mark.parametrize("profile", profiles(100, 3000))
def test_random_bytes_generic(sandbox, profile):
    def check(case):
        check_generic(sandbox, case)
    fuzz(profile, st.tuples(st.binary(max_size=200), SHAPES, st.integers(0, len(OPTION_SETS) - 1)), check)


@pytest.mark.parametrize("profile", profiles(100, 3000))
def test_mutated_generic_payloads(sandbox, profile):
    def check(case):
        levels, option_set, (cut, flips, tail) = case
        levels = np.clip(levels, -40, 40)
        payload = encode_layer(levels, OPTION_SETS[option_set])
        check_generic(sandbox, (mutated(payload, cut, flips, tail), levels.shape, option_set))
    fuzz(profile, st.tuples(LEVELS, st.integers(0, len(OPTION_SETS) - 1), MUTATIONS), check)


def test_every_truncation_fails_and_the_whole_payload_decodes(sandbox):
    levels = np.round(np.random.default_rng(9).laplace(0, 5, (5, 12))).astype(np.int32)
    payload = reference.encode_nnc_layer(levels)
    assert check_nnc(sandbox, (payload, levels.shape, 11))[0] == "levels"
    for cut in range(len(payload)):
        assert check_nnc(sandbox, (payload[:cut], levels.shape, 11))[0] == "error"
    assert check_nnc(sandbox, (payload + b"\0", levels.shape, 11))[1].endswith("after the end of the stream")


def test_a_huge_shape_with_a_short_payload_fails_at_its_end(sandbox):
    outcome = check_nnc(sandbox, (b"\x12\x34\x56", (4000, 4000), 11))
    assert outcome[:2] == ("error", "reading past the end of the stream") and outcome[2] == 24
