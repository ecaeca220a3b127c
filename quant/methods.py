"""The method codes: Q_Method (T/AI 115.1-2021 Table 170; code 9 is absent from the standard), D_Method
(Table 231, numbered apart from the Q codes) and which dequantizer undoes which quantizer (A0-11)."""
from __future__ import annotations

from enum import IntEnum


class QMethod(IntEnum):
    LINEAR = 1                  # 7.2.2.1, parameters and activations
    CODEBOOK = 2                # 7.2.2.2
    NON_LINEAR = 3              # 7.2.3.1
    FIXED_POINT_PARAMETER = 4   # 7.2.3.2
    INT4_PARAMETER = 5          # 7.2.3.3
    BRELU_PARAMETER = 6         # 7.2.3.4
    TRAINED_CLIPPING = 7        # 7.2.4.1
    FIXED_POINT_ACTIVATION = 8  # 7.2.4.2
    INT4_ACTIVATION = 10        # 7.2.4.3
    BRELU_ACTIVATION = 11       # 7.2.4.4
    SCALE_ALIGNMENT = 12        # 7.2.4.5


class DMethod(IntEnum):
    LINEAR = 1                  # 8.2.2.1
    CODEBOOK = 2                # 8.2.2.2
    NON_LINEAR = 3              # 8.2.3.1
    FIXED_POINT_PARAMETER = 4   # 8.2.3.2
    INT4_PARAMETER = 5          # 8.2.3.3
    TRAINED_CLIPPING = 6        # 8.2.4.1
    FIXED_POINT_ACTIVATION = 7  # 8.2.4.2
    INT4_ACTIVATION = 8         # 8.2.4.3


#: The dequantizer of each quantizer; Q6 is linear (Q6 codes dequantize with D1), Q11 and Q12 have none: their
#: outputs stay integers with a known scale.
DEQUANTIZER_OF = {
    QMethod.LINEAR: DMethod.LINEAR, QMethod.CODEBOOK: DMethod.CODEBOOK, QMethod.NON_LINEAR: DMethod.NON_LINEAR,
    QMethod.FIXED_POINT_PARAMETER: DMethod.FIXED_POINT_PARAMETER, QMethod.INT4_PARAMETER: DMethod.INT4_PARAMETER,
    QMethod.BRELU_PARAMETER: DMethod.LINEAR, QMethod.TRAINED_CLIPPING: DMethod.TRAINED_CLIPPING,
    QMethod.FIXED_POINT_ACTIVATION: DMethod.FIXED_POINT_ACTIVATION, QMethod.INT4_ACTIVATION: DMethod.INT4_ACTIVATION,
}
