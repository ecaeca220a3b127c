"""NNCodec's payload: our reference against NNCodec 2.1.3 itself (slow: it needs NNCodec's own venv, created
on first use) and on its own."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aipu.codec.deepcabac.reference.nnc import (choose_parameter_sets, decode_nnc_layer, encode_nnc_layer,
                                                nnc_options, signalled_contexts)
from aipu.codec.errors import CodecError

HELPER = Path(__file__).with_name("nncodec_payloads.py")
QUICK = settings(max_examples=30, derandomize=True, deadline=None, database=None)


def interop_cases() -> dict[str, tuple[np.ndarray, int]]:
    """(levels, cabac_unary_length) cases: int8 layers as in the benchmark, and the syntax's edges."""
    rng = np.random.default_rng(51)
    return {
        "laplace_conv": (np.clip(np.round(rng.laplace(0, 6, (16, 8, 3, 3))), -127, 127).astype(np.int32), 11),
        "uniform_int8": (rng.integers(-128, 128, (7, 33)).astype(np.int32), 11),
        "sparse_rows": (np.round(rng.laplace(0, 2, (20, 40)) * (rng.random((20, 1)) < 0.4)).astype(np.int32), 11),
        "vector": (rng.integers(-3, 4, 100).astype(np.int32), 11),
        "short_unary": (rng.integers(-40, 41, (9, 9)).astype(np.int32), 1),
        "long_unary": (rng.integers(-300, 301, (6, 10)).astype(np.int32), 200),
        "huge_levels": (np.array([0, 1, -1, 12, -13, 2**20, -(2**30), 2**31 - 1, -(2**31 - 1)], np.int32), 11),
        "all_zero": (np.zeros((4, 5), np.int32), 11),
        "one_weight": (np.array([[-7]], np.int32), 4),
    }


def run_nncodec(mode: str, cases: dict, payloads: dict | None = None) -> dict[str, np.ndarray]:
    """NNCodec's payloads (mode "encode", with param_opt as in ``cases[name][2]``) or decoded levels."""
    from aipu.app.bench.nncodec_env import environment
    try:
        python = environment()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"NNCodec's environment cannot be built here: {error}")
    with tempfile.TemporaryDirectory() as scratch:
        source, target = Path(scratch) / "in.npz", Path(scratch) / "out.npz"
        members = {}
        for name, (levels, unary_length, optimise) in cases.items():
            members |= {f"levels_{name}": levels, f"unary_{name}": unary_length, f"optimise_{name}": optimise}
            if payloads is not None:
                members[f"payload_{name}"] = np.frombuffer(payloads[name], np.uint8)
        np.savez(source, **members)
        subprocess.run([str(python), str(HELPER), mode, str(source), str(target)], check=True, timeout=600)
        with np.load(target) as archive:
            prefix = "payload_" if mode == "encode" else "levels_"
            return {name: archive[prefix + name] for name in cases}


@pytest.mark.slow
@pytest.mark.parametrize("optimise", [0, 1])
def test_we_decode_what_nncodec_encodes(optimise):
    cases = {name: (levels, n, optimise) for name, (levels, n) in interop_cases().items()}
    for name, payload in run_nncodec("encode", cases).items():
        levels, unary_length, _ = cases[name]
        assert np.array_equal(decode_nnc_layer(payload.tobytes(), levels.shape, unary_length), levels), name


@pytest.mark.slow
def test_nncodec_decodes_what_we_encode_and_without_choices_our_bytes_are_its_bytes():
    cases = {name: (levels, n, 0) for name, (levels, n) in interop_cases().items()}
    ours = {name: encode_nnc_layer(levels, n) for name, (levels, n, _) in cases.items()}
    for name, decoded in run_nncodec("decode", cases, ours).items():
        assert np.array_equal(decoded, cases[name][0]), name
    plain = {name: encode_nnc_layer(levels, n, choose_parameters=False) for name, (levels, n, _) in cases.items()}
    for name, payload in run_nncodec("encode", cases).items():
        assert payload.tobytes() == plain[name], name


@QUICK
@given(levels=hnp.arrays(np.int32, hnp.array_shapes(max_dims=4, max_side=7),
                         elements=st.one_of(st.integers(-20, 20), st.integers(-(2**31 - 1), 2**31 - 1))),
       unary_length=st.sampled_from([1, 2, 11, 40]), choose=st.booleans())
def test_round_trip(levels, unary_length, choose):
    data = encode_nnc_layer(levels, unary_length, choose)
    assert np.array_equal(decode_nnc_layer(data, levels.shape, unary_length), levels)


def test_parameter_choice_pays_on_skewed_contexts():
    rng = np.random.default_rng(0)
    levels = (rng.random((64, 64)) < 0.03).astype(np.int32) * rng.integers(1, 3, (64, 64))
    chosen = choose_parameter_sets(nnc_options(), levels.ravel().tolist(), 64)
    assert ("sig_flag", 0) in chosen and set(chosen) <= set(signalled_contexts(11))
    assert len(encode_nnc_layer(levels)) < len(encode_nnc_layer(levels, choose_parameters=False))


def test_signalled_contexts_follow_nnc_order():
    keys = signalled_contexts(2)
    assert len(keys) == 3 + 3 + 4 + 31
    assert keys[6:10] == [("abs_level_greater_x", 0, 0), ("abs_level_greater_x", 0, 1),
                          ("abs_level_greater_x", 1, 0), ("abs_level_greater_x", 1, 1)]
    assert keys[10] == ("abs_level_greater_x", 2, None)


def test_errors():
    data = encode_nnc_layer(np.arange(-20, 20, dtype=np.int32))
    with pytest.raises(CodecError) as caught:
        decode_nnc_layer(data[:5], (40,))
    assert caught.value.bit_position is not None and caught.value.bit_position <= 40
    with pytest.raises(ValueError, match="cabac_unary_length"):
        encode_nnc_layer(np.zeros(3, np.int32), 0)
    with pytest.raises(ValueError, match="above the limit"):
        encode_nnc_layer(np.array([-(2**31)], np.int64))
