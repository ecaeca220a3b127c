"""DeepCABAC layers in the container (codec.api, ``CodecOptions(format="deepcabac")``) and `--format deepcabac`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from aipu import codec
from aipu.app.cli import main
from aipu.codec.container import index_json
from aipu.codec.deepcabac.compiled.nnc_coder import decode_nnc_layer
from aipu.codec.errors import CodecError
from tests.codec.test_fuzz import container_with, deepcabac_container, deepcabac_index, deepcabac_streams

DEEPCABAC = codec.CodecOptions(format="deepcabac")


def tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"conv.weight": rng.laplace(0, 0.1, (8, 4, 3, 3)).astype(np.float32),
            "conv.bias": rng.normal(0, 1, 8).astype(np.float32), "zeros": np.zeros((3, 5), np.float16),
            "q": rng.integers(-100, 100, (16, 9)).astype(np.int8), "u": rng.integers(0, 255, 25).astype(np.uint16)}


def test_a_deepcabac_container_decodes_to_what_the_chapter_10_one_decodes():
    """The same quantisation: float tensors reconstruct alike, integer ones exactly; a tensor a layer."""
    data, infos = codec.encode_with_info(tensors(), DEEPCABAC)
    assert [info.name for info in infos] == list(tensors()) and {info.format for info in infos} == {"deepcabac"}
    decoded, reference = codec.decode(data), codec.decode(codec.encode(tensors()))
    for name, array in tensors().items():
        assert decoded[name].dtype == array.dtype and np.array_equal(decoded[name], reference[name]), name


def test_a_layer_is_nncodecs_payload_and_its_levels_and_step_are_read_alone():
    data = codec.encode(tensors(), DEEPCABAC)
    infos, payload = codec.read_index(data)
    weight = infos[0]
    levels = decode_nnc_layer(data[payload + weight.offset:payload + weight.offset + weight.length], (8, 4, 3, 3))
    alone = codec.decode_layer(data, "conv.weight", levels=True)
    assert np.array_equal(alone["conv.weight"], levels) and alone["conv.weight:step"] > 0
    assert np.abs(alone["conv.weight"]).max() == 255       # bitdepth 8: levels within +-(2^8 - 1)
    assert codec.decode_layer(data, "q", levels=True)["q:step"] == 1


def test_pre_quantized_tensors_keep_their_zero_point_and_scale():
    weights = np.random.default_rng(1).integers(0, 256, (4, 9)).astype(np.uint8)
    params = codec.QuantParams(np.array([128]), np.float32([0.02]))
    data = codec.encode({"w": weights}, DEEPCABAC, quantization={"w": params})
    entry = json.loads(index_json(data))["layers"][0]
    assert entry["format"] == "deepcabac" and "quantization" in entry["tensors"][0] and "step" not in entry["tensors"][0]
    assert np.array_equal(codec.decode(data)["w"], weights)


def _index_with(change) -> dict:
    index = json.loads(json.dumps(deepcabac_index()))
    change(index["layers"])
    return index


@pytest.mark.parametrize("change, words", [
    (lambda layers: layers[0].update(format="tai"), "layers[0].format = 'tai'"),
    (lambda layers: layers[0].update(format=1), "layers[0].format = 1"),
    (lambda layers: layers[0]["tensors"].append({**layers[1]["tensors"][0], "name": "b", "role": "bias"}),
     "one tensor in a DeepCABAC layer"),
    (lambda layers: layers[0]["tensors"][0].pop("step"), "a step if and only if the tensor is float"),
    (lambda layers: layers[2]["tensors"][0].update(step="AACAPw=="), "a step if and only if the tensor is float"),
    (lambda layers: layers[0]["tensors"][0].update(step="AAAAAA=="), "layers[0].tensors[0].step[0] = 0.0"),
    (lambda layers: layers[0]["tensors"][0].update(step="AACAPwAAgD8="), "a list of 1 value"),
    (lambda layers: layers[0]["tensors"][0].update(step=0.5), "base64 of little-endian float32 values"),
    (lambda layers: layers[0].pop("format"), "no step in a chapter-10 layer"),
])
def test_a_malformed_deepcabac_layer_is_named(change, words):
    with pytest.raises(CodecError, match="container index") as error:
        codec.decode(container_with(_index_with(change), deepcabac_streams()))
    assert words in str(error.value)


def test_a_step_in_a_chapter_10_layer_is_refused():
    data = codec.encode({"w": np.ones((2, 3), np.float32)})
    index = json.loads(index_json(data))
    index["layers"][0]["tensors"][0]["step"] = "AACAPw=="
    from aipu.codec.container import HEADER, pack_container
    streams = data[HEADER.size + HEADER.unpack_from(data)[1]:]
    with pytest.raises(CodecError, match="no step in a chapter-10 layer"):
        codec.decode(pack_container(json.dumps(index).encode(), streams))


def test_the_cli_encodes_deepcabac_and_refuses_it_with_chapter_10_modes(tmp_path, capsys):
    np.savez(tmp_path / "t.npz", **tensors())
    assert main(["codec", "encode", str(tmp_path / "t.npz"), "-o", str(tmp_path / "t.nnr"), "--format",
                 "deepcabac"]) == 0
    assert main(["codec", "info", str(tmp_path / "t.nnr")]) == 0
    assert "deepcabac:1" in capsys.readouterr().out
    assert main(["codec", "decode", str(tmp_path / "t.nnr"), "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as out:
        assert np.array_equal(out["q"], tensors()["q"])
    for mode in (["--fast"], ["--search", "cu"], ["--profile", "npu"]):
        assert main(["codec", "encode", str(tmp_path / "t.npz"), "-o", str(tmp_path / "f.nnr"), "--format",
                     "deepcabac", *mode]) == 2
        assert "--format = 'deepcabac'" in capsys.readouterr().err


def test_the_fuzz_container_is_a_deepcabac_one():
    assert {layer.get("format") for layer in json.loads(index_json(deepcabac_container()))["layers"]} == {"deepcabac"}
