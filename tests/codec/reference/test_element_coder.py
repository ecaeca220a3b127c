"""One element through the reference engine (codec/reference/element_coder.py): every element round trip,
its contexts, its inputs, and where its errors point."""
from __future__ import annotations

import random

import numpy as np
import pytest

from aipu.codec.errors import CodecError
from aipu.codec.reference.element_coder import ElementDecoder, ElementEncoder
from aipu.codec.reference.elements import ALIASES, ELEMENTS, NUM_CONTEXTS, element_spec
from aipu.codec.reference.engine import TRACE_BYPASS, AecDecoder, AecEncoder


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
