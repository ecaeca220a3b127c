"""Binarisations (codec/binarization.py) and the Table 337/338 element coder (codec/contexts.py)."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.codec.reference import binarization as bz
from aipu.codec.reference.element_coder import ElementDecoder, ElementEncoder
from aipu.codec.reference.elements import (ALIASES, BYPASS_ELEMENTS, ELEMENTS, NUM_CONTEXTS, PROJECT_ELEMENTS,
                                           TABLE_337, element_spec)
from aipu.codec.reference.engine import TRACE_BYPASS, AecDecoder, AecEncoder
from aipu.codec.errors import CodecError


class BinString:
    """A bin string with the binIdx of every access, standing in for the engine."""

    def __init__(self, bins=()):
        self.bins = list(bins)
        self.indices: list[int] = []
        self.cursor = 0

    def write(self, bin_idx: int, bin_val: int) -> None:
        self.indices.append(bin_idx)
        self.bins.append(bin_val)

    def read(self, bin_idx: int) -> int:
        self.indices.append(bin_idx)
        if self.cursor >= len(self.bins):
            raise CodecError("bin string exhausted")
        self.cursor += 1
        return self.bins[self.cursor - 1]


def bins_of(encode, *args, **kwargs) -> list[int]:
    string = BinString()
    encode(string.write, *args, **kwargs)
    assert string.indices == list(range(len(string.bins))), "binIdx must count every bin from 0"
    return string.bins


def decoded(decode, bins, *args, **kwargs):
    string = BinString(bins)
    value = decode(string.read, *args, **kwargs)
    assert string.cursor == len(bins), "the decoder must consume exactly the bin string"
    assert string.indices == list(range(len(bins)))
    return value


def parse(text: str) -> list[int]:
    return [int(c) for c in text if c in "01"]


# --- FL ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("length", range(1, 33))
def test_fl_every_width(length):
    top = (1 << length) - 1
    rng = random.Random(length)
    for value in {0, 1, top, top >> 1, (top >> 1) + 1, rng.randint(0, top)}:
        bins = bins_of(bz.encode_fl, value, length)
        assert bins == [int(c) for c in format(value, f"0{length}b")]          # MSB first (A22)
        assert decoded(bz.decode_fl, bins, length) == value
    with pytest.raises(ValueError):
        bins_of(bz.encode_fl, top + 1, length)
    with pytest.raises(ValueError):
        bins_of(bz.encode_fl, -1, length)


def test_fl_length_limits():
    assert bins_of(bz.encode_fl, 0, 0) == [] and decoded(bz.decode_fl, [], 0) == 0
    with pytest.raises(ValueError):
        bz.decode_fl(BinString().read, 33)


# --- U and TU (Tables 339, 340) -----------------------------------------------------------------------
def test_unary_table_339():
    for value, text in enumerate(["0", "10", "110", "1110", "11110", "111110"]):
        assert bins_of(bz.encode_u, value, 10) == parse(text)
        assert decoded(bz.decode_u, parse(text), 10) == value


def test_unary_cap():
    assert decoded(bz.decode_u, [1] * 31 + [0], 31) == 31
    with pytest.raises(CodecError, match="maximum 31"):
        bz.decode_u(BinString([1] * 40).read, 31)
    with pytest.raises(ValueError):
        bins_of(bz.encode_u, 32, 31)


def test_truncated_unary_table_340():
    c_max = 6
    for value in range(c_max + 1):
        expected = [1] * value + ([0] if value < c_max else [])
        assert bins_of(bz.encode_tu, value, c_max) == expected
        assert decoded(bz.decode_tu, expected, c_max) == value


# --- EGk (Table 341, with its two misprinted rows corrected: A19) --------------------------------------
TABLE_341 = {
    0: [("0", 0, 0), ("10x", 1, 2), ("110xx", 3, 6), ("1110xxx", 7, 14)],
    1: [("0x", 0, 1), ("10xx", 2, 5), ("110xxx", 6, 13), ("1110xxxx", 14, 29)],
    2: [("0xx", 0, 3), ("10xxx", 4, 11), ("110xxxx", 12, 27), ("1110xxxxx", 28, 59)],
    3: [("0xxx", 0, 7), ("10xxxx", 8, 23), ("110xxxxx", 24, 55), ("1110xxxxxx", 56, 119)],
}


@pytest.mark.parametrize("k", sorted(TABLE_341))
def test_egk_table_341(k):
    for pattern, low, high in TABLE_341[k]:
        prefix = pattern.rstrip("x")
        suffix_len = len(pattern) - len(prefix)
        for value in range(low, high + 1):
            expected = parse(prefix) + [int(c) for c in format(value - low, f"0{suffix_len}b")] * (suffix_len > 0)
            assert bins_of(bz.encode_egk, value, k) == expected
            assert decoded(bz.decode_egk, expected, k) == value


# --- UEGk ----------------------------------------------------------------------------------------------
UEGK_PARAMS = sorted({(spec.c_max, spec.k) for spec in ELEMENTS.values() if spec.binarization == "UEGk"})


def test_uegk_parameters_of_table_338():
    assert UEGK_PARAMS == [(0, 5), (0, 8), (6, 0), (8, 8), (16, 0), (16, 4)]


@pytest.mark.parametrize("c_max,k", UEGK_PARAMS)
def test_uegk_boundaries(c_max, k):
    """Every value around cMax and the EGk class boundaries, with the '<' reading (A19)."""
    edges = {0, 1, c_max - 1, c_max, c_max + 1, c_max + (1 << k) - 1, c_max + (1 << k), bz.MAX_EG_VALUE,
             bz.MAX_EG_VALUE - 1}
    for order in range(33):
        start = c_max + (1 << (order + k)) - (1 << k)
        edges |= {start - 1, start, start + 1}
    for value in sorted(v for v in edges if 0 <= v <= bz.MAX_EG_VALUE):
        bins = bins_of(bz.encode_uegk, value, c_max, k)
        assert decoded(bz.decode_uegk, bins, c_max, k) == value
        ones = next(i for i, b in enumerate(bins + [0]) if b == 0)
        if value < c_max:
            assert bins == [1] * value + [0]
        else:   # one merged run: cMax + L ones, a zero, L + k suffix bins
            assert len(bins) == 2 * (ones - c_max) + 1 + k + c_max


@pytest.mark.parametrize("c_max,k", UEGK_PARAMS)
def test_uegk_every_small_value(c_max, k):
    previous_length = 0
    for value in range(3000):
        bins = bins_of(bz.encode_uegk, value, c_max, k)
        assert decoded(bz.decode_uegk, bins, c_max, k) == value
        assert len(bins) >= previous_length           # lengths never shrink with the value
        previous_length = len(bins)


def test_uegk_values_the_printed_test_cannot_code():
    # With the printed 'leadingOneBits <= cMax', tgtm_delta_index (cMax 0, k 5) codes 0 then 32..;
    # with '<' the values 1..31 are 0 + 5 suffix bins.
    for value in range(1, 32):
        assert bins_of(bz.encode_uegk, value, 0, 5) == [0] + [int(c) for c in format(value, "05b")]


@pytest.mark.parametrize("c_max,k", UEGK_PARAMS)
def test_uegk_corrupt_prefix_raises(c_max, k):
    with pytest.raises(CodecError, match="prefix"):
        bz.decode_uegk(BinString([1] * 200).read, c_max, k)
    # the longest legal prefix with an all-ones suffix: above 2**32 - 1 it must raise
    eg_ones = bz._max_leading_ones(k, bz.MAX_EG_VALUE - c_max)
    bins = [1] * (c_max + eg_ones) + [0] + [1] * (eg_ones + k)
    largest = c_max + (1 << (eg_ones + k + 1)) - (1 << k) - 1
    if largest > bz.MAX_EG_VALUE:
        with pytest.raises(CodecError, match="exceeds"):
            bz.decode_uegk(BinString(bins).read, c_max, k)
    else:
        assert decoded(bz.decode_uegk, bins, c_max, k) == largest == bz.MAX_EG_VALUE
    with pytest.raises(CodecError, match="prefix"):
        bz.decode_uegk(BinString([1] * (c_max + eg_ones + 1)).read, c_max, k)
    with pytest.raises(ValueError):
        bins_of(bz.encode_uegk, bz.MAX_EG_VALUE + 1, c_max, k)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(UEGK_PARAMS), st.integers(0, bz.MAX_EG_VALUE))
def test_uegk_round_trip_hypothesis(params, value):
    c_max, k = params
    assert decoded(bz.decode_uegk, bins_of(bz.encode_uegk, value, c_max, k), c_max, k) == value


# --- Tables 337/338 as data ----------------------------------------------------------------------------
INPUT_SAMPLES = {"sign": (0, 1), "n0": (0, 1), "n1": (0, 1), "at_max_depth": (0, 1),
                 "c0": (-3, 0, 5), "c1": (-1, 0, 2)}


def reachable_contexts(spec) -> set[int]:
    names = [n for n in spec.inputs if n in INPUT_SAMPLES]
    max_bins = {"FL": 1, "U": 40, "UEGk": 100}[spec.binarization]
    found = set()
    for combo in itertools.product(*(INPUT_SAMPLES[n] for n in names)):
        inputs = dict(zip(names, combo))
        found |= {spec.ctx_start + spec.ctx_inc(b, inputs) for b in range(max_bins)}
    return found


def test_context_array_size():
    assert NUM_CONTEXTS == 690
    assert len(TABLE_337) == 48 and len(BYPASS_ELEMENTS) == 17
    assert sum(1 for spec in TABLE_337 if spec.ctx_count) == 48


def test_every_context_index_inside_the_array():
    for spec in ELEMENTS.values():
        if not spec.bypass:
            reach = reachable_contexts(spec)
            assert min(reach) >= 0 and max(reach) < NUM_CONTEXTS, spec.name


def test_reachable_ranges_of_the_digest():
    expected = {"abs_predicted_diff": (19, 41), "abs_delta": (83, 129), "oct_nzflag": (138, 140),
                "oct_index": (152, 197), "oct_abs_q": (200, 246), "uni_map_nzflag": (249, 251),
                "tgtm_delta_index": (376, 398), "esc_abs_q": (590, 636), "qval_minus_one": (643, 665),
                "oct_start_depth_delta": (135, 136), "tag_start_depth_delta": (360, 361)}
    for name, (low, high) in expected.items():
        reach = reachable_contexts(ELEMENTS[name])
        assert (min(reach), max(reach)) == (low, high), name
        assert reach == set(range(low, high + 1)), name


def test_documented_overlaps_and_nothing_else():
    """Table 337 literally (A20): which elements share a context index."""
    owners: dict[int, set[str]] = {}
    for spec in TABLE_337:
        for ctx_idx in reachable_contexts(spec):
            owners.setdefault(ctx_idx, set()).add(spec.name)
    shared = {frozenset(names) for names in owners.values() if len(names) > 1}
    assert shared == {
        frozenset({"abs_delta", "oct_cbook_esc_mode"}),          # abs_delta Inc 48 -> 129
        frozenset({"oct_abs_q", "uni_nzflag"}),                  # oct_abs_q Inc 48 -> 246
        frozenset({"tgt_mode", "tag_start_depth_delta"}),        # duplicate start 360
        frozenset({"tgtm_index", "tgtm_delta_index"}),           # 375
        frozenset({"tgtm_abs_q", "tgtm_delta_abs_q"}),           # 423
        frozenset({"uni_tgt_index", "uni_tgt_delta_index"}),     # 486
        frozenset({"uni_tgt_abs_q", "uni_tgt_delta_abs_q"}),     # 534
        frozenset({"esc_abs_q", "reorder_flag"}),                # esc_abs_q count 3 spills into 591
        frozenset({"esc_abs_q", "signalled_flag"}),              # ... and 594
    }
    # map_mode_flag uses Inc 1 in ctu3d_map_mode_flag's block: deliberate, no overlap
    assert reachable_contexts(ELEMENTS["map_mode_flag"]) == {10}
    assert reachable_contexts(ELEMENTS["ctu3d_map_mode_flag"]) == {9}


def test_project_elements_share_their_siblings_contexts():
    assert {spec.name for spec in PROJECT_ELEMENTS} == {
        "cbook_sign", "tgtm_nzflag_q", "uni_tgt_nzflag_index", "uni_index", "uni_abs_q", "uni_map_sign"}
    assert reachable_contexts(ELEMENTS["cbook_sign"]) == reachable_contexts(ELEMENTS["sign_delta"])
    assert reachable_contexts(ELEMENTS["tgtm_nzflag_q"]) == reachable_contexts(ELEMENTS["tgtm_nzflag_index"])
    assert reachable_contexts(ELEMENTS["uni_index"]) == reachable_contexts(ELEMENTS["uni_cmap_val"])
    assert reachable_contexts(ELEMENTS["uni_abs_q"]) == reachable_contexts(ELEMENTS["uni_qmap_val"])
    assert reachable_contexts(ELEMENTS["uni_map_sign"]) == reachable_contexts(ELEMENTS["uni_sign"])
    assert reachable_contexts(ELEMENTS["uni_tgt_nzflag_index"]) == {474}


def test_aliases_and_bypass_list():
    assert element_spec("select_map_mode_flag") is ELEMENTS["ctu3d_map_mode_flag"]
    assert element_spec("tag_mode") is ELEMENTS["tgt_mode"]
    assert set(ALIASES) == {"select_map_mode_flag", "tag_mode"}
    assert all(ELEMENTS[name].bypass and ELEMENTS[name].binarization == "FL" for name in BYPASS_ELEMENTS)
    assert all(not spec.bypass for spec in TABLE_337 + PROJECT_ELEMENTS)
    assert ELEMENTS["sublayer_cmaxw"].fixed_length == 32 and ELEMENTS["bias_abs_q"].inputs == ("length",)


# --- the element coder ----------------------------------------------------------------------------------
def random_inputs(spec, rng: random.Random) -> dict[str, int]:
    inputs = {}
    for name in spec.inputs:
        if name in ("sign", "n0", "n1", "at_max_depth"):
            inputs[name] = rng.getrandbits(1)
        elif name in ("c0", "c1"):
            inputs[name] = rng.choice([-2, -1, 0, 0, 1, 7])
        elif name == "length":
            inputs[name] = rng.randint(0, 31)
        elif name == "max_value":
            inputs[name] = rng.randint(0, 31)
    return inputs


def random_value(spec, inputs, rng: random.Random) -> int:
    if spec.binarization == "FL":
        length = spec.fixed_length if spec.fixed_length is not None else inputs["length"]
        return rng.getrandbits(length) if length else 0
    if spec.binarization == "U":
        return rng.randint(0, inputs["max_value"])
    return rng.choice([0, 1, spec.c_max, spec.c_max + 1, rng.randint(0, 100), rng.getrandbits(rng.randint(1, 32))])


def test_element_coder_round_trip_all_elements():
    rng = random.Random(2021)
    names = sorted(ELEMENTS) + sorted(ALIASES)
    script = []
    for _ in range(3000):
        name = rng.choice(names)
        spec = element_spec(name)
        inputs = random_inputs(spec, rng)
        script.append((name, random_value(spec, inputs, rng), inputs))
    encoder = AecEncoder()
    writer = ElementEncoder(encoder)
    for name, value, inputs in script:
        writer.write(name, value, **inputs)
    decoder = AecDecoder(encoder.finish(), trace=True)
    reader = ElementDecoder(decoder)
    assert [reader.read(name, **inputs) for name, _, inputs in script] == [v for _, v, _ in script]
    decoder.finish()
    # bypass elements appear in the trace as ctxIdx -1, context-coded ones at their Table 337 indices
    assert {c for c, _ in decoder.trace} <= set(range(NUM_CONTEXTS)) | {TRACE_BYPASS, -2}


def test_element_contexts_in_trace():
    encoder = AecEncoder()
    ElementEncoder(encoder).write("oct_abs_q", 18, sign=1)   # UEGk(16,0): 16 + 1 ones, 0, suffix '1'
    ElementEncoder(encoder).write("oct_nzflag", 1, at_max_depth=1, n0=0, n1=1, c0=-4)
    ElementEncoder(encoder).write("sublayer_dim", 2)
    decoder = AecDecoder(encoder.finish(), trace=True)
    reader = ElementDecoder(decoder)
    assert reader.read("oct_abs_q", sign=1) == 18
    assert reader.read("oct_nzflag", at_max_depth=1, n0=0, n1=1, c0=-4) == 1
    assert reader.read("sublayer_dim") == 2
    contexts = [c for c, _ in decoder.trace]
    assert contexts[:19] == [198 + 2 + bin_idx for bin_idx in range(19)]
    assert contexts[19] == 138 + 0                          # max depth, CoefP[0] < 0
    assert contexts[20:22] == [TRACE_BYPASS, TRACE_BYPASS]


def test_element_input_validation():
    reader = ElementDecoder(AecDecoder(AecEncoder().finish()))
    writer = ElementEncoder(AecEncoder())
    with pytest.raises(ValueError, match="unknown syntax element"):
        reader.read("no_such_element")
    with pytest.raises(ValueError, match="missing"):
        reader.read("oct_abs_q")
    with pytest.raises(ValueError, match="unexpected"):
        writer.write("split_flag", 1, sign=0)
    with pytest.raises(ValueError, match="n0 must be in 0..1"):
        writer.write("uni_map_nzflag", 1, n0=2, n1=0)
    with pytest.raises(ValueError, match="oct_sign"):
        writer.write("oct_sign", 2, c0=0, c1=0)
    with pytest.raises(ValueError, match="signalled_size"):
        writer.write("signalled_size", 5, max_value=4)
    with pytest.raises(ValueError, match="length must be in 0..32"):
        writer.write("bias_abs_q", 5, length=33)
    with pytest.raises(ValueError, match="c0 must be an integer"):
        writer.write("uni_sign", 1, c0=0.5)
    # numpy integers are integers
    writer.write("oct_sign", np.int64(1), c0=np.int32(-3), c1=np.int64(0))
    writer.write("oct_abs_q", np.uint8(200), sign=np.int8(1))


def test_element_decoder_reports_position_and_element():
    # a unary run of 40 ones (bins at ctx 135, 136, 136, ...) is longer than max_value
    encoder = AecEncoder()
    encoder.encode_bypass(1)
    for bin_idx in range(40):
        encoder.encode_decision(135 + (1 if bin_idx else 0), 1)
    decoder = AecDecoder(encoder.finish())
    decoder.decode_bypass()
    reader = ElementDecoder(decoder)
    with pytest.raises(CodecError) as info:
        reader.read("oct_start_depth_delta", max_value=5)
    assert info.value.element == "oct_start_depth_delta" and info.value.bit_position is not None
    # truncated stream inside an element
    with pytest.raises(CodecError, match="past the end") as info:
        ElementDecoder(AecDecoder(b"\x00\x00")).read("total_trainable_layer")
    assert info.value.element == "total_trainable_layer"


def test_elements_from_garbage_end_in_codec_error():
    """Random bytes read as random elements: a CodecError sooner or later, never a hang or another error."""
    rng = random.Random(404)
    names = sorted(ELEMENTS)
    for _ in range(40):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        with pytest.raises(CodecError):
            reader = ElementDecoder(AecDecoder(data))
            for _ in range(100_000):
                name = rng.choice(names)
                spec = element_spec(name)
                value = reader.read(name, **random_inputs(spec, rng))
                assert value >= 0
