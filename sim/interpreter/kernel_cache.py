"""Every numba kernel of aipu: whether numba's on-disk cache holds them for this machine, and the warm-up that
compiles them once, so that later processes load them instead of compiling for minutes.

The kernels compile lazily, on their first call with a new signature (`cache=True`): minutes for a first
`aipu demo`. They come in three groups: the golden model's (sim/golden/fast), the codec's (codec/compiled) and
the interpreter's compiled run loop (tiles.py, run_loop.py). This module sits in the interpreter's room, the
lowest that may import all three.

**Warm check** (:func:`cold_kernels`): numba keeps one index file per function, keyed by signature, by the
code generator's target (triple, CPU name and features, as NUMBA_CPU_NAME/NUMBA_CPU_FEATURES set them), by a
hash of the function's bytecode, and stamped with numba's version and the source file's time and size. A
function counts as cached when its index, read the way numba reads it (wherever numba's locator puts it,
NUMBA_CACHE_DIR included, and under the source-keyed directories of codec/compiled/jit_cache.py), holds an
entry for this machine's target and the function's current bytecode. So an edit, a numba upgrade, another
CPU, another vector width or an empty NUMBA_CACHE_DIR all read as cold, as they would make numba compile,
and nothing is compiled to tell. numba has no public call for this: :func:`_cached` reads its cache objects.

**Warm-up** (:func:`warm_up`): calls every public fast path once, on a few elements of every element type
it takes, and runs a CONV + REQUANT program on the interpreter; numba compiles each kernel for the
signatures those calls give, which are those of the project's own calls, and writes them to its cache.
"""
from __future__ import annotations

import importlib
import itertools

import numpy as np

KERNEL_MODULES: dict[str, tuple[str, ...]] = {
    "golden": tuple(f"aipu.sim.golden.fast.{name}" for name in (
        "channels_last_conv", "checks", "eltwise", "grouped_conv", "lut", "pool", "requant")),
    "codec": tuple(f"aipu.codec.compiled.{name}" for name in (
        "aec_decoder", "aec_encoder", "contexts", "profile_walk", "sublayer_decoder", "tree_coders"))
    + ("aipu.codec.deepcabac.compiled.kernels",),
    "interpreter": ("aipu.sim.interpreter.tiles", "aipu.sim.interpreter.run_loop"),
    "timing": ("aipu.sim.timing.npu_wdec",),
}
GROUPS = tuple(KERNEL_MODULES)
#: the groups in parts that compile no kernel in common (the run loop calls golden kernels; neither calls the
#: codec's), in the order a part warms them: each part may compile in a process of its own, with no two
#: processes writing one kernel's cache
PARTS = (("golden", "interpreter"), ("codec", "timing"))
#: kernels only the tests and benchmarks call, which the warm-up leaves to them
NOT_WARMED = frozenset({"aipu.sim.interpreter.tiles.requant_tile", "aipu.codec.compiled.aec_decoder.decode_program",
                        "aipu.codec.compiled.aec_encoder.encode_program",
                        "aipu.codec.compiled.profile_walk.profile_cycles"})


def kernels(groups=GROUPS) -> dict:
    """The warmed numba functions of ``groups`` by qualified name: the dispatchers each kernel module makes (not
    those it imports) that numba compiles and caches on their own (not ``inline="always"`` ones, which it
    inlines into their callers), but :data:`NOT_WARMED`. Importing the modules loads numba, compiles nothing."""
    from numba.core.caching import FunctionCache
    from numba.core.registry import CPUDispatcher

    found = {}
    for module_name in itertools.chain.from_iterable(KERNEL_MODULES[group] for group in groups):
        for name, value in vars(importlib.import_module(module_name)).items():
            qualified = f"{module_name}.{name}"
            if (isinstance(value, CPUDispatcher) and qualified not in NOT_WARMED and _made_in(value, module_name)
                    and isinstance(value._cache, FunctionCache) and value.targetoptions.get("inline") != "always"):
                found[qualified] = value
    return found


def _made_in(dispatcher, module_name: str) -> bool:
    """Whether ``module_name`` made ``dispatcher`` (decorated its own function, or wrapped another module's plain
    function) rather than imported it."""
    function = dispatcher.py_func
    return (function.__module__ == module_name
            or getattr(importlib.import_module(function.__module__), function.__name__, None) is not dispatcher)


def cold_kernels(groups=GROUPS) -> list[str]:
    """The kernels of ``groups`` that numba would compile rather than load from its cache (none: warm)."""
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    return sorted(name for name, dispatcher in kernels(groups).items() if not _cached(dispatcher, codegen))


