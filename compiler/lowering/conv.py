"""Conv, fully connected and depthwise 1x1 (BN, PReLU) layers: the conv tiler (compiler/tiling.py), with an
8-bit activation table applied before STORE when a table operator is the conv's only reader."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import Context, dtype_code, image_shape
from aipu.compiler.lowering.pipeline import Link
from aipu.compiler.qir import QConv, QLut
from aipu.compiler.tiling import ConvLayer, TilePlan, check_layer, emit_conv_layer, layer_constants, plan_tiles
from aipu.sim.machine.arch import LUT_ENTRY_DTYPE
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Rounding


@dataclass
class ConvPlan:
    op: QConv
    layer: ConvLayer
    tiles: TilePlan
    y: str                 # the tensor written: the conv's output, or the fused table's


class ConvLowering:
    def plan(self, op: QConv, context: Context, table: QLut | None = None) -> ConvPlan:
        x, y = context.tensors[op.x], context.tensors[table.y if table else op.y]
        h, w, c = image_shape(x)
        requant = op.requant
        leaky = requant.negative_multiplier is not None
        native = requant.scale is None          # else FLOAT32 mode: the records' multiplier and shift are unused
        k = op.w.shape[0]
        layer = ConvLayer(x=np.zeros((1, c, h, w), x.dtype), w=op.w, bias=op.bias,
                          multiplier=requant.multiplier if native else np.zeros(k, np.int64),
                          shift=requant.shift if native else np.zeros(k, np.int64), scale=requant.scale,
                          x_zero_point=x.zero_point, w_zero_point=op.w_zero_point,
                          out_zero_point=requant.out_zero_point, qmin=requant.qmin, qmax=requant.qmax,
                          out_type=dtype_code(context.tensors[op.y].dtype), rounding=Rounding[requant.rounding.upper()],
                          stride=op.stride, padding=op.padding, dilation=op.dilation, groups=op.groups,
                          negative_multiplier=requant.negative_multiplier if leaky else None,
                          negative_shift=requant.negative_shift if leaky else None,
                          lut=table.table.astype(LUT_ENTRY_DTYPE) if table else None)
        try:
            check_layer(layer)
            tiles = plan_tiles(layer, context.program.config)
        except ValueError as exc:
            raise (exc if isinstance(exc, InputError) else InputError("tiling", "no plan", str(exc))).within(
                f"layer {op.name!r}") from None
        return ConvPlan(op, layer, tiles, y.name)

    def emit(self, plan: ConvPlan, context: Context, link: Link) -> None:
        addresses = {"input": context.address(plan.op.x),
                     "output": context.plan.tensor(plan.y, context.tensors[plan.y].shape,
                                                   context.tensors[plan.y].dtype)}
        for name, blob in layer_constants(plan.layer, context.program.config).items():
            addresses[name] = context.plan.constant(f"{plan.op.name}/{name}", blob)
        emit_conv_layer(context.program, plan.layer, plan.tiles, addresses, after_previous=link.after_previous,
                        before_next=link.before_next)
