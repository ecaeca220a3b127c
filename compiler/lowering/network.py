"""A whole quantized model as one command program: every operator planned, then emitted in order.

One pipeline (compiler/lowering/pipeline.py) gives every command its tokens: inside an operator the units
overlap through double buffering, and an operator's first loads wait only for the stores of the bytes they read
and for the buffer halves they fill, so they run under the previous operator's last compute. A conv whose
output only a table operator reads takes the table (LUT before STORE). The DRAM plan places the inputs, then
each operator's constants and output as it is emitted, and frees a tensor after its last reader (``keep_all``
keeps every tensor, so that each can be read back and compared with the quantized IR's reference).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aipu.compiler.compression import compression_policy
from aipu.compiler.lowering.base import Context, Lowering
from aipu.compiler.lowering.conv import ConvLowering
from aipu.compiler.lowering.eltwise import ConcatLowering, EltwiseLowering
from aipu.compiler.lowering.layout import LayoutLowering
from aipu.compiler.lowering.memory import DramPlan, load_tensor, store_tensor
from aipu.compiler.lowering.pipeline import Pipeline
from aipu.compiler.lowering.pool import PoolLowering
from aipu.compiler.lowering.softmax import SoftmaxLowering
from aipu.compiler.lowering.table import TableLowering
from aipu.compiler.qir import QConcat, QConv, QEltwise, QLayout, QLut, QModel, QPool, QSoftmax
from aipu.sim.machine.arch import DEFAULT, HardwareConfig
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

LOWERINGS: dict[type, Lowering] = {QConv: ConvLowering(), QPool: PoolLowering(), QEltwise: EltwiseLowering(),
                                   QConcat: ConcatLowering(), QLut: TableLowering(), QLayout: LayoutLowering(),
                                   QSoftmax: SoftmaxLowering()}


@dataclass
class NetworkProgram:
    """The program, its initial DRAM image, and where every tensor lives."""

    program: Program
    dram: np.ndarray
    plan: DramPlan
    model: QModel
    weight_streams: list[dict] = field(default_factory=list)    # one per compressed weight tile (--compress)
    steps: list[dict] = field(default_factory=list)    # per emitted step: its layers and its commands per unit
    compress: str | None = None     # the compression policy (compiler/compression.py), None: raw weights

    def memory(self, inputs: dict[str, np.ndarray]) -> Memory:
        """A memory image with the quantized ``inputs`` (NCHW, the model's types) in place."""
        dram = self.dram.copy()
        for name in self.model.inputs:
            tensor, value = self.model.tensors[name], np.asarray(inputs[name])
            if value.shape != tensor.shape or value.dtype != tensor.dtype:
                raise ValueError(f"input {name!r}: expected {tensor.dtype} {list(tensor.shape)}, got {value.dtype} "
                                 f"{list(value.shape)}")
            store_tensor(dram, self.plan.regions[name][0], value)
        return Memory.create(self.program.config, dram)

    def read(self, memory: Memory, name: str) -> np.ndarray:
        """Tensor ``name`` (NCHW) from a memory image after a run."""
        tensor = self.model.tensors[name]
        return load_tensor(memory.dram, self.plan.regions[name][0], tensor.shape, tensor.dtype, tensor.int4)

    def manifest(self) -> dict:
        """Inputs and outputs: DRAM address, shape (NCHW; stored channels-last), type and quantization."""
        def entry(name: str) -> dict:
            tensor = self.model.tensors[name]
            address, nbytes = self.plan.regions[name]
            return {"name": name, "dram_address": address, "bytes": nbytes, "shape": list(tensor.shape),
                    "layout": "channels_last", "dtype": tensor.dtype.name, "scale": tensor.scale,
                    "zero_point": tensor.zero_point,
                    "rounding": "onnx_quantize_linear" if tensor.onnx_rounding else "half_away_from_zero"}
        manifest = {"inputs": [entry(name) for name in self.model.inputs],
                    "outputs": [entry(name) for name in self.model.outputs],
                    "dram_bytes": int(self.dram.size), "commands": len(self.program), "steps": self.steps}
        if self.weight_streams:
            decoded = [stream for stream in self.weight_streams if stream["decoded"]]
            weight_bytes = sum(stream["weight_bytes"] for stream in decoded)
            stream_bytes = sum(stream["stream_bytes"] for stream in decoded)
            one_part = sum(stream["one_part_bytes"] for stream in decoded)
            manifest["weight_compression"] = {
                "policy": self.compress, "tiles": len(self.weight_streams), "decoded_tiles": len(decoded),
                "weight_bytes": weight_bytes,
                "stream_bytes": stream_bytes, "bits_per_weight": round(8 * stream_bytes / max(weight_bytes, 1), 3),
                "split_overhead": round(stream_bytes / one_part - 1, 5) if one_part else None,
                "streams": self.weight_streams}
        return manifest


def lower_model(model: QModel, config: HardwareConfig = DEFAULT, *, keep_all: bool = False,
                compress: str | None = None, k_boundaries: dict[str, int] | None = None) -> NetworkProgram:
    """Plan every operator (all errors before anything is emitted), then emit them in order. ``compress``:
    conv weight tiles as npu-profile streams decoded by WDEC, where that is smaller than the raw tile, under that
    policy of compiler/compression.py ("hidden": only in layers whose decoding hides; "all"). ``k_boundaries``:
    per conv layer an output channel its tiles break at (the filters several models share end there)."""
    context = Context(Pipeline(Program(config)), DramPlan(), model.tensors, model.constants,
                      compress=compression_policy(compress), k_boundaries=dict(k_boundaries or {}))
    for name in model.inputs:
        tensor = model.tensors[name]
        context.plan.tensor(name, tensor.shape, tensor.dtype, reuse=False)
    steps = _plan(model, context)
    if all(getattr(plan, "alias", False) for _, plan, _, _ in steps):
        raise InputError("model", "no operator moves data", "at least one operator that computes")
    last_reader = {name: index for index, (_, _, reads, _) in enumerate(steps) for name in reads}
    kept = set(model.inputs) | set(model.outputs)
    emitted = []
    for index, (lowering, plan, reads, names) in enumerate(steps):
        before = context.pipeline.counts()
        lowering.emit(plan, context)
        commands = {unit.name: [before.get(unit, 0), count] for unit, count in context.pipeline.counts().items()
                    if count > before.get(unit, 0)}
        if commands:
            emitted.append({"layers": names, "commands": commands})
        for name in set(reads):
            if last_reader[name] == index and name not in kept and not keep_all and name in context.plan.regions \
                    and name not in model.constants:
                context.plan.release(name)
    context.pipeline.close()
    context.program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    return NetworkProgram(context.program, context.plan.image(), context.plan, model, context.weight_streams,
                          emitted, context.compress)


def _plan(model: QModel, context: Context) -> list[tuple]:
    """(lowering, plan, tensors read, layer names) per emitted step; a conv followed by its only reader, a
    table, fuses."""
    readers: dict[str, int] = {}
    for op in model.ops:
        for name in op.inputs:
            readers[name] = readers.get(name, 0) + 1
    steps, skip = [], set()
    for index, op in enumerate(model.ops):
        if index in skip:
            continue
        follower = model.ops[index + 1] if index + 1 < len(model.ops) else None
        try:
            if (isinstance(op, QConv) and isinstance(follower, QLut) and follower.x == op.y
                    and readers.get(op.y) == 1 and op.y not in model.outputs
                    and model.tensors[op.y].dtype == model.tensors[follower.y].dtype):    # the LUT works in place
                plan = LOWERINGS[QConv].plan(op, context, follower)
                skip.add(index + 1)
                steps.append((LOWERINGS[QConv], plan, op.inputs, [op.name, follower.name]))
                continue
            steps.append((LOWERINGS[type(op)], LOWERINGS[type(op)].plan(op, context), op.inputs, [op.name]))
        except ValueError as exc:      # what the tiler refuses, named by layer (InputError already is)
            if isinstance(exc, InputError):
                raise
            raise InputError(f"layer {op.name!r}", type(op).__name__, str(exc)) from exc
    return steps

