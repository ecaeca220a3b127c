"""Every public function refuses bad arguments with a ValueError naming the parameter."""
import numpy as np
import pytest

from aipu.quant import (LinearQuantization, TrainableAlphaQuantization, brelu_parameters, linear_parameters,
                        mul_shift, mul_shift_f, partition, quantization_tensor, quantize_tensor, scale_synchronization_parameters)


@pytest.mark.parametrize("call, name", [
    (lambda: linear_parameters(np.ones(3), 0), "bits"),
    (lambda: LinearQuantization((0.0,), (0.0,), 8, 2), "x_scale"),
    (lambda: LinearQuantization((1.0,), (np.inf,), 8, 2), "x_offset"),
    (lambda: TrainableAlphaQuantization((-1.0,), 2, 8), "alpha"),
    (lambda: partition(np.ones(3), 5), "granularity"),
    (lambda: partition(np.ones(3), 4), "labels"),
    (lambda: partition(np.ones(3), 4, np.ones(2, np.int64)), "labels"),
    (lambda: quantize_tensor(np.array([np.nan]), 0), "t"),
    (lambda: quantize_tensor(np.ones(2), 2), "method"),
    (lambda: mul_shift(0), "bound_i"),
    (lambda: mul_shift_f(0.0), "scale"),
    (lambda: mul_shift_f(1e12), "scale"),
    (lambda: scale_synchronization_parameters([0.1]), "y_scales"),
    (lambda: brelu_parameters([], 1.0), "batches"),
    (lambda: quantization_tensor(np.ones(2), 2, 9), "q_method"),
])
def test_bad_arguments_raise_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_user_defined_units_span_tensors():
    units = partition([np.zeros(2), np.zeros((1, 2))], 4, [np.array([7, 3]), np.array([[3, 9]])])
    assert units.count == 3 and units.unit.tolist() == [1, 0, 0, 2]
