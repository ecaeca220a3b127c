"""LLVM vector code for the numba kernels: 16-lane float32 vectors as a numba value type with the few
operations the channels-last window kernel needs (sim/golden/fast/channels_last_conv.py), the stride-2 split of
an input row into its column phases (sim/golden/fast/grouped_conv.py) and the interpreter's copies of short
runs (sim/interpreter/run_loop.py), written as LLVM IR.

numba leaves vectorising to LLVM's loop vectoriser, which takes the innermost loop and, since numba's
arrays may alias, reloads every operand on every pass. A depthwise tile's better loop runs over the pixels
of a row with 16 channels in each vector and slides a window of converted input vectors along the row, so
that each input byte is converted once per kernel row instead of once per tap: no loop shape made LLVM do
that (a channel loop of 16 is unrolled and the pixel loop vectorised with gathers instead). With
these, the kernel states the vectors itself. LLVM splits them into two 256-bit halves on CPUs without
AVX-512 (and into whatever the target has elsewhere); the arithmetic is the same.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model

LANES = 16
PAIRS = LANES   # column pairs split_pairs converts at once: one vector of floats per column phase
_FLOATS = ir.VectorType(ir.FloatType(), LANES)


class Floats16(types.Type):
    """numba's type of a vector of 16 float32 values (held in one 512-bit register, or two 256-bit ones)."""

    def __init__(self) -> None:
        super().__init__(name="Floats16")


floats16 = Floats16()


@register_model(Floats16)
class _Floats16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type) -> None:
        super().__init__(dmm, fe_type, _FLOATS)


