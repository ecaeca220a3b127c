"""Float CNNs built with onnx.helper (random weights) in the shapes of the networks users bring, for the
compiler's tests and benchmarks: a small graph builder, and ResNet-18- and MobileNetV3-Large-shaped networks
(224x224, 1000 classes)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Appends nodes and random initializers; names are generated. A conv's weights are normal with He's
    standard deviation, or, given a ``channel_bank`` of trained channels (each divided by its standard
    deviation, app/models/real.py ``trained_channels``), each output channel is a bank channel resampled with
    replacement to the fan-in, times He's deviation: trained-like shapes (tails, kurtosis) at random."""

    def __init__(self, seed: int, channels: int, size: int, opset: int = 17,
                 channel_bank: list[np.ndarray] | None = None):
        self.rng = np.random.default_rng(seed)
        self.channel_bank = channel_bank
        self.nodes, self.initializers, self.opset, self.count = [], [], opset, 0
        self.input = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", channels, size, size])

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: np.ndarray, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, c_in: int, c_out: int, kernel: int = 3, stride: int = 1, groups: int = 1,
             bn: bool = True, dilation: int = 1) -> str:
        fan_in = c_in // groups * kernel * kernel
        w = self.kernel_weights((c_out, c_in // groups, kernel, kernel), np.sqrt(2 / fan_in))
        pad = dilation * (kernel // 2)
        y = self.node("Conv", [x, self.const(w, "w"), self.const(self.rng.normal(0, 0.1, c_out).astype(np.float32))],
                      strides=[stride, stride], pads=[pad] * 4, group=groups, dilations=[dilation, dilation])
        if not bn:
            return y
        stats = [self.rng.uniform(0.5, 1.5, c_out), self.rng.normal(0, 0.1, c_out), self.rng.normal(0, 0.1, c_out),
                 self.rng.uniform(0.5, 1.5, c_out)]
        return self.node("BatchNormalization", [y, *(self.const(v.astype(np.float32)) for v in stats)])

    def kernel_weights(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        """float32 weights [K, ...] of standard deviation ``std``: normal, or drawn from the channel bank."""
        if self.channel_bank is None:
            return self.rng.normal(0, std, shape).astype(np.float32)
        fan_in = int(np.prod(shape[1:]))
        picks = self.rng.integers(0, len(self.channel_bank), shape[0])
        rows = [self.rng.choice(self.channel_bank[pick], fan_in) for pick in picks]
        return (std * np.stack(rows)).reshape(shape).astype(np.float32)

    def conv_transpose(self, x: str, c_in: int, c_out: int, kernel: int = 4, stride: int = 2, groups: int = 1,
                       pads: tuple[int, int, int, int] = (1, 1, 1, 1), output_padding: tuple[int, int] = (0, 0),
                       dilation: int = 1) -> str:
        """A ConvTranspose (weights [C, K/G, k, k]), e.g. a decoder's 2x upsampling."""
        fan_in = c_in // groups * kernel * kernel // (stride * stride) or 1
        w = self.rng.normal(0, np.sqrt(2 / fan_in), (c_in, c_out // groups, kernel, kernel)).astype(np.float32)
        bias = self.const(self.rng.normal(0, 0.1, c_out).astype(np.float32))
        return self.node("ConvTranspose", [x, self.const(w, "w"), bias], strides=[stride, stride], pads=list(pads),
                         output_padding=list(output_padding), group=groups, dilations=[dilation, dilation])

    def relu6(self, x: str) -> str:
        return self.node("Clip", [x, self.const(np.float32(0)), self.const(np.float32(6))])

    def fc(self, x: str, features: int, classes: int) -> str:
        w = self.rng.normal(0, np.sqrt(1 / features), (classes, features)).astype(np.float32)
        bias = self.const(self.rng.normal(0, 0.1, classes).astype(np.float32))
        return self.node("Gemm", [x, self.const(w, "fc"), bias], transB=1)

    def model(self, output: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "net", [self.input],
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        return onnx.shape_inference.infer_shapes(model)


def resnet18_shaped(seed: int = 0, size: int = 224, classes: int = 1000,
                    channel_bank: list[np.ndarray] | None = None) -> onnx.ModelProto:
    """ResNet-18's layer shapes: a 7x7 stride-2 stem, 3x3 max pooling, four stages of two basic blocks (64, 128,
    256, 512 channels, 1x1 stride-2 downsampling), global average pooling and a fully connected layer; conv
    weights normal, or trained-like from ``channel_bank`` (GraphBuilder)."""
    b = GraphBuilder(seed, 3, size, channel_bank=channel_bank)
    x = b.node("Relu", [b.conv("image", 3, 64, kernel=7, stride=2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.node("Relu", [b.conv(x, channels, width, stride=stride)])
            y = b.conv(y, width, width)
            shortcut = x if stride == 1 and channels == width else b.conv(x, channels, width, kernel=1, stride=stride)
            x = b.node("Relu", [b.node("Add", [y, shortcut])])
            channels = width
    return b.model(b.fc(b.node("Flatten", [b.node("GlobalAveragePool", [x])]), channels, classes))


# MobileNetV3-Large's bottlenecks (Howard et al. 2019, table 1): kernel, expansion, output channels,
# squeeze-excite, hard-swish (else ReLU), stride.
MOBILENETV3_LARGE = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
                     (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
                     (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
                     (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
                     (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1))


def mobilenetv3_shaped(seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """MobileNetV3-Large's layer shapes: a hard-swish stem, the fifteen inverted-residual bottlenecks
    (depthwise 3x3 and 5x5, squeeze-excite gates of global average pooling, ReLU and hard-sigmoid), a 960-channel
    1x1 conv, global average pooling, a 1280-wide hard-swish layer and the classifier."""
    b = GraphBuilder(seed, 3, size)
    x, channels = b.node("HardSwish", [b.conv("image", 3, 16, stride=2)]), 16
    for kernel, expanded, width, excite, hard_swish, stride in MOBILENETV3_LARGE:
        activation = "HardSwish" if hard_swish else "Relu"
        y = b.node(activation, [b.conv(x, channels, expanded, kernel=1)]) if expanded != channels else x
        y = b.node(activation, [b.conv(y, expanded, expanded, kernel=kernel, stride=stride, groups=expanded)])
        if excite:
            squeezed = -(-expanded // 4 // 8) * 8
            gate = b.node("Relu", [b.conv(b.node("GlobalAveragePool", [y]), expanded, squeezed, kernel=1, bn=False)])
            gate = b.node("HardSigmoid", [b.conv(gate, squeezed, expanded, kernel=1, bn=False)], alpha=1 / 6, beta=0.5)
            y = b.node("Mul", [y, gate])
        y = b.conv(y, expanded, width, kernel=1)
        x, channels = (b.node("Add", [x, y]) if stride == 1 and channels == width else y), width
    x = b.node("GlobalAveragePool", [b.node("HardSwish", [b.conv(x, channels, 960, kernel=1)])])
    x = b.node("HardSwish", [b.conv(x, 960, 1280, kernel=1, bn=False)])
    return b.model(b.fc(b.node("Flatten", [x]), 1280, classes))


def mobilenet_block_net(seed: int = 0, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    """One MobileNetV3 bottleneck as a whole network, for the RTL's tests: a hard-swish stem, a 1x1 expansion, a
    depthwise 3x3, a squeeze-excite gate (global average pooling, ReLU, hard-sigmoid, Mul), a 1x1 projection with
    a residual Add, a hard-swish 1x1 head, global average pooling, the classifier and a softmax."""
    b = GraphBuilder(seed, 3, size)
    x = b.node("HardSwish", [b.conv("image", 3, 16, stride=2)])
    y = b.node("HardSwish", [b.conv(x, 16, 32, kernel=1)])
    y = b.node("HardSwish", [b.conv(y, 32, 32, kernel=3, groups=32)])
    gate = b.node("Relu", [b.conv(b.node("GlobalAveragePool", [y]), 32, 8, kernel=1, bn=False)])
    gate = b.node("HardSigmoid", [b.conv(gate, 8, 32, kernel=1, bn=False)], alpha=1 / 6, beta=0.5)
    x = b.node("Add", [x, b.conv(b.node("Mul", [y, gate]), 32, 16, kernel=1)])
    x = b.node("GlobalAveragePool", [b.node("HardSwish", [b.conv(x, 16, 64, kernel=1)])])
    return b.model(b.node("Softmax", [b.fc(b.node("Flatten", [x]), 64, classes)], axis=1))
