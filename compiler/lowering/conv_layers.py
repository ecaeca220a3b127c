"""Conv layers lowered to a program of their own, without a model: one layer, or a chain in which each layer
reads the previous one's output (``aipu run-layer``, benchmarks, the co-simulation's layers).

The DRAM holds the network input (HWC), each layer's constants (weights OHWI, parameter records, table), then
each layer's output (HWC), and with ``compress`` the weight streams WDEC decodes; each layer is planned
(conv_plan.py) and emitted (conv_emit.py) in turn.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aipu.compiler.compression import compression_policy
from aipu.compiler.lowering.conv_depthwise import conv_constants, emit_conv, plan_conv
from aipu.compiler.lowering.conv_layer import ConvLayer, check_layer
from aipu.compiler.lowering.conv_plan import TilePlan
from aipu.compiler.lowering.memory import DramPlan, channels_last, load_tensor, store_tensor
from aipu.compiler.lowering.pipeline import Pipeline
from aipu.compiler.lowering.weight_streams import WeightStreams
from aipu.sim.machine.arch import DEFAULT, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program


@dataclass
class LoweredLayer:
    program: Program
    dram: np.ndarray                       # initial DRAM image
    output_addr: int                       # byte address of the [OH][OW][K] output in DRAM
    output_shape: tuple[int, int, int]     # (OH, OW, K)
    output_dtype: np.dtype
    plans: list[TilePlan]                  # one per layer
    regions: dict[str, tuple[int, int]] = field(default_factory=dict)   # name -> (address, bytes)
    input_dtype: np.dtype | None = None    # dtype of the network input in the "input" region

    @property
    def plan(self) -> TilePlan:
        """The first layer's plan (the only one for a single layer)."""
        return self.plans[0]

    def memory(self, dram: np.ndarray | None = None) -> Memory:
        return Memory.create(self.program.config, self.dram if dram is None else dram)

    def dram_with_input(self, x: np.ndarray) -> np.ndarray:
        """A copy of the DRAM image with another network input ([1, C, H, W], same shape and dtype)."""
        address, nbytes = self.regions["input"]
        x = np.asarray(x)
        if self.input_dtype is not None and x.dtype != self.input_dtype:
            raise ValueError(f"input dtype {x.dtype} does not match the program's input dtype {self.input_dtype}")
        if x.nbytes != nbytes or x.ndim != 4 or x.shape[0] != 1:
            raise ValueError(f"input of shape {list(x.shape)} and {x.nbytes} bytes does not match the "
                             f"program's input region of {nbytes} bytes")
        dram = self.dram.copy()
        store_tensor(dram, address, x)
        return dram

    def read_output(self, memory: Memory) -> np.ndarray:
        """The output tensor from a DRAM image, as [1, K, OH, OW] like the golden model."""
        out_h, out_w, k = self.output_shape
        return load_tensor(memory.dram, self.output_addr, (1, k, out_h, out_w), self.output_dtype)


def lower_conv_layer(layer: ConvLayer, config: HardwareConfig = DEFAULT, *, compress: str | None = None,
                     dwconv: bool = True, **tiles) -> LoweredLayer:
    """Plan DRAM, tile the layer and emit LOAD/CONV or DWCONV/REQUANT(/LUT)/STORE with double buffering and
    tokens."""
    return lower_conv_layers([layer], config, [tiles], compress=compress, dwconv=dwconv)


def lower_conv_layers(layers: list[ConvLayer], config: HardwareConfig = DEFAULT,
                      tiles: list[dict] | None = None, *, compress: str | None = None,
                      dwconv: bool = True) -> LoweredLayer:
    """Lower a chain of conv layers into one program: layer i + 1 reads layer i's output from DRAM.

    Only the first layer's ``x`` is input data; later layers' ``x`` must have the previous output's
    shape and dtype (their values are not used). One pipeline gives the tokens, so that a layer's first
    loads overlap the previous layer's last compute (compiler/lowering/pipeline.py). ``compress``: weight tiles
    decoded by WDEC where their stream is smaller (``WeightStreams``) in the layers that policy picks
    (compiler/compression.py), the streams placed after the outputs.
    ``tiles``: per layer, tile sizes to keep (plan_tiles' keywords). ``dwconv``: whether depthwise layers may run
    on DWCONV where it is faster (conv_depthwise.plan_conv; the RTL does not execute DWCONV yet)."""
    compress = compression_policy(compress)
    plans = _plan_chain(layers, config, tiles, dwconv, compress)
    dram = DramPlan()
    dram.constant("input", channels_last(layers[0].x))
    for i, layer in enumerate(layers):
        for name, blob in conv_constants(layer, plans[i], config).items():
            dram.constant(f"{i}.{name}", blob)
    for i, (layer, plan) in enumerate(zip(layers, plans)):
        dram.tensor(f"{i}.output", (1, layer.w.shape[0], plan.out_h, plan.out_w), layer.out_dtype, reuse=False)

    pipeline, streams = Pipeline(Program(config)), []
    for i, (layer, plan) in enumerate(zip(layers, plans)):
        addresses = {"input": dram.regions["input" if i == 0 else f"{i - 1}.output"][0],
                     **{name: dram.regions[f"{i}.{name}"][0]
                        for name in ("weights", "params", "output", "lut", "codebook", "signs")
                        if f"{i}.{name}" in dram.regions}}
        emit_conv(pipeline, layer, plan, addresses,
                  weight_stream=WeightStreams(layer, str(i), dram, streams, config, plan.parts_overhead,
                                              plan.compressed)
                  if compress else None)
    pipeline.close()
    program = pipeline.program
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    last, plan = layers[-1], plans[-1]
    return LoweredLayer(program, dram.image(), dram.regions[f"{len(layers) - 1}.output"][0],
                        (plan.out_h, plan.out_w, last.w.shape[0]), last.out_dtype, plans, dram.regions,
                        layers[0].x.dtype)


def _plan_chain(layers: list[ConvLayer], config: HardwareConfig, tiles: list[dict] | None,
                dwconv: bool, compress: str | None = None) -> list[TilePlan]:
    """Each layer checked and planned; each layer's input shaped as the previous layer's output."""
    if not layers:
        raise ValueError("lower_conv_layers needs at least one layer")
    tiles = tiles or [{} for _ in layers]
    if len(tiles) != len(layers):
        raise ValueError(f"tiles has {len(tiles)} entries for {len(layers)} layers")
    for layer in layers:
        check_layer(layer)
    plans = []
    for layer, kept in zip(layers, tiles):
        hidden_under = plans[-1].weight_item_cycles if plans else 0.0
        plans.append(plan_conv(layer, config, dwconv=dwconv, **{"compress": compress, "hidden_under": hidden_under,
                                                                 **kept}))
    for i in range(1, len(layers)):
        shape = (1, layers[i - 1].w.shape[0], plans[i - 1].out_h, plans[i - 1].out_w)
        if layers[i].x.shape != shape or layers[i].x.dtype != layers[i - 1].out_dtype:
            raise ValueError(f"layer {i} input {layers[i].x.dtype}{list(layers[i].x.shape)} does not match layer "
                             f"{i - 1} output {layers[i - 1].out_dtype}{list(shape)}")
    return plans
