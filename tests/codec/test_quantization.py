"""Pre-quantized integer tensors: coded as q - zero_point, decoded bit-exactly with their scale and zero point."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from aipu import codec
from aipu.codec import CodecError, QuantParams
from aipu.codec.api import decode_layer
from aipu.codec.container import HEADER, index_json, pack_container
from aipu.codec.encoder import EncoderOptions
from aipu.codec.quantization import QUANTIZED_DTYPES, QuantizationError, read_entry
from aipu.codec.quantize import MAX_CMAXW

FAST = codec.CodecOptions(encoder=EncoderOptions(trees=("octree",), split="never", start_depth="root", zdep="off"))


def _round_trip(tensors, quantization, groups=None):
    data = codec.encode(tensors, FAST, groups, quantization)
    decoded, infos = codec.decode_with_info(data)
    for name, array in tensors.items():
        assert decoded[name].dtype == array.dtype
        np.testing.assert_array_equal(decoded[name], array)
    return data, codec.quantization_of([t for info in infos for t in info.tensors])


@pytest.mark.parametrize("dtype", QUANTIZED_DTYPES)
def test_every_dtype_round_trips_with_its_parameters(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(len(dtype))
    w = rng.integers(info.min, int(info.max) + 1, (6, 3, 3, 3)).astype(dtype)
    w[0, 0, 0, :2] = info.min, info.max                           # the extremes minus any zero point fit
    zero_point = rng.integers(info.min, int(info.max) + 1, 6)
    scale = rng.uniform(1e-4, 1, 6).astype(np.float32)
    _, back = _round_trip({"w": w}, {"w": QuantParams(zero_point, scale, axis=0)})
    np.testing.assert_array_equal(back["w"].zero_point, zero_point)
    assert back["w"].scale.dtype == np.float32 and back["w"].scale.tobytes() == scale.tobytes()
    assert back["w"].axis == 0


def test_levels_are_centred_and_a_bias_without_scale_is_carried():
    """uint8 around 128 codes as small signed levels (cheaper than ~100..160); decode_layer(levels=True) gives them."""
    rng = np.random.default_rng(1)
    w = np.clip(np.round(rng.laplace(128, 6, (16, 8, 3, 3))), 0, 255).astype(np.uint8)
    bias = rng.integers(-5000, 5000, 16).astype(np.int32)
    quantization = {"w": QuantParams(np.array([128]), np.array([0.02], np.float32)),
                    "b": QuantParams(np.array([0]))}
    data, back = _round_trip({"w": w, "b": bias}, quantization, [("w", "b")])
    assert back["b"].scale is None and back["b"].axis is None and back["w"].axis is None
    levels = decode_layer(data, "w", levels=True)["w"]
    np.testing.assert_array_equal(levels, w.astype(np.int64) - 128)
    plain = codec.encode_with_info({"w": w}, FAST)[1][0].length
    centred = codec.encode_with_info({"w": w}, FAST, quantization={"w": quantization["w"]})[1][0].length
    assert centred < 0.92 * plain           # 768 against 855 bytes of stream


def test_an_unquantized_container_is_unchanged():
    """No quantization: the index has no new key, so the bytes are those of before."""
    w = np.arange(24, dtype=np.int8).reshape(4, 6)
    assert b"quantization" not in index_json(codec.encode({"w": w}, FAST, quantization={}))


@pytest.mark.parametrize("params,words", [
    (QuantParams(np.array([0]), np.array([np.nan], np.float32)), "quantization.scale[0] = nan"),
    (QuantParams(np.array([0]), np.array([-0.5], np.float32)), "scale[0] = -0.5, expected a finite positive"),
    (QuantParams(np.array([0]), np.array([0.1])),                       # float64, not float32
     "scale[0] = 0.1, expected a finite positive number that float32 holds exactly"),
    (QuantParams(np.array([300])), "zero_point[0] = 300, expected an integer in -128..127"),
    (QuantParams(np.array([1.5])), "quantization.zero_point[0] = 1.5"),
    (QuantParams(np.zeros(3, np.int64), axis=0), "a list of 1 or 4 values, one per slice along axis 0"),
    (QuantParams(np.zeros(4, np.int64)), "zero_point = [0, 0, 0, 0], expected a list of 1 value"),
    (QuantParams(np.zeros(1, np.int64), axis=2), "an axis of the tensor, 0..1"),
])
def test_the_encoder_refuses_parameters_it_could_not_read_back(params, words):
    with pytest.raises(QuantizationError, match="tensor 'w': ") as error:
        codec.encode({"w": np.zeros((4, 5), np.int8)}, FAST, quantization={"w": params})
    assert words in str(error.value)


def test_a_float_tensor_or_an_unknown_name_cannot_be_quantized():
    with pytest.raises(QuantizationError, match="quantization.dtype = 'float32'"):
        codec.encode({"w": np.zeros((4, 5), np.float32)}, FAST, quantization={"w": QuantParams(np.array([0]))})
    with pytest.raises(ValueError, match="quantization names unknown tensor 'v'"):
        codec.encode({"w": np.zeros((4, 5), np.int8)}, FAST, quantization={"v": QuantParams(np.array([0]))})


def test_every_check_allows_what_the_dtypes_can_hold():
    """The dtypes' extreme zero points leave every level within the codec's ±(2^32 - 1)."""
    for dtype in QUANTIZED_DTYPES:
        info = np.iinfo(dtype)
        for zero_point in (int(info.min), int(info.max)):
            assert max(int(info.max) - zero_point, zero_point - int(info.min)) <= MAX_CMAXW
            read_entry({"scale": None, "zero_point": [zero_point], "axis": None}, "t", dtype, [3])


def _with_quantization(entry) -> bytes:
    """A container of a uint8 tensor with zero point 128 whose index entry is replaced by ``entry``."""
    data = codec.encode({"w": np.full((4, 6), 200, np.uint8)}, FAST, quantization={"w": QuantParams(np.array([128]))})
    length = HEADER.unpack_from(data)[1]
    index = json.loads(index_json(data))
    index["layers"][0]["tensors"][0]["quantization"] = entry
    return pack_container(json.dumps(index).encode(), data[HEADER.size + length:])


def _float32_text(*values: float) -> str:
    """Scales as an index entry stores them: base64 of their little-endian float32 bytes."""
    return base64.b64encode(np.array(values, "<f4").tobytes()).decode()


@pytest.mark.parametrize("entry,words", [
    ({"scale": None, "zero_point": [128]}, "exactly the keys scale, zero_point, axis"),
    ({"scale": None, "zero_point": [True], "axis": None}, "quantization.zero_point[0] = True"),
    ({"scale": _float32_text(np.inf), "zero_point": [128], "axis": None}, "scale[0] = inf, expected a finite positive"),
    ({"scale": _float32_text(0.5, 0.0), "zero_point": [128], "axis": None}, "scale = [0.5, 0.0], expected a list "
                                                                          "of 1 value"),
    ({"scale": [0.5], "zero_point": [128], "axis": None}, "quantization.scale = [0.5], expected base64"),
    ({"scale": "AACAPw", "zero_point": [128], "axis": None}, "quantization.scale = 'AACAPw', expected base64"),
    ({"scale": "AAAA#w==", "zero_point": [128], "axis": None}, "expected base64"),
    ({"scale": None, "zero_point": [128], "axis": True}, "quantization.axis = True"),
    ({"scale": None, "zero_point": [128] * 6, "axis": 1}, None),        # a valid per-axis entry
    ({"scale": None, "zero_point": [255], "axis": None}, "outside the range of uint8"),   # 72 + 255
])
def test_the_decoder_checks_every_field(entry, words):
    data = _with_quantization(entry)
    if words is None:
        np.testing.assert_array_equal(codec.decode(data)["w"], np.full((4, 6), 200, np.uint8))
        return
    with pytest.raises(CodecError) as error:
        codec.decode(data)
    assert words in str(error.value) and error.value.bit_position is not None
