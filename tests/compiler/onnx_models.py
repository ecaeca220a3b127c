"""Small float CNNs built with onnx.helper (random weights), in the shapes of the networks users bring:
MobileNetV2/V3-like (depthwise, stride 2, ReLU6, HardSwish, squeeze-excitation, residual add) and
ResNet-like (conv + BN + ReLU, max pooling, residual blocks, global average pooling, fully connected) and a
U-Net-like segmenter (strided encoder, ConvTranspose and bilinear-Resize decoder, skip concats)."""
from __future__ import annotations

import numpy as np
import onnx

from aipu.app.models.synthetic import GraphBuilder


def mobilenet_like(seed: int = 0, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    b = GraphBuilder(seed, 3, size)
    x = b.relu6(b.conv("image", 3, 16, stride=2))                            # stem
    expanded = b.relu6(b.conv(x, 16, 32, kernel=1))                          # inverted residual, stride 1
    depthwise = b.relu6(b.conv(expanded, 32, 32, groups=32))
    projected = b.conv(depthwise, 32, 16, kernel=1)
    x = b.node("Add", [x, projected])
    x = b.node("HardSwish", [b.conv(x, 16, 24, kernel=1)])                   # V3 block with squeeze-excitation
    x = b.node("HardSwish", [b.conv(x, 24, 24, kernel=5, stride=2, groups=24)])
    squeezed = b.node("GlobalAveragePool", [x])
    gate = b.node("HardSigmoid", [b.conv(b.node("Relu", [b.conv(squeezed, 24, 8, kernel=1, bn=False)]), 8, 24,
                                         kernel=1, bn=False)], alpha=1 / 6, beta=0.5)
    x = b.node("Mul", [x, gate])
    x = b.node("GlobalAveragePool", [b.conv(x, 24, 32, kernel=1)])
    return b.model(b.node("Sigmoid", [b.fc(b.node("Flatten", [x]), 32, classes)]))


def resnet_like(seed: int = 0, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    b = GraphBuilder(seed, 3, size)
    x = b.node("Relu", [b.conv("image", 3, 16, kernel=5, stride=2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for c_in, c_out, stride in ((16, 16, 1), (16, 32, 2)):
        y = b.node("Relu", [b.conv(x, c_in, c_out, stride=stride)])
        y = b.conv(y, c_out, c_out)
        shortcut = x if stride == 1 and c_in == c_out else b.conv(x, c_in, c_out, kernel=1, stride=stride)
        x = b.node("Relu", [b.node("Add", [y, shortcut])])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    return b.model(b.fc(x, 32, classes))


def unet_like(seed: int = 0, size: int = 16, classes: int = 3) -> onnx.ModelProto:
    b = GraphBuilder(seed, 3, size)
    skip = b.node("Relu", [b.conv("image", 3, 8)])
    x = b.node("Relu", [b.conv(skip, 8, 16, stride=2)])
    deep = b.node("Relu", [b.conv(x, 16, 16, stride=2)])
    up = b.node("Relu", [b.conv_transpose(deep, 16, 16)])                      # k4 s2 p1: 2x
    x = b.node("Relu", [b.conv(b.node("Concat", [x, up], axis=1), 32, 8, kernel=1)])
    x = b.node("Resize", [x, "", b.const(np.array([1, 1, 2, 2], np.float32))], mode="linear")
    x = b.node("Concat", [skip, x], axis=1)
    return b.model(b.conv(x, 16, classes, kernel=1, bn=False))


def w4a4_chain():
    """conv (3 input channels: int8 weights) -> conv -> conv -> depthwise conv (int8 weights) -> 1x1 conv ->
    conv -> global pooling -> fc -> fc, each conv and the first fc with a ReLU. SMALL's buffers take the
    48-channel tensor in chunks of input channels."""
    b = GraphBuilder(0, 3, 16)
    x = b.node("Relu", [b.conv("image", 3, 8)])                         # INT4: an INT4 conv reads it
    x = b.node("Relu", [b.conv(x, 8, 48)])                              # INT4
    x = b.node("Relu", [b.conv(x, 48, 16, stride=2)])                   # 8-bit: a depthwise conv reads it
    x = b.node("Relu", [b.conv(x, 16, 16, groups=16)])                  # INT4, written by DWCONV's REQUANT
    x = b.node("Relu", [b.conv(x, 16, 8, kernel=1)])                    # INT4
    x = b.node("Relu", [b.conv(x, 8, 16)])                              # 8-bit: pooling reads it
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    return b.model(b.fc(b.node("Relu", [b.fc(x, 16, 12)]), 12, 10))    # INT4 between the fcs; the output 8-bit


def random_network(seed: int, size: int = 12) -> onnx.ModelProto:
    """A random CNN: a stem, then random blocks (dense, depthwise or grouped convs with random kernels,
    strides and dilations; ReLU, ReLU6, LeakyReLU, PReLU, HardSwish, Sigmoid, Tanh; max or average pooling;
    residual adds; squeeze-excitation; channel concat; 2x upsampling by ConvTranspose or Resize), then pooling
    and a fully connected head (with a transposed flatten when the map is still larger than 1x1), with or
    without a softmax."""
    b = GraphBuilder(seed, 3, size)
    rng = b.rng
    channels = int(rng.choice([4, 8, 12]))
    x = b.node("Relu", [b.conv("image", 3, channels)])
    spatial = size
    for _ in range(int(rng.integers(3, 7))):
        kind = rng.choice(["conv", "depthwise", "grouped", "pool", "residual", "se", "concat", "table", "upsample"])
        if kind in ("conv", "depthwise", "grouped"):
            stride = int(rng.choice([1, 2])) if spatial >= 4 else 1
            kernel = int(rng.choice([1, 3, 5]))
            dilation = int(rng.choice([1, 2])) if kernel == 3 and stride == 1 else 1
            out = channels if kind != "conv" else int(rng.choice([4, 8, 16]))
            groups = channels if kind == "depthwise" else (2 if kind == "grouped" and channels % 2 == 0 else 1)
            out = out if groups == 1 or out % groups == 0 else channels
            x = b.conv(x, channels, out, kernel=kernel, stride=stride, groups=groups, dilation=dilation,
                       bn=bool(rng.integers(2)))
            x = _random_activation(b, x, out)
            channels, spatial = out, -(-spatial // stride)
        elif kind == "pool" and spatial >= 4:
            op = str(rng.choice(["MaxPool", "AveragePool"]))
            x = b.node(op, [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            spatial = -(-spatial // 2)
        elif kind == "residual":
            y = _random_activation(b, b.conv(x, channels, channels), channels)
            x = b.node("Add", [x, b.conv(y, channels, channels)])
        elif kind == "se":
            squeezed = b.node("GlobalAveragePool", [x])
            gate = b.node("Sigmoid", [b.conv(squeezed, channels, channels, kernel=1, bn=False)])
            x = b.node("Mul", [x, gate])
        elif kind == "concat":
            left = b.node("Relu", [b.conv(x, channels, 4, kernel=1)])
            right = b.node("Relu", [b.conv(x, channels, 4)])
            x, channels = b.node("Concat", [left, right], axis=1), 8
        elif kind == "table":
            x = b.node(str(rng.choice(["Tanh", "Sigmoid", "HardSwish"])), [x])
        elif kind == "upsample" and spatial <= 8:
            how = rng.choice(["k4s2", "k2s2", "k3s2", "linear", "nearest"])
            if how in ("linear", "nearest"):
                x = b.node("Resize", [x, "", b.const(np.array([1, 1, 2, 2], np.float32))], mode=str(how))
            else:
                groups = channels if rng.integers(2) else 1
                kernel, pads, extra = {"k4s2": (4, 1, 0), "k2s2": (2, 0, 0), "k3s2": (3, 1, 1)}[str(how)]
                x = _random_activation(b, b.conv_transpose(x, channels, channels, kernel=kernel, groups=groups,
                                                           pads=(pads,) * 4, output_padding=(extra, extra)),
                                       channels)
            spatial *= 2
    if spatial > 1 and rng.integers(2):
        x = b.node("Flatten", [x])                  # [1, C*H*W]: a transposing gather from channels-last
        features = channels * spatial * spatial
    else:
        x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
        features = channels
    logits = b.fc(x, features, 5)
    return b.model(b.node("Softmax", [logits], axis=-1) if rng.integers(2) else logits)


def _random_activation(b: GraphBuilder, x: str, channels: int) -> str:
    kind = b.rng.choice(["none", "Relu", "relu6", "LeakyRelu", "PRelu", "HardSwish"])
    if kind == "none":
        return x
    if kind == "relu6":
        return b.relu6(x)
    if kind == "PRelu":
        return b.node("PRelu", [x, b.const(b.rng.uniform(0.05, 0.5, (channels, 1, 1)).astype(np.float32))])
    if kind == "LeakyRelu":
        return b.node("LeakyRelu", [x], alpha=0.1)
    return b.node(str(kind), [x])


def pruned(model: onnx.ModelProto, fraction: float = 0.7) -> onnx.ModelProto:
    """``model`` with the smallest ``fraction`` of every 4-D weight (by magnitude, per tensor) set to zero: the
    sparse weights of a magnitude-pruned network, which the weight codec compresses well."""
    from onnx import numpy_helper

    pruned_model = onnx.ModelProto()
    pruned_model.CopyFrom(model)
    for index, initializer in enumerate(pruned_model.graph.initializer):
        weights = numpy_helper.to_array(initializer)
        if weights.ndim == 4:
            weights = np.where(np.abs(weights) < np.quantile(np.abs(weights), fraction), 0, weights)
            pruned_model.graph.initializer[index].CopyFrom(numpy_helper.from_array(weights, initializer.name))
    return pruned_model


def compile_on_noise(tmp_path, model: onnx.ModelProto, options, seed: int = 3, **lowering):
    """``model`` (a [N, 3, 16, 16] input) compiled with ``options`` on 8 calibration samples of noise;
    ``lowering``: compile_model's ``config`` and ``compress``."""
    from aipu.compiler.driver import compile_model

    onnx.save(model, tmp_path / "model.onnx")
    rng = np.random.default_rng(seed)
    np.savez(tmp_path / "calib.npz", image=rng.standard_normal((8, 3, 16, 16)).astype(np.float32))
    return compile_model(tmp_path / "model.onnx", tmp_path / "calib.npz", options=options, **lowering)


def assert_program_is_the_model(compiled, images: np.ndarray) -> None:
    """The compiled program on the interpreter gives the quantized model's first output, bit for bit, on each
    of ``images`` (float, [N, ...] of the model's "image" input)."""
    from aipu.sim.interpreter import run

    qmodel, network = compiled.qmodel, compiled.network
    for image in images:
        x = qmodel.quantize_inputs({"image": image[None]})
        result = run(network.program, network.memory(x))
        np.testing.assert_array_equal(network.read(result.memory, qmodel.outputs[0]), qmodel.run(x)[qmodel.outputs[0]])
