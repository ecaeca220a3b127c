"""The programs a profile-guided Verilator build of the NPU top is trained on (docs/rtl-cosim.md,
"Profile-guided builds"): a dense, a depthwise and a pointwise layer of real networks' shapes, and a chain of
random layers with LUT activations, lowered for the build's configuration. None is a benchmark layer, so that
`aipu bench rtl` measures a build trained on other work, as a user's program would be. On the default
configuration each fits the smallest profile-guided build (npu_verilog.PROFILED_MIN_DRAM_BYTES, 256 commands a
queue); a build is trained on those that fit it."""
from __future__ import annotations

import numpy as np

from aipu.sim.machine.arch import DType, HardwareConfig
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program

SEED = 115
SHAPED = ((96, 14, 96, 3, 1), (64, 14, 64, 3, 64), (96, 8, 128, 1, 1))  # channels, size, out channels, kernel, groups
CHAINED = 3     # random layers in the chain


def training_programs(config: HardwareConfig) -> list[tuple[Program, Memory]]:
    """The training programs for ``config``, each with its DRAM."""
    from aipu.app.sample_layers import random_layer, shaped_layer
    from aipu.compiler.lowering.conv_layers import lower_conv_layers

    rng = np.random.default_rng(SEED)
    chains = [[shaped_layer(rng, channels, size, out_channels, kernel, groups=groups)]
              for channels, size, out_channels, kernel, groups in SHAPED]
    eight_bit = (DType.INT8, DType.UINT8)
    chain = [random_layer(rng, with_lut=True, out_types=eight_bit)]
    for index in range(1, CHAINED):
        chain.append(random_layer(rng, x=chain[-1].reference(), with_lut=bool(index % 2), out_types=eight_bit))
    programs = []
    for layers in (*chains, chain):
        lowered = lower_conv_layers(layers, config)
        programs.append((lowered.program, lowered.memory()))
    return programs
