"""The generic operations Quantization_tensor and Dequantization_tensor (T/AI 115.1-2021 Tables 168 and 229):
the method by its code, its parameters as keyword arguments (the standard's kwarg dictionary, named as the
method's record fields), and the method's own output. The staged methods (Q11 bounded ReLU, Q12 scale
alignment) are called directly: their stages are not one operation."""
from __future__ import annotations

from aipu.quant._checks import check_choice
from aipu.quant.clipping import TrainableAlphaQuantization, trainable_alpha_dequantize, trainable_alpha_quantize
from aipu.quant.codebook import CodebookQuantization, codebook_dequantize, codebook_quantize
from aipu.quant.fixed_point import (FixQuantizeActivation, FixQuantizeParameter, fix_dequantize_activation,
                                    fix_dequantize_parameter, fix_quantize_activation, fix_quantize_parameter)
from aipu.quant.granularity import Granularity
from aipu.quant.int4 import Int4QuantizeParameter, int4_quantize_parameter, int4_recon_quantized_parameter
from aipu.quant.int4_activation import (Int4QuantizeActivation, int4_quantize_activation,
                                        int4_recon_quantized_activation)
from aipu.quant.linear import BReluQuantizerParameter, LinearQuantization, linear_dequantize, linear_quantize
from aipu.quant.methods import DMethod, QMethod
from aipu.quant.nonlinear import NonLinearQuantization, nonlinear_dequantize, nonlinear_quantize

_ALL = tuple(Granularity)
_LAYER = (Granularity.LAYER,)
_INT4_WEIGHTS = (Granularity.LAYER, Granularity.CHANNEL)   # FC per layer, conv per kernel: the weight's rank decides


def _with_record(record_type, operation):
    """An operation on (x, record, labels) whose record carries the granularity."""
    return _ALL, lambda x, granularity, labels, kwargs: operation(
        x, record_type(granularity=granularity, **kwargs), labels=labels)


def _fixed(granularities, operation):
    """An operation whose unit the standard fixes: called as operation(x, **kwargs)."""
    return granularities, lambda x, granularity, labels, kwargs: operation(x, **kwargs)


_QUANTIZERS = {
    QMethod.LINEAR: _with_record(LinearQuantization, linear_quantize),
    QMethod.CODEBOOK: _with_record(CodebookQuantization, codebook_quantize),
    QMethod.NON_LINEAR: _with_record(NonLinearQuantization, nonlinear_quantize),
    QMethod.FIXED_POINT_PARAMETER: _fixed(_LAYER, fix_quantize_parameter),
    QMethod.INT4_PARAMETER: _fixed(_INT4_WEIGHTS, int4_quantize_parameter),
    QMethod.BRELU_PARAMETER: _with_record(BReluQuantizerParameter, linear_quantize),
    QMethod.TRAINED_CLIPPING: _with_record(TrainableAlphaQuantization, trainable_alpha_quantize),
    QMethod.FIXED_POINT_ACTIVATION: _fixed(_LAYER, fix_quantize_activation),
    QMethod.INT4_ACTIVATION: _fixed(_LAYER, lambda x, **kwargs: int4_quantize_activation(
        x, Int4QuantizeActivation(**kwargs))),
}

_DEQUANTIZERS = {
    DMethod.LINEAR: _with_record(LinearQuantization, linear_dequantize),
    DMethod.CODEBOOK: _with_record(CodebookQuantization, codebook_dequantize),
    DMethod.NON_LINEAR: (_ALL, lambda x, granularity, labels, kwargs: nonlinear_dequantize(
        x, NonLinearQuantization(granularity=granularity, **{k: v for k, v in kwargs.items() if k != "sign"}),
        kwargs.get("sign"), labels)),
    DMethod.FIXED_POINT_PARAMETER: _fixed(_LAYER, lambda x, b_quantized=None, **kwargs: fix_dequantize_parameter(
        x, b_quantized, FixQuantizeParameter(**kwargs))),
    DMethod.INT4_PARAMETER: _fixed(_INT4_WEIGHTS, lambda x, **kwargs: int4_recon_quantized_parameter(
        x, Int4QuantizeParameter(**kwargs))[0]),
    DMethod.TRAINED_CLIPPING: _with_record(TrainableAlphaQuantization, trainable_alpha_dequantize),
    DMethod.FIXED_POINT_ACTIVATION: _fixed(_LAYER, lambda x, **kwargs: fix_dequantize_activation(
        x, FixQuantizeActivation(**kwargs))),
    DMethod.INT4_ACTIVATION: _fixed(_LAYER, lambda x, **kwargs: int4_recon_quantized_activation(
        x, Int4QuantizeActivation(**kwargs))),
}


def _run(table: dict, name: str, code, x, granularity, labels, kwargs):
    check_choice(name, code, tuple(table))
    granularity = Granularity(check_choice("granularity", granularity, tuple(Granularity)))
    granularities, operation = table[code]
    if granularity not in granularities:
        raise ValueError(f"granularity={int(granularity)} is not one of {[int(g) for g in granularities]} for "
                         f"{name}={int(code)}")
    return operation(x, granularity, labels, kwargs)


def quantization_tensor(x, granularity, q_method, labels=None, **kwargs):
    """Table 168: quantize ``x`` by Q_Method ``q_method`` (Table 170) at ``granularity`` (Table 169)."""
    return _run(_QUANTIZERS, "q_method", q_method, x, granularity, labels, kwargs)


def dequantization_tensor(x, granularity, d_method, labels=None, **kwargs):
    """Table 229: dequantize ``x`` by D_Method ``d_method`` (Table 231) at ``granularity`` (Table 230)."""
    return _run(_DEQUANTIZERS, "d_method", d_method, x, granularity, labels, kwargs)