def _vector_pointer(context, builder, array_type, array, index, element, count=LANES):
    """A pointer to ``count`` ``element`` values of a C-contiguous 1-D array from ``index`` on."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), ir.VectorType(element, count).as_pointer())


_BYTES = (types.int8, types.uint8)


def _flat(array, dtypes) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C" and array.dtype in dtypes


@intrinsic
def load_bytes(typingctx, array, index):
    """array[index:index + 16] (int8 or uint8) as 16 floats. The caller keeps the 16 bytes inside the array."""
    if not _flat(array, _BYTES):
        return None

    def codegen(context, builder, signature, args):
        raw = builder.load(_vector_pointer(context, builder, signature.args[0], args[0], args[1], ir.IntType(8)),
                           align=1)
        return (builder.sitofp if signature.args[0].dtype.signed else builder.uitofp)(raw, _FLOATS)

    return floats16(array, types.uint64), codegen


@intrinsic
def load_floats(typingctx, array, index):
    """array[index:index + 16] of a float32 array. The caller keeps them inside the array."""
    if not _flat(array, (types.float32,)):
        return None

    def codegen(context, builder, signature, args):
        return builder.load(_vector_pointer(context, builder, signature.args[0], args[0], args[1], ir.FloatType()),
                            align=4)

    return floats16(array, types.uint64), codegen


@intrinsic(prefer_literal=True)
def multiply_add_rotated(typingctx, x, weights, at, apart, group, total):
    """total + the sum over r < ``group`` of x rotated by r within each run of ``group`` lanes (lane l takes
    x[l - l % group + (l + r) % group]) times weights[at + r * apart:][:16] (``group`` a constant: 1, 2, 4, 8
    or 16). A grouped conv whose groups have as many outputs as inputs, 16 // group groups in a vector, sums
    each input channel c of a group into its output o through the rotation r = c - o, which stays inside the
    group: a lane shuffle per rotation, no gathers (the weights laid out by rotation, window_weights)."""
    if not (x == total == floats16 and _flat(weights, (types.float32,)) and isinstance(group, types.IntegerLiteral)
            and group.literal_value in (1, 2, 4, 8, 16)):
        return None
    size = group.literal_value

    def codegen(context, builder, signature, args):
        x_value, weights_value, at_value, apart_value, _, sum_value = args
        lane = ir.IntType(32)
        index = at_value
        for rotation in range(size):
            rotated = x_value if rotation == 0 else builder.shuffle_vector(x_value, x_value, ir.Constant(
                ir.VectorType(lane, LANES), [l - l % size + (l + rotation) % size for l in range(LANES)]))
            weight = builder.load(_vector_pointer(context, builder, signature.args[1], weights_value, index,
                                                  ir.FloatType()), align=4)
            sum_value = builder.fadd(builder.fmul(rotated, weight, flags=("contract",)), sum_value, flags=("contract",))
            index = builder.add(index, apart_value)
        return sum_value

    return floats16(floats16, weights, types.uint64, types.uint64, group, floats16), codegen


@intrinsic
def store_int32(typingctx, array, index, value):
    """array[index:index + 16] = the 16 values of ``value`` as int32 (truncated; the kernels store integers).
    The caller keeps them inside the array."""
    if not (_flat(array, (types.int32,)) and value == floats16):
        return None

    def codegen(context, builder, signature, args):
        integers = builder.fptosi(args[2], ir.VectorType(ir.IntType(32), LANES))
        builder.store(integers, _vector_pointer(context, builder, signature.args[0], args[0], args[1],
                                                ir.IntType(32)), align=4)
        return context.get_dummy_value()

    return types.void(array, types.uint64, floats16), codegen


def _splat(builder, value, vector_type):
    """``value`` in every lane of ``vector_type`` (LLVM IR)."""
    lane0 = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    first_lane_everywhere = ir.Constant(ir.VectorType(ir.IntType(32), vector_type.count), [0] * vector_type.count)
    return builder.shuffle_vector(lane0, ir.Constant(vector_type, ir.Undefined), first_lane_everywhere)


@intrinsic
def split_pairs(typingctx, x, source, buf, even, odd, zero_point, count):
    """``buf[even + m] = x[source + 2m] - zero_point`` and ``buf[odd + m] = x[source + 2m + 1] - zero_point`` for
    m < ``count``, and 0.0 for ``count`` <= m < 16: whatever ``count``, 32 bytes of x are read and 16 floats
    written at each of ``even`` and ``odd`` (the caller keeps both inside their arrays).

    One vector load, conversion, subtraction, two lane shuffles and two stores: a stride-2 depthwise layer's
    phase rows are 14 or 28 floats long, where numba's loop over the pairs ran LLVM's 4-wide shuffles and
    every other shape of loop tried was slower (docs/performance.md). x: 1-D C-contiguous
    int8 or uint8; buf: 1-D C-contiguous float32.
    """
    if not (_flat(x, _BYTES) and _flat(buf, (types.float32,))):
        return None

    def codegen(context, builder, signature, args):
        x_value, source_index, buf_value, even_index, odd_index, zero_point_value, count_value = args
        lane = ir.IntType(32)
        raw = builder.load(_vector_pointer(context, builder, signature.args[0], x_value, source_index, ir.IntType(8),
                                           2 * PAIRS), align=1)
        floats = ir.VectorType(ir.FloatType(), 2 * PAIRS)
        values = (builder.sitofp if signature.args[0].dtype.signed else builder.uitofp)(raw, floats)
        values = builder.fsub(values, _splat(builder, zero_point_value, floats))
        kept = builder.icmp_unsigned("<", ir.Constant(ir.VectorType(lane, PAIRS), list(range(PAIRS))),
                                     _splat(builder, builder.trunc(count_value, lane), ir.VectorType(lane, PAIRS)))
        for first, index in ((0, even_index), (1, odd_index)):
            phase = builder.shuffle_vector(values, values,
                                           ir.Constant(ir.VectorType(lane, PAIRS), list(range(first, 2 * PAIRS, 2))))
            phase = builder.select(kept, phase, ir.Constant(phase.type, [0.0] * PAIRS))
            builder.store(phase, _vector_pointer(context, builder, signature.args[2], buf_value, index, ir.FloatType(),
                                                 PAIRS), align=4)
        return context.get_dummy_value()

    return types.void(x, types.uint64, buf, types.uint64, types.uint64, types.float32, types.uint64), codegen


@intrinsic(prefer_literal=True)
def copy_bytes(typingctx, target, target_at, source, source_at, count):
    """target[target_at:][:count] = source[source_at:][:count] for ``count`` a constant (16 or 64): one vector
    load and store. The interpreter's strided DMA copies runs of a tile's channels (16 bytes a pixel in a
    16-channel tile), where a byte loop per run took twice as long (LLVM's vector loop needs 64 or more)."""
    if not (_flat(target, (types.uint8,)) and _flat(source, (types.uint8,)) and isinstance(count, types.IntegerLiteral)
            and count.literal_value in (16, 64)):
        return None
    size = count.literal_value

    def codegen(context, builder, signature, args):
        target_value, target_index, source_value, source_index, _ = args
        value = builder.load(_vector_pointer(context, builder, signature.args[2], source_value, source_index,
                                             ir.IntType(8), size), align=1)
        builder.store(value, _vector_pointer(context, builder, signature.args[0], target_value, target_index,
                                             ir.IntType(8), size), align=1)
        return context.get_dummy_value()

    return types.void(target, types.uint64, source, types.uint64, count), codegen
