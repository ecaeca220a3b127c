"""What every operator's lowering sees and implements.

An operator module provides a :class:`Lowering`: ``plan`` checks the operator against the hardware
configuration and decides its tiles (raising InputError naming what does not fit) before anything is
emitted; ``emit`` appends its commands to the program's pipeline (compiler/lowering/pipeline.py), which gives
them the tokens that order them within the operator and after the earlier ones. :class:`Context` holds the
pipeline, the DRAM plan and the quantized tensors, and places tensors and constants in DRAM.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from aipu.compiler.lowering.memory import DramPlan, channels_last
from aipu.compiler.lowering.pipeline import Pipeline
from aipu.compiler.qir import QTensor
from aipu.sim.machine.arch import DTYPE_NUMPY, DType, HardwareConfig
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import COMMANDS, Opcode
from aipu.sim.machine.program import Program


@dataclass
class Context:
    pipeline: Pipeline
    plan: DramPlan
    tensors: dict[str, QTensor]
    constants: dict[str, np.ndarray]       # integer operands of the quantized model (e.g. an eltwise constant)
    compress: str | None = None            # the policy by which conv weights become streams WDEC decodes
    weight_streams: list[dict] = field(default_factory=list)    # what compression placed, for the manifest
    weight_item_cycles: float = 0.0        # the latest conv plan's (TilePlan.weight_item_cycles)
    k_boundaries: dict[str, int] = field(default_factory=dict)  # conv layer -> output channel a tile ends at

    @property
    def program(self) -> Program:
        return self.pipeline.program

    @property
    def config(self) -> HardwareConfig:
        return self.program.config

    def address(self, name: str) -> int:
        """A tensor's DRAM byte address; a model constant is placed (channels-last) on first use."""
        if name not in self.plan.regions:
            self.plan.constant(name, channels_last(self.constants[name]))
        return self.plan.regions[name][0]


class Lowering(Protocol):
    def plan(self, op, context: Context): ...

    def emit(self, plan, context: Context) -> None: ...


def field_max(config: HardwareConfig, opcode: Opcode, *names: str) -> int:
    """The largest value every one of a command's ``names`` fields takes: the lowering's limits are the ISA's."""
    spec = COMMANDS[opcode]
    return min(spec.field(name).legal_range(config)[1] for name in names)


def dtype_code(dtype: np.dtype) -> DType:
    """The command field value of a numpy element type."""
    for code, numpy_type in DTYPE_NUMPY.items():
        if numpy_type == np.dtype(dtype):
            return code
    raise InputError("element type", np.dtype(dtype).name, "int8, uint8 or int16")


def image_shape(tensor: QTensor) -> tuple[int, int, int]:
    """(H, W, C) of a [1, C, H, W], [1, C, L] or [1, C] tensor as the units see it: the channels-last layout
    of [1, C, L] is that of [1, C, 1, L] (a detection head's [1, C, anchors])."""
    shape = tensor.shape
    if shape[0] != 1:
        raise InputError(f"tensor {tensor.name!r} batch", shape[0], "1 (the NPU runs one image)")
    if len(shape) == 4:
        return shape[2], shape[3], shape[1]
    if len(shape) == 3:
        return 1, shape[2], shape[1]
    if len(shape) == 2:
        return 1, 1, shape[1]
    raise InputError(f"tensor {tensor.name!r} shape", list(shape), "[1, C, H, W], [1, C, L] or [1, C]")