def _cached(dispatcher, codegen) -> bool:
    """Whether numba's index of ``dispatcher`` holds code for ``codegen``'s target and its current bytecode
    (numba.core.caching: the index is empty when numba's version or the source file's stamp differ)."""
    cache = dispatcher._cache
    wanted = cache._index_key(None, codegen)[1:]
    return any(key[1:] == wanted for key in cache._cache_file._load_index())


def warm_up(groups=GROUPS) -> None:
    """Compile every kernel of ``groups`` for the signatures the project calls it with (loaded instead where
    numba's cache holds them), by calling each group's fast paths once on small inputs."""
    for group in groups:
        _WORKLOADS[group](np.random.default_rng(0))


def _golden(rng: np.random.Generator) -> None:
    """Each golden unit on every element type it takes (conv, eltwise and LUT8 inputs are bytes)."""
    from aipu.sim.golden._checks import BYTE_DTYPES, QUANT_DTYPES

    for dtype in QUANT_DTYPES:
        _pools_and_requant(rng, dtype)
        _lookups(rng, dtype)
    for dtype in BYTE_DTYPES:
        _convs(rng, dtype)
        _eltwise(rng, dtype)


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def _pools_and_requant(rng: np.random.Generator, dtype) -> None:
    """Pooling on ``dtype`` inputs; the requantizer's modes (as a call and as REQUANT's records) to ``dtype``."""
    from aipu.sim import golden
    from aipu.sim.machine.arch import PARAM_DTYPE

    x = _values(rng, (1, 4, 6, 6), dtype)
    golden.max_pool2d(x, (2, 2))
    golden.avg_pool2d(x, (3, 3), stride=(1, 1), padding=(1, 1, 1, 1))
    golden.global_avg_pool(x)
    acc = rng.integers(-4000, 4000, (1, 4, 6, 6)).astype(np.int32)
    per_channel = np.full(4, 1 << 14)           # int64 vectors, as the compiler's per-channel parameters
    golden.requantize(acc, bias=per_channel, multiplier=per_channel, shift=20, out_dtype=dtype,
                      return_saturated=True)
    golden.requantize(acc, multiplier=1 << 14, shift=20, negative_multiplier=1 << 12, negative_shift=20,
                      out_dtype=dtype)
    for scale in (np.float32(0.01), np.full(4, 0.01, np.float32)):
        golden.requantize_float32(acc, bias=7, scale=scale, out_dtype=dtype, return_saturated=True)
    golden.quantize_multiplier(0.01)
    records = np.zeros(4, PARAM_DTYPE)
    records["multiplier"], records["shift"], records["scale"] = 1 << 14, 20, 0.01
    tile = acc.reshape(4, -1).T.copy()
    for float32_scale, leaky in ((False, False), (False, True), (True, False)):
        golden.requantize_records(tile, records, golden.requant_stage(float32_scale=float32_scale, leaky=leaky,
                                                                      out_dtype=dtype))


def _lookups(rng: np.random.Generator, dtype) -> None:
    """LUT8 with a table of ``dtype`` (on few bytes, and on enough for the pairs kernel where it takes them),
    and LUT16 to ``dtype``."""
    from aipu.sim import golden
    from aipu.sim.golden.fast import kernels
    from aipu.sim.machine.arch import LUT_ENTRY_DTYPE, LUT8_ENTRIES

    table = _values(rng, (LUT8_ENTRIES,), dtype)
    golden.lut8(_values(rng, (1, 2, 4, 4), np.int8), table)
    if table.itemsize == 1:
        golden.lut8(_values(rng, (kernels("lut").PAIRS_MIN_SIZE,), np.uint8), table)
    wide_table = np.sort(_values(rng, (2 ** 9 + 1,), LUT_ENTRY_DTYPE))
    golden.lut16(_values(rng, (1, 2, 4, 4), np.int16), wide_table, index_shift=7, out_dtype=dtype,
                 return_clipped=True)


def _convs(rng: np.random.Generator, dtype) -> None:
    """conv2d on ``dtype`` inputs where a numba kernel takes it: a small dense conv, a depthwise one (the flat
    kernel), a grouped one (the tap kernel) and a depthwise one channels-last (as the interpreter's tiles)."""
    from aipu.sim import golden

    x = _values(rng, (1, 4, 6, 6), dtype)
    w = _values(rng, (4, 4, 3, 3), np.int8)
    golden.conv2d(x, w, padding=(1, 1, 1, 1))
    golden.conv2d(x, w[:, :1], padding=(1, 1, 1, 1), groups=4)
    golden.conv2d(x, w[:, :2], groups=2)
    geometry = golden.conv_geometry(x.shape, x.dtype, (4, 1, 3, 3), w.dtype, groups=4)
    golden.conv_sums_channels_last(x.transpose(0, 2, 3, 1), w[:, :1].transpose(0, 2, 3, 1), geometry)


