"""The quantizer: a normalized float graph and its calibration statistics -> a :class:`~aipu.compiler.qir.QModel`.

The Zhouyi whitepaper's integer rules per operator (§3.3, §4), in this contract's conventions (docs/arithmetic.md D1:
real = s * (q - zp)); docs/compiler.md §3 lists every choice with the source clause it resolves:

* activations per tensor, asymmetric by default (uint8 where the range is non-negative, else int8), or
  symmetric (zp 0); the range of each tensor by the calibration method, widened to contain 0 so that zero
  (padding) is exact;
* weights int8, symmetric in the restricted range [-127, 127] (whitepaper §2.2.2), per output channel or per
  tensor; bias int32 at scale s_x * s_w; requant M / 2^N ~ s_x * s_w / s_y per channel (D8, D14);
* a Relu, Clip or Leaky ReLU / PReLU (slopes > 0) right after a Conv or Gemm is fused into its requantizer
  (D10, D11), a Relu or Clip after Add/Sub/Mul into the eltwise unit's clamp; any other activation
  function, and one that cannot be fused, becomes an 8-bit table built by enumerating every input
  (whitepaper §3.3.2.2, exact for 8-bit inputs);
* pooling, reshapes and transposes keep their input's quantization (whitepaper §4.43); Add/Sub/Mul take per-input
  multipliers (D18), Concat requantizes each input to the output's scale (D19);
* ``int16``: chosen tensors int16, symmetric (D21), read by interpolated tables, pooling, reshapes and the
  outputs; a MAC, element-wise or softmax operator reading one is refused (their units read 8 bits);
* ``activations="int4"``: conv outputs that only INT4-weight convs read are INT4 (T/AI 115.1-2021 §7.2.4.3,
  compiler/activation_formats.py);
* ``scheme="pow2"``: the shift-quantization patent's power-of-two scheme instead (docs/compiler.md §3.1):
  scales 2^-e, 7-bit weights with one exponent per layer, convolutions requantized by a floor shift.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from aipu.compiler.activation_formats import Int4Outputs
from aipu.compiler.activation_functions import TABLE_OPS, activation_functions
from aipu.compiler.calibrate import TensorStats, choose_range, output_determining
from aipu.compiler.graph import Graph, Node
from aipu.compiler.lowering.conv_circulant import check_circulant
from aipu.compiler.normalize import conv_form, pad_widths, softmax_axes, softmax_rows_consecutive
from aipu.compiler.quant_options import QuantOptions
from aipu.compiler.qir import (QConcat, QConv, QEltwise, QLayout, QLut, QModel, QPool, QSoftmax, QTensor, Requant,
                               summed_planes)
from aipu.compiler.resize import Separable, linear_form, nearest_gather
from aipu.compiler.slicing import slice_gathers
from aipu.compiler.weight_formats import LayerFormats, code_max, quantized_weights
from aipu.quant.fixed_point import non_overflow_position
from aipu.sim import golden
from aipu.sim.machine.arch import (ACC_BITS, BIAS_BITS, BIAS_DTYPE, LUT16_INPUT_BITS, MULTIPLIER_BITS, SHIFT_MAX,
                                   SOFTMAX_SHIFT_MAX, bit_range)
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import KERNEL_BITS

_WEIGHT_MAX = 127                 # restricted symmetric int8 range (whitepaper §2.2.2): -128 never used
_INT16_MAX = 32767                # int16 activations: symmetric, -32768 never used
_ELTWISE_OPERANDS = "the element-wise unit reads 8-bit operands (ELTWISE a_type, b_type)"
LUT16_TABLE_BITS = 9              # an int16 input's table: 2^9 + 1 entries over the whole int16 range
_FUSABLE = ("Relu", "Clip", "LeakyRelu", "PRelu")
LAYOUT_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
_ELTWISE = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "mul"}


class Quantizer:
    """The whitepaper's per-operator integer rules; each computed tensor's quantization from ``activation`` (calibrated
    here; given by the model for a pre-quantized one, compiler/prequantized.py)."""

    def __init__(self, graph: Graph, stats: dict[str, TensorStats], options: QuantOptions):
        self.graph, self.stats, self.options = graph, stats, options
        self.tensors: dict[str, QTensor] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.ops: list = []
        self.notes: list[str] = []
        self.consumers = graph.consumers()
        self.functions = activation_functions()
        self.full_range = output_determining(graph) | set(options.full_range)
        self.weight_formats = LayerFormats(options.weights or ("pow2" if options.scheme == "pow2" else "int8"),
                                           dict(options.layer_weights))
        self.int4_outputs = Int4Outputs(graph, options)

    # --- tensors -------------------------------------------------------------------------------------
    def activation(self, name: str, shape: tuple[int, ...] | None = None) -> QTensor:
        """The quantization of a computed tensor from its calibrated range."""
        stats = self.stats.get(name)
        if stats is None or stats.count == 0:
            raise InputError(f"tensor {name!r}", "no statistics", "calibrated (it is computed by the graph)")
        options = self.options
        full = name in self.full_range                         # a clipped output is a wrong answer
        method = "extrema" if full else options.method
        low, high = choose_range(stats, method, n_std=options.n_std, percentile=options.percentile,
                                 momentum=options.momentum)
        return self._fit(name, shape or self.graph.shapes[name], min(low, 0.0), max(high, 0.0))

    def _fit(self, name: str, shape: tuple[int, ...], low: float, high: float) -> QTensor:
        """uint8 with zero point 0 for a non-negative range; else int8, asymmetric (zero point placing ``low``
        at -128) or symmetric (zero point 0, [-127, 127] as the weights); under ``activations="pow2"`` int8 at
        the power-of-two scale of T/AI 115.1-2021 §7.2.4.2 (zero point 0). A range of one point gets scale 1
        (Zhouyi whitepaper §2.2)."""
        amax = max(-low, high)
        if name in self.options.int16:          # symmetric over [-32767, 32767] (D21), power of two under pow2
            if self.options.scheme == "pow2":
                scale = 2.0 ** -golden.pow2_scale_exponent(amax, _INT16_MAX) if amax > 0 else 1.0
            elif self.options.activations == "pow2":
                scale = 2.0 ** -non_overflow_position(np.array([low, high]), 16)
            else:
                scale = amax / _INT16_MAX if amax > 0 else 1.0
            return QTensor(name, tuple(shape), np.dtype(np.int16), float(scale), 0)
        if self.options.scheme == "pow2":       # patent formula (1): 2^-e, e = round(log2(QUAN / abs_max))
            exponent = golden.pow2_scale_exponent(amax, golden.FEATURE_QUAN) if amax > 0 else 0
            return QTensor(name, tuple(shape), np.dtype(np.int8), 2.0 ** -exponent, 0)
        if self.options.activations == "pow2":  # T/AI 115.1-2021 §7.2.4.2: 2^-p, eq. (16)'s non-overflow p
            position = non_overflow_position(np.array([low, high]), 8)
            return QTensor(name, tuple(shape), np.dtype(np.int8), 2.0 ** -position, 0)
        if low >= 0:
            dtype, scale, zero_point = np.dtype(np.uint8), high / 255, 0
        elif self.options.symmetric_activations:
            dtype, scale, zero_point = np.dtype(np.int8), max(-low, high) / _WEIGHT_MAX, 0
        else:
            dtype, scale = np.dtype(np.int8), (high - low) / 255
            zero_point = int(np.clip(-128 - golden.round_half_away(low / scale), -128, 127))
        return QTensor(name, tuple(shape), dtype, float(scale) if scale > 0 else 1.0, zero_point)

    def same_as(self, source: str, name: str) -> QTensor:
        spec = self.tensors[source]
        return QTensor(name, self.graph.shapes[name], spec.dtype, spec.scale, spec.zero_point)

    def constant_operand(self, name: str, value: np.ndarray) -> QTensor:
        """A constant read by an eltwise operator: int8, symmetric, its own scale."""
        value = np.asarray(value, np.float64)
        amax = float(np.abs(value).max(initial=0.0))
        spec = QTensor(name, value.shape, np.dtype(np.int8), amax / _WEIGHT_MAX if amax else 1.0, 0)
        self.constants[name] = spec.quantize(value)
        return spec

    # --- operators -----------------------------------------------------------------------------------
    def run(self) -> QModel:
        fused: set[str] = set()
        for name in self.graph.inputs:
            self.tensors[name] = self.activation(name)
        for node in self.graph.nodes:
            if node.name in fused:
                continue
            try:
                self.lower(node, fused)
            except (ValueError, OverflowError) as exc:
                if isinstance(exc, InputError):
                    raise exc.within(f"node {node.name!r} ({node.op})")
                raise InputError(f"node {node.name!r} ({node.op})", "quantization", str(exc)) from exc
        self.notes += self.weight_formats.notes() + self.int4_outputs.notes()
        convs = {op.name for op in self.ops if isinstance(op, QConv)}
        self.weight_formats.check_names(convs)
        for name, _, _ in self.options.circulant:
            if name not in convs:
                raise InputError("circulant layer", name, "a Conv or Gemm of the model: " + ", ".join(sorted(convs)))
        missing = [name for name in self.options.int16 if name not in self.tensors]
        if missing:
            raise InputError("--int16", missing[0], "a tensor the quantized model computes (a fused activation's "
                             "input is not: name the activation's output)")
        return QModel(self.tensors, self.ops, self.graph.inputs, self.graph.outputs, self.constants, self.notes)

    def lower(self, node: Node, fused: set[str]) -> None:
        op = node.op
        if op in ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization") or (
                op == "PRelu" and self._slope(node).size > 1):
            self.mac(node, fused)
        elif op in TABLE_OPS or op == "Clip":
            self.table(node)
        elif op == "Softmax":
            self.softmax(node)
        elif op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
            self.pool(node)
        elif op in _ELTWISE:
            self.eltwise(node, fused)
        elif op == "Concat":
            self.concat(node)
        elif op == "Resize" and node.attrs.get("mode", b"nearest") in (b"linear", "linear"):
            self.linear_resize(node)
        elif op == "Pad":
            self.pad(node)
        elif op in ("Slice", "Split"):
            for output, gather in slice_gathers(node, self.graph):
                self.tensors[output] = self.same_as(node.inputs[0], output)
                name = node.name if output == node.outputs[0] else f"{node.name}:{output}"
                self.ops.append(QLayout(name, node.inputs[0], output, gather=gather))
        elif op in LAYOUT_OPS or op == "Resize":
            self.tensors[node.outputs[0]] = self.same_as(node.inputs[0], node.outputs[0])
            permutation = tuple(node.attrs.get("perm", range(len(self.graph.shapes[node.inputs[0]]))[::-1]))
            self.ops.append(QLayout(node.name, node.inputs[0], node.outputs[0],
                                    permutation if op == "Transpose" else None,
                                    nearest_gather(node, self.graph) if op == "Resize" else None))
        else:
            raise InputError("operator", op, "not handled by the quantizer")

    def mac(self, node: Node, fused: set[str]) -> None:
        x = node.inputs[0]
        weight, bias, conv = self._mac_operands(node)
        activation = node if node.op == "PRelu" else self._fusable_activation(node)
        y = activation.outputs[0] if activation else node.outputs[0]
        if activation and activation is not node:
            fused.add(activation.name)
        slope = self._slope(activation) if activation else None
        if slope is not None and np.any(slope <= 0):
            raise InputError("slope", float(slope.min()), "> 0 per channel (the requantizer's second multiplier "
                             "is unsigned, docs/arithmetic.md §4.2)")
        x_spec = self._mac_input(x)
        y_spec = self.int4_outputs.of(node, y, self.stats, self.full_range) or self.activation(y)
        self.tensors[y] = y_spec
        weight_format = self.weight_formats.of(node.name, weight.shape, conv.get("groups", 1),
                                               node.op == "ConvTranspose", leaky=slope is not None)
        floor = self._weight_scale_floor(node, bias, x_spec, y_spec, weight, code_max(weight_format))
        weights, circulant = self._mac_weights(node, weight, floor, weight_format, conv.get("groups", 1))
        scale = x_spec.scale * weights.scale / y_spec.scale
        bias_scaled = bias / (x_spec.scale * weights.scale)
        low, high = bit_range(BIAS_BITS, signed=True)
        outside = np.flatnonzero(~((bias_scaled > low - 0.5) & (bias_scaled < high + 0.5)))  # rounds out of int32
        if outside.size:             # only under the power-of-two scheme, whose weight scale is the layer's
            channel = int(outside[0])
            raise InputError(f"bias of output channel {channel}", float(bias[channel]),
                             f"|bias / (s_x * s_w)| within int{BIAS_BITS}")
        bias_q = golden.round_half_away(bias_scaled)
        requant = self._requant(scale, y_spec, activation)
        if weights.second is not None:
            requant = dual_requant(requant, scale, x_spec.scale * weights.second_scale / y_spec.scale)
            check_accumulator(weights.second, x_spec, 0)
        check_accumulator(weights.codes, x_spec, 0)
        self.ops.append(QConv(node.name, x, y, weights.codes, bias_q.astype(BIAS_DTYPE), requant, **conv,
                              weight_format=weight_format, codebook=weights.codebook, w_second=weights.second,
                              circulant=circulant))

    def _mac_weights(self, node: Node, weight, floor, weight_format: str, groups: int):
        """(the quantized weights, (L, signs) or None). A layer block-circulant by ``options.circulant`` or by the
        model file's records (Graph.circulant; the options win) takes one scale per block row of L filters, so that
        its int8 codes stay circulant (docs/structured.md S-4), and is checked for LOAD's expansion: a layer the
        options name is refused where LOAD cannot expand it (InputError), one the file names is compiled dense,
        with a note."""
        named = {name: (size, signs) for name, size, signs in self.options.circulant}
        size, signs = named.get(node.name) or self.graph.circulant.get(node.name) or (None, None)
        if size is not None:
            if node.name in named and (node.op not in ("Conv", "Gemm") or weight_format != "int8"):
                raise InputError(f"circulant layer {node.name!r}", node.op, "a Conv or Gemm with int8 weights")
            circulant = int(size), np.asarray(signs, np.int64)
            shared = np.repeat(floor.reshape(-1, size).max(axis=1), size) if floor.size % size == 0 else floor
            weights = quantized_weights(weight, shared, weight_format, self.options.per_channel_weights)
            try:
                check_circulant(weights.codes, groups, *circulant, weight_format == "int8",
                                weights.codebook is None and weights.second is None)
                return weights, circulant
            except InputError as error:
                if node.name in named:
                    raise
                self.notes.append(f"layer {node.name!r}: block-circulant in {self.graph.source}, compiled dense: "
                                  f"{error}")
        return quantized_weights(weight, floor, weight_format, self.options.per_channel_weights), None

    def _eight_bit(self, name: str, why: str) -> QTensor:
        """The quantization of an input that must be 8-bit (``why``: the unit's limit) where --int16 made it not."""
        spec = self.tensors[name]
        if spec.dtype.itemsize != 1:
            raise InputError(f"input {name!r}", spec.dtype.name, f"8-bit: {why}; give --int16 to tensors that "
                             "tables, pooling, reshapes or the model's outputs read")
        return spec

    def _mac_input(self, name: str) -> QTensor:
        return self._eight_bit(name, "the MAC array multiplies 8-bit operands (docs/arithmetic.md §3.1)")

    def _mac_operands(self, node: Node) -> tuple[np.ndarray, np.ndarray, dict]:
        """(weights [K, C/G, KH, KW] float64, bias [K] float64, conv geometry) of a MAC node."""
        constants = self.graph.constants
        if node.op == "Conv":
            weight = constants[node.inputs[1]].astype(np.float64)
            pads = tuple(node.attrs.get("pads", (0, 0, 0, 0)))
            geometry = dict(stride=tuple(node.attrs.get("strides", (1, 1))), padding=pads,
                            dilation=tuple(node.attrs.get("dilations", (1, 1))), groups=int(node.attrs.get("group", 1)))
            bias = constants[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else np.zeros(weight.shape[0])
            return weight, bias.astype(np.float64), geometry
        if node.op == "ConvTranspose":
            return conv_form(node, constants)
        if node.op == "PRelu":                       # per-channel slopes: an identity depthwise 1x1 conv whose
            channels = self._slope(node).size          # requantizer applies them (D11)
            return np.ones((channels, 1, 1, 1)), np.zeros(channels), dict(groups=channels)
        if node.op == "BatchNormalization":          # not after a conv: a depthwise 1x1 conv
            scale, beta, mean, var = (constants[name].astype(np.float64) for name in node.inputs[1:5])
            factor = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
            channels = factor.size
            return factor.reshape(channels, 1, 1, 1), beta - mean * factor, dict(groups=channels)
        matrix = constants[node.inputs[1]].astype(np.float64)
        if node.op == "Gemm":
            matrix = matrix.T if node.attrs.get("transB", 0) else matrix
            matrix = matrix * float(node.attrs.get("alpha", 1.0))
            bias = (constants[node.inputs[2]].astype(np.float64) * float(node.attrs.get("beta", 1.0))
                    if len(node.inputs) > 2 and node.inputs[2] else np.zeros(matrix.shape[1]))
        else:
            bias = np.zeros(matrix.shape[1])
        if len(self.graph.shapes[node.inputs[0]]) != 2:
            raise InputError("input rank", len(self.graph.shapes[node.inputs[0]]), "2 ([batch, features])")
        bias = np.broadcast_to(bias, (matrix.shape[1],)) if bias.size in (1, matrix.shape[1]) else bias
        if bias.shape != (matrix.shape[1],):
            raise InputError("bias shape", list(bias.shape), f"one value per output ({matrix.shape[1]})")
        return matrix.T.reshape(matrix.shape[1], matrix.shape[0], 1, 1), np.array(bias), {}

    def _fusable_activation(self, node: Node) -> Node | None:
        users = self.consumers.get(node.outputs[0], [])
        if len(users) != 1 or node.outputs[0] in self.graph.outputs or users[0].op not in _FUSABLE:
            return None
        activation = users[0]
        slope = self._slope(activation)
        return activation if slope is None or np.all(slope > 0) else None

    def _slope(self, activation: Node) -> np.ndarray | None:
        if activation.op == "LeakyRelu":
            return np.array(float(activation.attrs.get("alpha", 0.01)))
        if activation.op == "PRelu":
            return self.graph.constants[activation.inputs[1]].astype(np.float64).reshape(-1)
        return None

    def _weight_scale_floor(self, node: Node, bias: np.ndarray, x: QTensor, y: QTensor, weight: np.ndarray,
                            code_max: int) -> np.ndarray:
        """The least weight scale of each output channel: the bias must fit int32 as round(b / (s_x·s_w)), and
        the requantizer's s_x·s_w / s_y must lie where M / 2^N keeps its precision. Only a channel whose weights
        are (nearly) all zero reaches it (a dead channel's 1e-34 weights gave s_w = 1e-36); such channels are
        named in the model's notes."""
        _, high = bit_range(BIAS_BITS, signed=True)
        precise = y.scale * 2.0 ** (MULTIPLIER_BITS - 1 - SHIFT_MAX) / x.scale
        floor = np.maximum(np.abs(bias) / (x.scale * (high - 1)), precise)
        amax = np.abs(weight.reshape(weight.shape[0], -1)).max(axis=1)
        raised = np.flatnonzero((amax if self.options.per_channel_weights else amax.max()) / code_max < floor)
        if raised.size:
            shown = ", ".join(map(str, raised[:8])) + (", ..." if raised.size > 8 else "")
            self.notes.append(f"layer {node.name!r}: the weight scale of output channel{'s' * (raised.size > 1)} "
                              f"{shown} ({raised.size} of {weight.shape[0]}) was raised so that the bias fits "
                              f"int{BIAS_BITS} and the requantizer keeps its precision (weights that small round "
                              "to zero)")
        return floor

    def _requant(self, scale: np.ndarray, y: QTensor, activation: Node | None) -> Requant:
        negative = {}
        if activation is not None and activation.op in ("LeakyRelu", "PRelu"):
            slope = np.broadcast_to(self._slope(activation), scale.shape)
            pair = golden.quantize_multiplier(scale * slope)
            negative = {"negative_multiplier": pair[0], "negative_shift": pair[1]}
        if self.options.scheme == "pow2" and not negative:     # patent S620-S640: M = 1, N = s, floor (§5)
            exponents = -np.log2(scale)
            shifts = np.rint(exponents).astype(np.int64)
            if not np.array_equal(exponents, shifts):
                raise InputError("requant scale", float(scale.flat[0]), "a power of two (scheme pow2)")
            pairs = [golden.pow2_requant_params(int(s), 0, 0) for s in shifts]
            return Requant(np.array([p["multiplier"] for p in pairs]), np.array([p["shift"] for p in pairs]),
                           y.zero_point, *self._clamp(y, activation), "floor")
        multiplier, shift = golden.quantize_multiplier(scale)
        return Requant(np.asarray(multiplier), np.asarray(shift), y.zero_point, *self._clamp(y, activation),
                       self.options.rounding, **negative)

    def _clamp(self, y: QTensor, activation: Node | None) -> tuple[int, int]:
        """The output clamp [qmin, qmax]: the type's range (INT4's -8..7), narrowed by a fused Relu or Clip (D10)."""
        qmin, qmax = y.limits
        if self.options.scheme == "pow2":       # D20: features within +-QUAN
            qmin, qmax = max(qmin, -golden.FEATURE_QUAN), min(qmax, golden.FEATURE_QUAN)
        if activation is not None and activation.op == "Relu":
            qmin = max(qmin, y.zero_point)
        elif activation is not None and activation.op == "Clip":
            low, high = self._clip_bounds(activation)
            if low is not None:
                qmin = max(qmin, y.zero_point + _steps(low, y.scale))
            if high is not None:
                qmax = min(qmax, y.zero_point + _steps(high, y.scale))
        return qmin, qmax

    def _clip_bounds(self, node: Node) -> tuple[float | None, float | None]:
        """Clip's optional min and max inputs (constants, checked by normalize)."""
        names = [*node.inputs[1:3], "", ""][:2]
        low, high = (float(self.graph.constants[name]) if name else None for name in names)
        return low, high

    def table(self, node: Node) -> None:
        x, y = node.inputs[0], node.outputs[0]
        x_spec, y_spec = self.tensors[x], self.activation(y)
        self.tensors[y] = y_spec
        if node.op == "Clip":
            low, high = self._clip_bounds(node)
            bounds = (-np.inf if low is None else low, np.inf if high is None else high)

            def function(values, attrs):
                return np.clip(values, *bounds)
        else:
            function = self.functions[node.op]
        attrs = {**node.attrs, "slope": float(self._slope(node)[0])} if node.op == "PRelu" else node.attrs
        scales = dict(in_scale=x_spec.scale, in_zero_point=x_spec.zero_point, out_scale=y_spec.scale,
                      out_zero_point=y_spec.zero_point, out_dtype=y_spec.dtype)
        if x_spec.dtype.itemsize == 1:
            table = golden.build_lut8(lambda values: function(values, attrs), in_dtype=x_spec.dtype, **scales)
            self.ops.append(QLut(node.name, x, y, table))
            return
        table = golden.build_lut16(lambda values: function(values, attrs), index_bits=LUT16_TABLE_BITS, **scales)
        self.ops.append(QLut(node.name, x, y, table, index_shift=LUT16_INPUT_BITS - LUT16_TABLE_BITS))

    def pool(self, node: Node) -> None:
        x, y = node.inputs[0], node.outputs[0]
        self.tensors[y] = self.same_as(x, y)
        if node.op == "GlobalAveragePool":
            self.global_average(node.name, self.tensors[x], self.tensors[y])
            return
        kernel = tuple(node.attrs["kernel_shape"])
        stride = tuple(node.attrs.get("strides", (1, 1)))
        dilation = tuple(node.attrs.get("dilations", (1, 1)))
        top, left, bottom, right = node.attrs.get("pads", (0, 0, 0, 0))
        # ceil_mode: the last window may start inside the input and run past the padding; extend the padding
        # at the end to reach the output size the graph states (extended taps are never counted or chosen)
        (in_h, in_w), (out_h, out_w) = self.graph.shapes[x][2:], self.graph.shapes[y][2:]
        spans = [(taps - 1) * step + 1 for taps, step in zip(kernel, dilation)]
        bottom += max(0, (out_h - 1) * stride[0] + spans[0] - (in_h + top + bottom))
        right += max(0, (out_w - 1) * stride[1] + spans[1] - (in_w + left + right))
        if bottom >= spans[0] or right >= spans[1]:
            raise InputError("ceil_mode", 1, f"0 where the last window starts in the end padding (it needs end "
                             f"padding {bottom, right} for windows of {spans}; the pooling unit pads less than a "
                             "window)")
        include_pad = bool(node.attrs.get("count_include_pad", 0))
        if include_pad and node.attrs.get("ceil_mode", 0):
            raise InputError("count_include_pad with ceil_mode", 1, "not supported together")
        self.ops.append(QPool(node.name, x, y, "max" if node.op == "MaxPool" else "avg", kernel, stride,
                              (top, left, bottom, right), dilation, include_pad, self.options.rounding))

    def global_average(self, name: str, x: QTensor, y: QTensor) -> None:
        """Each plane's average at the input's scale: one POOL window (at most 15 a side), else the planes
        summed by a 1x1 conv of ones and divided by the requantizer's M / 2^N."""
        h, w = x.shape[2:]
        if max(h, w) < 1 << KERNEL_BITS:
            self.ops.append(QPool(name, x.name, y.name, "global_avg", rounding=self.options.rounding))
            return
        ones = np.ones((1, h * w, 1, 1), np.int8)
        multiplier, shift = golden.quantize_multiplier(np.array([1.0 / (h * w)]))
        requant = Requant(multiplier, shift, y.zero_point, *self._clamp(y, None), self.options.rounding)

        def sum_planes(planes: QTensor, sums: QTensor) -> None:
            check_accumulator(ones, planes, 0)
            self.ops.append(QConv(name, planes.name, sums.name, ones, np.zeros(1, BIAS_DTYPE), requant))

        summed_planes(self.tensors, self.ops, name, x, y, sum_planes)

    def eltwise(self, node: Node, fused: set[str]) -> None:
        a, b = node.inputs[0], node.inputs[1]
        activation = self._fusable_activation(node)
        if activation is not None and activation.op not in ("Relu", "Clip"):
            activation = None                  # the eltwise unit has a clamp, not a second multiplier
        if activation is not None:
            fused.add(activation.name)
        y = activation.outputs[0] if activation else node.outputs[0]
        op = _ELTWISE[node.op]
        constants = dict(self.graph.constants)
        if node.op == "Div":              # by a constant only (normalize checks): times its reciprocal
            b = f"{node.name}/reciprocal"
            constants[b] = 1.0 / constants[node.inputs[1]].astype(np.float64)
        rank = len(self.graph.shapes[node.outputs[0]])
        specs = []
        for name in (a, b):
            if name not in self.tensors:    # a constant, with its broadcast's leading ones written out
                value = np.asarray(constants[name])
                value = value.reshape((1,) * (rank - value.ndim) + value.shape)
                self.tensors[name] = self.constant_operand(name, value)
            specs.append(self._eight_bit(name, _ELTWISE_OPERANDS))
        y_spec = self.activation(y)
        self.tensors[y] = y_spec
        params = golden.eltwise_params(op, specs[0].scale, specs[1].scale, y_spec.scale)
        self.ops.append(QEltwise(node.name, a, b, y, op, params["multiplier"], params["shift"],
                                 *self._clamp(y_spec, activation), self.options.rounding))

    def pad(self, node: Node) -> None:
        """Any Pad the front end keeps (not folded into convolutions) as a gather: np.pad of the input's
        indices in the node's mode, a constant's positions filled with its quantized value (refused when that
        value lies outside the input's range: the output keeps the input's quantization)."""
        x, y = node.inputs[0], node.outputs[0]
        spec = self.tensors[x]
        self.tensors[y] = self.same_as(x, y)
        mode = node.attrs.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        value = float(self.graph.constants[node.inputs[2]]) if len(node.inputs) > 2 and node.inputs[2] else 0.0
        code = _steps(value, spec.scale) + spec.zero_point
        info = np.iinfo(spec.dtype)
        if mode == "constant" and not info.min <= code <= info.max:
            raise InputError("pad value", value, f"within the input's quantized range "
                             f"[{spec.dequantize(np.array(info.min))}, {spec.dequantize(np.array(info.max))}]")
        widths = pad_widths(node, self.graph)
        indices = np.arange(int(np.prod(spec.shape))).reshape(spec.shape)
        grown = [(max(0, before), max(0, after)) for before, after in widths]
        padded = (np.pad(indices, grown, constant_values=-1) if mode == "constant" else
                  np.pad(indices, grown, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode]))
        crop = tuple(slice(max(0, -before), size - max(0, -after))
                     for (before, after), size in zip(widths, padded.shape))
        self.ops.append(QLayout(node.name, x, y, gather=padded[crop].reshape(-1), fill=code if mode == "constant"
                                else 0))

    def softmax(self, node: Node) -> None:
        """The whitepaper's softmax (§4.66, docs/arithmetic.md §6.4): the exp table for the input's scale, the output's
        calibrated range (within [0, 1]), 1/s_y as M / 2^N."""
        x, y = node.inputs[0], node.outputs[0]
        x_spec, y_spec = self.tensors[x], self.activation(y)
        self._eight_bit(x, "the SOFTMAX exp table takes 8-bit differences (docs/arithmetic.md §6.4)")
        self.tensors[y] = y_spec
        multiplier, shift = golden.quantize_multiplier(1.0 / y_spec.scale)
        if shift > SOFTMAX_SHIFT_MAX:
            raise InputError("softmax output scale", y_spec.scale, f"1/scale representable as M / 2^N with N <= "
                             f"{SOFTMAX_SHIFT_MAX}")
        info = np.iinfo(y_spec.dtype)
        shape, axes = self.graph.shapes[x], softmax_axes(node, self.graph)
        table = golden.build_softmax_table(x_spec.scale)
        stage = (int(multiplier), int(shift), int(info.min), int(info.max))
        if softmax_rows_consecutive(shape, axes):
            self.ops.append(QSoftmax(node.name, x, y, axes, table, *stage))
            return
        # gathered to [1, row, rows, 1] (each row along the channels of one pixel), the result gathered back
        rows_x, rows_y = f"{y}/rows_in", f"{y}/rows_out"
        order = [*(axis for axis in range(len(shape)) if axis not in axes), *axes]
        length = int(np.prod([shape[axis] for axis in axes]))
        moved = np.arange(int(np.prod(shape))).reshape(shape).transpose(order).reshape(-1, length)
        rows = moved.T[None, :, :, None]          # element i of the gathered tensor is input element rows[i]
        self.tensors[rows_x] = replace(x_spec, name=rows_x, shape=rows.shape)
        self.tensors[rows_y] = replace(y_spec, name=rows_y, shape=rows.shape)
        self.ops += [QLayout(f"{node.name}/rows", x, rows_x, gather=rows.reshape(-1)),
                     QSoftmax(node.name, rows_x, rows_y, (1,), table, *stage),
                     QLayout(f"{node.name}/back", rows_y, y, gather=np.argsort(rows.reshape(-1)))]

    def linear_resize(self, node: Node) -> None:
        """A linear Resize (compiler/resize.py): the edge gather, then a depthwise transposed conv whose
        requantizer divides by the weights' denominator; or, without that form, one 1x1 conv per axis. The
        output keeps the input's quantization."""
        form = linear_form(node, self.graph)
        if isinstance(form, Separable):
            self._separable_resize(node, form)
            return
        x, y = node.inputs[0], node.outputs[0]
        n, c, h, w = self.graph.shapes[x]
        edges = f"{y}/edges"
        self.tensors[edges] = replace(self.tensors[x], name=edges, shape=(n, c, h + 2, w + 2))
        self.tensors[y] = self.same_as(x, y)
        self.ops.append(QLayout(f"{node.name}/edges", x, edges, gather=form.edges))
        attrs = dict(strides=list(form.strides), pads=list(form.pads), group=c)
        weights, _, geometry = conv_form(Node(node.name, "ConvTranspose", (edges, "kernel"), (y,), attrs),
                                         {"kernel": form.kernel})
        multiplier, shift = golden.quantize_multiplier(np.full(c, 1.0 / form.denominator))
        info = np.iinfo(self.tensors[x].dtype)
        requant = Requant(multiplier, shift, self.tensors[x].zero_point, int(info.min), int(info.max),
                          self.options.rounding)
        w_q = weights.astype(np.int8)
        self._mac_input(x)
        check_accumulator(w_q, self.tensors[edges], 0)
        self.ops.append(QConv(node.name, edges, y, w_q, np.zeros(c, BIAS_DTYPE), requant, **geometry))

    def _separable_resize(self, node: Node, form: Separable) -> None:
        """Height, then width: each axis is gathered into the channel position, resized by a 1x1 conv with
        the axis's resize matrix (its requantizer dividing by the denominator), and the last gather restores
        NCHW. Every intermediate tensor keeps the input's quantization."""
        x, y = node.inputs[0], node.outputs[0]
        self._mac_input(x)
        n, c, h, w = self.graph.shapes[x]
        out_h, out_w = self.graph.shapes[y][2:]
        shapes = [(n, c, h, w), (n, h, c, w), (n, out_h, c, w), (n, w, c, out_h), (n, out_w, c, out_h),
                  (n, c, out_h, out_w)]
        moves = {1: (0, 2, 1, 3), 3: (0, 3, 2, 1), 5: (0, 2, 3, 1)}     # the transposes into shapes[1], [3], [5]
        names = [x, *(f"{y}/separable{step}" for step in range(1, 5)), y]
        info = np.iinfo(self.tensors[x].dtype)
        for step in range(1, 6):
            source, target = names[step - 1], names[step]
            self.tensors[target] = replace(self.tensors[x], name=target, shape=shapes[step])
            if step in moves:
                self.ops.append(QLayout(f"{node.name}/transpose{step}", source, target, permutation=moves[step]))
                continue
            numerators, denominator = form.numerators[step // 2 - 1], form.denominators[step // 2 - 1]
            weights = numerators.astype(np.int8)[:, :, None, None]
            multiplier, shift = golden.quantize_multiplier(np.full(len(weights), 1.0 / denominator))
            requant = Requant(multiplier, shift, self.tensors[x].zero_point, int(info.min), int(info.max),
                              self.options.rounding)
            check_accumulator(weights, self.tensors[source], 0)
            self.ops.append(QConv(f"{node.name}/axis{step // 2}", source, target, weights,
                                  np.zeros(len(weights), BIAS_DTYPE), requant))

    def concat(self, node: Node) -> None:
        y = node.outputs[0]
        y_spec = self.activation(y)
        self.tensors[y] = y_spec
        pairs = [golden.quantize_multiplier(self._eight_bit(x, _ELTWISE_OPERANDS).scale / y_spec.scale)
                 for x in node.inputs]
        axis = int(node.attrs["axis"]) % len(self.graph.shapes[y])
        self.ops.append(QConcat(node.name, tuple(node.inputs), y, axis, tuple(m for m, _ in pairs),
                                tuple(n for _, n in pairs), self.options.rounding))


def _steps(value: float, scale: float) -> int:
    """round_half_away(value / scale), the quotient bounded to +-2^40 first: far beyond any integer type the
    result is compared with, and the conversion to int64 stays defined (no numpy warning)."""
    return int(golden.round_half_away(np.clip(value / scale, -2.0 ** 40, 2.0 ** 40)))


def dual_requant(requant: Requant, scale: np.ndarray, second: np.ndarray) -> Requant:
    """``requant`` with dual INT4 planes' multipliers: per channel M ~ scale·2^N and M2 ~ second·2^N at one shift
    N, the least of the two planes' own (docs/arithmetic.md §4.7)."""
    pairs = [golden.quantize_multiplier(np.array([first, other]), shared_shift=True)
             for first, other in zip(scale, second)]
    multipliers, shifts = np.array([m for m, _ in pairs]), np.array([n for _, n in pairs])
    return replace(requant, multiplier=multipliers[:, 0], second_multiplier=multipliers[:, 1], shift=shifts[:, 0])


def check_accumulator(w: np.ndarray, x: QTensor, w_zero_point: int) -> None:
    """Every output channel's sum provably fits the accumulator for any input (docs/arithmetic.md D6)."""
    low, high = golden.accumulator_range(w, x_dtype=x.dtype, x_zero_point=x.zero_point, w_zero_point=w_zero_point)
    acc_min, acc_max = bit_range(ACC_BITS, signed=True)
    if low.min() < acc_min or high.max() > acc_max:
        raise InputError("accumulator bound", int(max(-low.min(), high.max())), f"within int{ACC_BITS} (D6)")


def quantize_graph(graph: Graph, stats: dict[str, TensorStats], options: QuantOptions = QuantOptions()) -> QModel:
    """The quantized model of a normalized, checked float graph (compiler.normalize) and its statistics."""
    try:
        return Quantizer(graph, stats, options).run()
    except InputError as error:
        raise error.within(graph.source) from None


def sqnr_db(reference: np.ndarray, approximation: np.ndarray) -> float:
    """Signal to quantization noise ratio in dB (inf when equal)."""
    reference, approximation = np.asarray(reference, np.float64), np.asarray(approximation, np.float64)
    return sqnr_from_powers(float(np.sum(reference ** 2)), float(np.sum((reference - approximation) ** 2)))


def sqnr_from_powers(signal: float, noise: float) -> float:
    """The SQNR in dB of summed signal and noise powers (inf when there is no noise)."""
    return math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal else -math.inf
