"""`aipu demo`: the embedded model runs end to end and every promise it prints holds."""
from __future__ import annotations

import numpy as np

from sim.demo import default_model, float_conv_relu, quantize_model, run_demo
from sim.program import Program


def test_demo_is_bit_exact_accurate_and_lossless(tmp_path):
    report = run_demo(tmp_path)
    assert report["golden"]["bit_exact"] and report["golden"]["outputs"] == 32 * 16 * 16
    assert report["codec"]["lossless"]
    # 8-bit activations and weights through three layers: well above 30 dB against the float model.
    assert report["float_reference"]["sqnr_db"] > 30
    assert report["interpreter"]["macs"] == (16 * 27 + 16 * 9 + 32 * 16) * 16 * 16
    program = Program.read(tmp_path / "model.aipu")
    assert program.disassemble() == (tmp_path / "model.lst").read_text()


def test_float_reference_conv_matches_a_direct_loop():
    image, model = default_model()
    layer = model[1]  # depthwise, padded
    out = float_conv_relu(image[:, :1].repeat(16, axis=1), layer)
    x = np.pad(image[0, 0], 1)
    k = 5
    direct = max(0.0, float((x[3:6, 4:7] * layer.w[k, 0]).sum() + layer.bias[k]))
    assert np.isclose(out[0, k, 3, 4], direct)


def test_quantized_layers_chain_shapes():
    image, model = default_model()
    layers, float_outputs, _ = quantize_model(image, model)
    for previous, layer in zip(layers, layers[1:]):
        assert layer.x.shape == previous.reference().shape
    assert float_outputs[-1].shape == (1, 32, 16, 16)