def _eltwise(rng: np.random.Generator, dtype) -> None:
    """Every elementwise op on ``dtype`` operands, of the same shape and with one value per channel, and
    concat's rescale."""
    from aipu.sim import golden

    a, b, per_channel = (_values(rng, shape, dtype) for shape in ((1, 4, 4, 4), (1, 4, 4, 4), (1, 4, 1, 1)))
    for op, other, rounding in itertools.product(golden.ELTWISE_OPS, (b, per_channel), ("half_up", "half_to_even")):
        multiplier, shift = ((1 << 14), 15) if op == "mul" else ((1 << 14, 3 << 12), (15, 15))
        for saturated in (True, False):
            golden.eltwise(a, other, op, multiplier=multiplier, shift=shift, out_dtype=dtype, rounding=rounding,
                           return_saturated=saturated)
    golden.concat((a, b), zero_points=(0, 0), multipliers=(1 << 14, 1 << 13), shifts=(14, 14), out_dtype=dtype)


def _codec(rng: np.random.Generator) -> None:
    """The codec both ways on a conv layer's integer and float weights with a bias, searching every mode, with a
    codebook and as DeepCABAC, and a WDEC stream of the NPU profile through the interpreter's decoder and the
    engine walk the cycle model times it with (a codec kernel, so the codec group warms it)."""
    from aipu import codec
    from aipu.codec.npu_profile import profile_entries_compiled
    from aipu.sim.interpreter.handlers.dma import decode_weight_stream

    weights = _values(rng, (8, 4, 3, 3), np.int8) // 8
    tensors = {"w": weights, "b": rng.integers(-500, 500, 8).astype(np.int32),
               "f": rng.normal(0.0, 0.1, (8, 4, 3, 3)).astype(np.float32)}
    for options in (codec.CodecOptions(), codec.CodecOptions(clusters=16), codec.CodecOptions(format="deepcabac")):
        codec.decode(codec.encode(tensors, options, [("w", "b"), ("f", None)]))
    stream = codec.encode_profile_stream(weights)
    decode_weight_stream(stream, weights.shape)
    profile_entries_compiled(stream, weights.shape, 2)


def _interpreter(rng: np.random.Generator) -> None:
    """A CONV and a REQUANT through the compiled run loop (its one signature, whatever the program)."""
    from aipu.sim.interpreter.prepared import prepare
    from aipu.sim.machine.arch import DEFAULT, PARAM_DTYPE, Buffer, DType
    from aipu.sim.machine.isa import Opcode, Unit
    from aipu.sim.machine.memory import Memory
    from aipu.sim.machine.program import Command, Program

    program = Program()
    program.append(Command.make(Opcode.CONV, in_addr=0, in_h=2, in_w=2, in_c=4, in_type=DType.INT8, out_c=4,
                                k_h=1, k_w=1, wgt_addr=0, acc_addr=0, push=[Unit.REQUANT]))
    program.append(Command.make(Opcode.REQUANT, acc_addr=0, out_addr=0, pixels=4, channels=4, param_index=0,
                                out_type=DType.INT8, qmin=-128, qmax=127, pop=[Unit.CONV]))
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    memory = Memory.create(DEFAULT, 0x1000)
    memory.buffers[Buffer.ACT][:16] = _values(rng, (16,), np.uint8)
    memory.buffers[Buffer.WEIGHT][:16] = _values(rng, (16,), np.uint8)
    records = np.zeros(4, PARAM_DTYPE)
    records["multiplier"], records["shift"] = 1 << 14, 20
    memory.buffers[Buffer.PARAM][:records.nbytes] = records.view(np.uint8)
    prepare(program, memory.dram.size).run(memory, in_place=True)


def _timing(rng: np.random.Generator) -> None:
    """The NPU cycle model's WDEC on a small stream of two parts on two lanes of two bins a cycle: stepped beside
    another reader, then alone."""
    from aipu.codec.npu_profile import encode_parts_stream
    from aipu.sim.machine.arch import hardware_config_from_dict
    from aipu.sim.machine.isa import Opcode
    from aipu.sim.machine.program import Command
    from aipu.sim.timing.npu_wdec import WdecUnit

    weights = _values(rng, (4, 4, 3, 3), np.int8) // 8
    stream = encode_parts_stream(weights, 2)
    config = hardware_config_from_dict({"wdec": {"engines": 2, "bins_per_cycle": 2}})
    command = Command.make(Opcode.WDEC, dram_addr=0, length=len(stream), wgt_addr=0, out_c=4, in_c=4, k_h=3, k_w=3,
                           parts=2)
    wdec = WdecUnit(config, command, stream, 0)
    cycle = wdec.next_request(0)
    wdec.step(cycle, wdec.requesting(cycle))
    wdec.alone(cycle + 10)
    wdec.finish()


_WORKLOADS = {"golden": _golden, "codec": _codec, "interpreter": _interpreter, "timing": _timing}
