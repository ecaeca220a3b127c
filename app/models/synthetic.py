"""Float CNNs built with onnx.helper (random weights) in the shapes of the networks users bring, for the
compiler's tests and benchmarks: a small graph builder and a ResNet-18-shaped network (224x224, 1000 classes)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Appends nodes and random initializers; names are generated."""

    def __init__(self, seed: int, channels: int, size: int, opset: int = 17):
        self.rng = np.random.default_rng(seed)
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
        w = self.rng.normal(0, np.sqrt(2 / fan_in), (c_out, c_in // groups, kernel, kernel)).astype(np.float32)
        pad = dilation * (kernel // 2)
        y = self.node("Conv", [x, self.const(w, "w"), self.const(self.rng.normal(0, 0.1, c_out).astype(np.float32))],
                      strides=[stride, stride], pads=[pad] * 4, group=groups, dilations=[dilation, dilation])
        if not bn:
            return y
        stats = [self.rng.uniform(0.5, 1.5, c_out), self.rng.normal(0, 0.1, c_out), self.rng.normal(0, 0.1, c_out),
                 self.rng.uniform(0.5, 1.5, c_out)]
        return self.node("BatchNormalization", [y, *(self.const(v.astype(np.float32)) for v in stats)])

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


def resnet18_shaped(seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-18's layer shapes: a 7x7 stride-2 stem, 3x3 max pooling, four stages of two basic blocks (64, 128,
    256, 512 channels, 1x1 stride-2 downsampling), global average pooling and a fully connected layer."""
    b = GraphBuilder(seed, 3, size)
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
