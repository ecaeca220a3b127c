"""The quantization and dequantization methods of T/AI 115.1-2021 chapters 7.2 and 8.2 (docs/quantization.md).

One module per method family, each with its parameter record (a frozen dataclass named after the standard's
operation, holding the standard's fields), the choice of those parameters from data, the quantizer and the
dequantizer. Every method splits its tensors into units by one helper (:mod:`aipu.quant.granularity`), rounds
float -> int half away from zero (aipu.sim.golden.round_half_away) and runs its integer requantizers through the
golden model's rounding shift, so the NPU's arithmetic is the one definition.
"""
from aipu.quant.brelu import BRelu, brelu_infer, brelu_parameters, brelu_train, mul_shift, n_sigma_bound
from aipu.quant.clipping import (TrainableAlphaQuantization, ema_alpha, trainable_alpha_dequantize,
                                 trainable_alpha_quantize)
from aipu.quant.codebook import (CodebookQuantization, codebook_dequantize, codebook_parameters, codebook_quantize,
                                 kmeans_centres)
from aipu.quant.dispatch import dequantization_tensor, quantization_tensor
from aipu.quant.fixed_point import (FixQuantizeActivation, FixQuantizeParameter, PositionMethod,
                                    calibrate_position, fix_dequantize_activation, fix_dequantize_parameter,
                                    fix_quantize_activation, fix_quantize_parameter, quantize_tensor)
from aipu.quant.granularity import Granularity, Partition, partition
from aipu.quant.int4 import (Int4QuantizeParameter, get_params_double_grid, int4_quantize_parameter,
                             int4_recon_quantized_parameter)
from aipu.quant.int4_activation import (Int4QuantizeActivation, cal_sf, int4_activation_parameters,
                                        int4_quantize_activation, int4_recon_quantized_activation)
from aipu.quant.int4_search import dual_quantize, quantize, quantize_weights
from aipu.quant.linear import (BReluQuantizerParameter, LinearQuantization, linear_dequantize, linear_parameters,
                               linear_quantize)
from aipu.quant.methods import DEQUANTIZER_OF, DMethod, QMethod
from aipu.quant.nonlinear import (MappingFunction, NonLinearQuantization, nonlinear_dequantize,
                                  nonlinear_parameters, nonlinear_quantize)
from aipu.quant.scale_alignment import (ScaleSynchronization, mul_shift_f, scale_synchronization,
                                        scale_synchronization_parameters)
