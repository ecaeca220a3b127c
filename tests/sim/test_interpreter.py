"""The functional interpreter: every unit against the golden model, scheduling, tokens, hazards, bounds."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim import golden
from aipu.sim.machine.arch import DEFAULT, LUT8_ENTRIES, PARAM_DTYPE, Buffer, DType, hardware_config_from_dict
from aipu.sim.machine.isa import EltwiseOp, LutMode, Opcode, PoolMode, RequantMode, Rounding, Unit
from aipu.sim.interpreter import DeadlockError, ExecutionError, HazardError, run
from aipu.sim.machine.errors import BankError
from aipu.sim.interpreter.handlers import HANDLERS
from aipu.sim.machine.ordering import _pattern_offsets, writes_a_byte_twice
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

OUT_ADDR = 0x800


def _vector_program(dram: np.ndarray, op: Command, *, out_bytes: int, loads=(), config=DEFAULT) -> Program:
    """LOADs (-> POOL/LUT unit) then ``op`` then a STORE of ``out_bytes`` from OUT to DRAM at OUT_ADDR."""
    program = Program(config)
    for i, load in enumerate(loads):
        program.append(Command.make(Opcode.LOAD, push=[op.unit] if i == len(loads) - 1 else [], **load))
    program.append(Command.make(op.opcode, pop=[Unit.LOAD] if loads else [], push=[Unit.STORE], **op.args))
    program.append(Command.make(Opcode.STORE, pop=[op.unit], sram_addr=op.args.get("dst_addr", 0),
                                dram_addr=OUT_ADDR, elem_type=DType.INT8, run=out_bytes))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    return program


def _dram(*blobs: tuple[int, np.ndarray], size: int = 0x1000) -> np.ndarray:
    dram = np.zeros(size, np.uint8)
    for address, blob in blobs:
        raw = np.ascontiguousarray(blob).reshape(-1).view(np.uint8)
        dram[address:address + raw.size] = raw
    return dram


def _result(program: Program, dram: np.ndarray, dtype, count: int, **kwargs) -> np.ndarray:
    result = run(program, Memory.create(program.config, dram), **kwargs)
    return result, result.memory.dram[OUT_ADDR:OUT_ADDR + count * np.dtype(dtype).itemsize].view(dtype)


def _load(buffer, dram_addr, nbytes, sram_addr=0):
    return dict(buffer=buffer, sram_addr=sram_addr, dram_addr=dram_addr, elem_type=DType.INT8, run=nbytes)


RNG = np.random.default_rng(7)


def test_every_opcode_has_a_handler():
    assert set(HANDLERS) == set(Opcode)


@pytest.mark.parametrize("out_type", [DType.INT8, DType.UINT8, DType.INT16])
def test_lut8_against_golden(out_type):
    dtype = {DType.INT8: np.int8, DType.UINT8: np.uint8, DType.INT16: np.int16}[out_type]
    info = np.iinfo(dtype)
    table = RNG.integers(max(info.min, -2 ** 15), min(info.max, 2 ** 15 - 1) + 1, LUT8_ENTRIES).astype(np.int16)
    x = RNG.integers(-128, 128, 100).astype(np.int8)
    lut = Command.make(Opcode.LUT, src_buf=Buffer.ACT, count=x.size, mode=LutMode.DIRECT8, in_type=DType.INT8,
                       out_type=out_type, dst_addr=0x40, table_addr=0x10)
    program = _vector_program(_dram(), lut, out_bytes=x.size * np.dtype(dtype).itemsize,
                              loads=[_load(Buffer.ACT, 0, x.size), _load(Buffer.LUT, 0x100, 512, sram_addr=0x10)])
    _, out = _result(program, _dram((0, x), (0x100, table)), dtype, x.size)
    np.testing.assert_array_equal(out, golden.lut8(x, table.astype(dtype)))


def test_lut8_rejects_entries_outside_out_type():
    table = np.full(LUT8_ENTRIES, 300, np.int16)
    lut = Command.make(Opcode.LUT, count=4, mode=LutMode.DIRECT8, in_type=DType.INT8, out_type=DType.INT8)
    program = _vector_program(_dram(), lut, out_bytes=4, loads=[_load(Buffer.LUT, 0x100, 512)])
    with pytest.raises(ExecutionError, match=r"LUT\[0\] LUT: table entries 300..300 do not fit out_type INT8"):
        _result(program, _dram((0x100, table)), np.int8, 4)


def _softmax_program(x: np.ndarray, table: np.ndarray, **fields) -> tuple[Program, np.ndarray]:
    rows, length = x.shape
    softmax = Command.make(Opcode.SOFTMAX, src_buf=Buffer.ACT, dst_addr=0x40, rows=rows, length=length,
                           in_type=DType.INT8, out_type=DType.UINT8, table_addr=0x20, **fields)
    program = _vector_program(_dram(), softmax, out_bytes=x.size,
                              loads=[_load(Buffer.ACT, 0, x.size), _load(Buffer.LUT, 0x400, 1024, sram_addr=0x20)])
    return program, _dram((0, x), (0x400, table))


def test_softmax_against_golden():
    x = RNG.integers(-128, 128, (3, 50)).astype(np.int8)
    table = golden.build_softmax_table(0.08)
    stage = dict(multiplier=65280, shift=8, out_zero_point=2, qmin=0, qmax=250)
    program, dram = _softmax_program(x, table, **stage)
    _, out = _result(program, dram, np.uint8, x.size)
    np.testing.assert_array_equal(out.reshape(x.shape), golden.softmax(x, table, out_dtype=np.uint8, **stage))


def test_softmax_refuses_a_table_outside_the_contract_when_it_runs():
    program, dram = _softmax_program(np.zeros((1, 4), np.int8), np.full(LUT8_ENTRIES, 1 << 21, np.uint32),
                                     multiplier=255, shift=0, qmax=255)
    with pytest.raises(ExecutionError, match=r"LUT\[0\] SOFTMAX: table: entries must lie in 0..2\^20"):
        _result(program, dram, np.uint8, 4)


def test_softmax_fields_are_checked_before_it_runs():
    program, dram = _softmax_program(np.zeros((1, 4), np.int8), golden.build_softmax_table(0.1), multiplier=255,
                                     shift=0, qmin=200, qmax=100)
    with pytest.raises(ExecutionError, match="qmax"):
        _result(program, dram, np.uint8, 4)


def test_lut16_interpolates_and_counts_out_of_range():
    k, f, input_min = 5, 8, -4000
    table = np.sort(RNG.integers(-30000, 30000, 2 ** k + 1)).astype(np.int16)
    x = RNG.integers(-2 ** 15, 2 ** 15, 200).astype(np.int16)
    lut = Command.make(Opcode.LUT, src_buf=Buffer.ACT, count=x.size, mode=LutMode.INTERP16, in_type=DType.INT16,
                       out_type=DType.INT16, table_log2=k, index_shift=f, input_min=input_min, qmin=-20000,
                       qmax=20000, dst_addr=0x40)
    program = _vector_program(_dram(), lut, out_bytes=x.nbytes,
                              loads=[_load(Buffer.ACT, 0, x.nbytes), _load(Buffer.LUT, 0x600, table.nbytes)])
    result, out = _result(program, _dram((0, x), (0x600, table)), np.int16, x.size)
    expected, outside = golden.lut16(x, table, index_shift=f, input_min=input_min, qmin=-20000, qmax=20000,
                                     return_clipped=True)
    np.testing.assert_array_equal(out, expected)
    assert result.stats.lut_out_of_range == {"LUT[0]": outside} and outside > 0


@pytest.mark.parametrize("mode", [PoolMode.MAX, PoolMode.AVG])
def test_pool_against_golden(mode):
    h, w, c = 7, 6, 5
    x = RNG.integers(0, 256, (h, w, c)).astype(np.uint8)
    pool = Command.make(Opcode.POOL, src_buf=Buffer.ACT, in_h=h, in_w=w, channels=c, dtype=DType.UINT8, mode=mode,
                        k_h=3, k_w=2, stride_h=2, stride_w=1, pad_top=1, pad_bottom=1, pad_right=1,
                        zero_point=17 if mode == PoolMode.AVG else 0, rounding=Rounding.HALF_TO_EVEN,
                        dst_addr=0x100)
    nchw = x.transpose(2, 0, 1)[None]
    geometry = dict(stride=(2, 1), padding=(1, 0, 1, 1))
    if mode == PoolMode.MAX:
        expected = golden.max_pool2d(nchw, (3, 2), **geometry)
    else:
        expected = golden.avg_pool2d(nchw, (3, 2), x_zero_point=17, rounding="half_to_even", **geometry)
    expected = expected[0].transpose(1, 2, 0)
    program = _vector_program(_dram(), pool, out_bytes=expected.size, loads=[_load(Buffer.ACT, 0, x.size)])
    _, out = _result(program, _dram((0, x)), np.uint8, expected.size)
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)


@pytest.mark.parametrize("op", list(EltwiseOp))
def test_eltwise_against_golden(op):
    a = RNG.integers(-128, 128, 64).astype(np.int8)
    b = RNG.integers(0, 256, 64).astype(np.uint8)
    fields = dict(op=op, a_buf=Buffer.ACT, a_addr=0, a_type=DType.INT8, a_zero_point=-3, a_multiplier=23000,
                  a_shift=15, out_zero_point=4, rounding=Rounding.HALF_AWAY_FROM_ZERO, qmin=-100, qmax=100,
                  out_type=DType.INT8, dst_addr=0x80, count=a.size)
    common = dict(out_zero_point=4, qmin=-100, qmax=100, out_dtype=np.int8, rounding="half_away_from_zero")
    if op == EltwiseOp.RESCALE:
        expected = golden.concat([a], axis=0, zero_points=[-3], multipliers=[23000], shifts=[15], **common)
    elif op == EltwiseOp.MUL:
        fields.update(b_buf=Buffer.ACT, b_addr=0x40, b_type=DType.UINT8, b_zero_point=128, a_shift=20)
        expected, saturated = golden.eltwise(a, b, "mul", multiplier=23000, shift=20, a_zero_point=-3,
                                             b_zero_point=128, return_saturated=True, **common)
    else:
        fields.update(b_buf=Buffer.ACT, b_addr=0x40, b_type=DType.UINT8, b_zero_point=128, b_multiplier=41000,
                      b_shift=16)
        expected, saturated = golden.eltwise(a, b, op.name.lower(), multiplier=(23000, 41000), shift=(15, 16),
                                             a_zero_point=-3, b_zero_point=128, return_saturated=True, **common)
    program = _vector_program(_dram(), Command.make(Opcode.ELTWISE, **fields), out_bytes=a.size,
                              loads=[_load(Buffer.ACT, 0, 0x80)])
    result, out = _result(program, _dram((0, a), (0x40, b)), np.int8, a.size)
    np.testing.assert_array_equal(out, expected)
    if op != EltwiseOp.RESCALE:
        assert result.stats.saturations == {"POOL[0]": saturated}


def test_eltwise_rescale_rejects_b_fields():
    cmd = Command.make(Opcode.ELTWISE, op=EltwiseOp.RESCALE, b_multiplier=5, count=4, qmin=-128, qmax=127)
    with pytest.raises(ExecutionError, match=r"POOL\[0\] ELTWISE: field b_multiplier = 5 must be 0 for RESCALE"):
        _result(_vector_program(_dram(), cmd, out_bytes=4), _dram(), np.int8, 4)


@pytest.mark.parametrize("dst_addr", [0x80, DEFAULT.bank_bytes(Buffer.OUT)])
def test_eltwise_operands_and_result_share_a_bank_two_at_most(dst_addr):
    cmd = Command.make(Opcode.ELTWISE, op=EltwiseOp.ADD, a_buf=Buffer.OUT, b_buf=Buffer.OUT, a_addr=0, b_addr=0x40,
                       dst_addr=dst_addr, count=4, qmin=-128, qmax=127)
    program = Program()
    program.append(cmd)
    program.append(Command.make(Opcode.FINISH, unit=Unit.POOL))
    if dst_addr < DEFAULT.bank_bytes(Buffer.OUT):
        with pytest.raises(ExecutionError, match=r"POOL\[0\] ELTWISE: a_addr = 0x0, b_addr = 0x40 and dst_addr = 0x80 "
                                                 r"all lie in OUT bank 0: a bank serves two accesses a cycle"):
            run(program, Memory.create(DEFAULT, 64))
    else:
        run(program, Memory.create(DEFAULT, 64))


def _bare_stream(container: bytes) -> np.ndarray:
    from aipu.codec.api import read_index

    (info,), payload = read_index(container)
    return np.frombuffer(container[payload + info.offset:payload + info.offset + info.length], np.uint8)


def test_wdec_decodes_a_profile_stream_into_the_weight_buffer():
    from aipu.codec import encode_profile_stream

    w = RNG.integers(-40, 40, size=(6, 3, 3, 2)).astype(np.int8)       # [O, I, KH, KW]
    stream = np.frombuffer(encode_profile_stream(w), np.uint8)
    program = Program()
    program.append(Command.make(Opcode.WDEC, dram_addr=0x100, length=stream.size, wgt_addr=0x20, out_c=6, in_c=3,
                                k_h=3, k_w=2))
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    result = run(program, Memory.create(DEFAULT, _dram((0x100, stream))))
    weights = result.memory.buffers[Buffer.WEIGHT][0x20:0x20 + w.size].view(np.int8).reshape(6, 3, 2, 3)
    np.testing.assert_array_equal(weights, w.transpose(0, 2, 3, 1))
    assert result.stats.bytes_moved["WDEC->WEIGHT"] == w.size
    bad = stream.copy()
    bad[3:] = 0xFF
    with pytest.raises(ExecutionError, match=r"WDEC\[0\] WDEC: "):
        run(program, Memory.create(DEFAULT, _dram((0x100, bad))))


@pytest.mark.parametrize("parts", [2, 5])
def test_wdec_decodes_a_parts_stream_to_the_levels_of_the_unsplit_tile(parts):
    """A stream of ``parts`` parts (docs/codec.md §11) writes every level where the one-part stream writes it;
    a corrupt part is refused naming the part."""
    from aipu.codec import encode_parts_stream

    config = hardware_config_from_dict({**DEFAULT.to_dict(), "wdec": {"engines": parts}})     # a decoder a part
    w = RNG.integers(-40, 40, size=(7, 3, 3, 2)).astype(np.int8)
    stream = np.frombuffer(encode_parts_stream(w, parts), np.uint8)
    program = Program(config)
    program.append(Command.make(Opcode.WDEC, dram_addr=0x100, length=stream.size, wgt_addr=0x20, out_c=7, in_c=3,
                                k_h=3, k_w=2, parts=parts))
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    result = run(program, Memory.create(config, _dram((0x100, stream))))
    weights = result.memory.buffers[Buffer.WEIGHT][0x20:0x20 + w.size].view(np.int8).reshape(7, 3, 2, 3)
    np.testing.assert_array_equal(weights, w.transpose(0, 2, 3, 1))
    bad = stream.copy()
    bad[-3:] = 0xFF
    with pytest.raises(ExecutionError, match=rf"WDEC\[0\] WDEC: .*part {parts - 1}"):
        run(program, Memory.create(config, _dram((0x100, bad))))
    program = Program()                                  # one part decoder: one part a stream
    program.append(Command.make(Opcode.WDEC, dram_addr=0x100, length=stream.size, wgt_addr=0x20, out_c=7, in_c=3,
                                k_h=3, k_w=2, parts=parts))
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    with pytest.raises(ExecutionError, match=rf"field parts = {parts}: .* at most min\(wdec.engines, out_c\) = 1"):
        run(program, Memory.create(DEFAULT, _dram((0x100, stream))))


def test_wdec_refuses_the_full_syntax_as_the_hardware_does():
    """A stream of the general encoder (here with start-depth signalling) decodes in codec/ but is outside
    the profile WDEC executes: the interpreter refuses it at the element, as rtl/wdec.py does."""
    from aipu.codec import encode

    w = RNG.integers(-40, 40, size=(6, 3, 3, 2)).astype(np.int8)
    stream = _bare_stream(encode({"w": w}))
    program = Program()
    program.append(Command.make(Opcode.WDEC, dram_addr=0x100, length=stream.size, wgt_addr=0, out_c=6, in_c=3,
                                k_h=3, k_w=2))
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    with pytest.raises(ExecutionError, match=r"WDEC\[0\] WDEC: .*outside the npu profile"):
        run(program, Memory.create(DEFAULT, _dram((0x100, stream))))


# --- scheduling, tokens, hazards, bounds -----------------------------------------------------------------
def _two_unit(load_push=(Unit.CONV,), conv_pop=(Unit.LOAD,), config=DEFAULT) -> Program:
    program = Program(config)
    program.append(Command.make(Opcode.LOAD, buffer=Buffer.ACT, run=4, push=load_push))
    program.append(Command.make(Opcode.CONV, in_c=4, out_c=1, pop=conv_pop))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    return program


def test_deadlock_is_reported_with_the_waiting_command():
    with pytest.raises(DeadlockError, match=r"CONV\[0\] CONV waits for a token LOAD->CONV \(0 available\)"):
        run(_two_unit(load_push=()), Memory.create(DEFAULT, 64))


def test_full_token_queue_stalls_the_producer():
    config = hardware_config_from_dict({"queues": {"token_depth": 1}})
    program = Program(config)
    for _ in range(2):
        program.append(Command.make(Opcode.LOAD, buffer=Buffer.ACT, run=4, push=[Unit.CONV]))
    program.append(Command.make(Opcode.CONV, in_c=4, out_c=1, pop=[Unit.LOAD, Unit.REQUANT]))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(DeadlockError, match=r"LOAD\[1\] LOAD cannot push LOAD->CONV: token queue full \(1/1\)"):
        run(program, Memory.create(config, 64))


def test_leftover_tokens_are_reported_at_finish():
    with pytest.raises(ExecutionError, match=r"unbalanced tokens left in queues \{'LOAD->CONV': 1\}"):
        run(_two_unit(conv_pop=()), Memory.create(DEFAULT, 64), check_hazards=False)


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3])
def test_unordered_write_and_read_is_a_hazard_in_every_schedule(seed):
    with pytest.raises(HazardError, match=r"(LOAD\[0\] \(write\) and CONV\[0\] \(read\)|CONV\[0\] \(read\) and "
                                          r"LOAD\[0\] \(write\)) are not ordered by tokens but both access "
                                          r"ACT \[0x0, 0x4\)"):
        run(_two_unit(load_push=(), conv_pop=()), Memory.create(DEFAULT, 64), seed=seed)


@pytest.mark.parametrize("pool_addr", [0x100, DEFAULT.bank_bytes(Buffer.ACT)])
def test_two_units_share_a_bank_only_in_token_order(pool_addr):
    """CONV and POOL read disjoint ACT bytes with no token between them: legal in different banks only."""
    program = Program()
    program.append(Command.make(Opcode.CONV, in_h=1, in_w=1, in_c=4, out_c=1))
    program.append(Command.make(Opcode.POOL, src_buf=Buffer.ACT, src_addr=pool_addr, in_h=2, in_w=2, channels=4,
                                dtype=DType.INT8, k_h=2, k_w=2, dst_addr=0x100))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    if pool_addr < DEFAULT.bank_bytes(Buffer.ACT):
        with pytest.raises(BankError, match=r"(CONV\[0\] and POOL\[0\]|POOL\[0\] and CONV\[0\]) are not ordered by "
                                            r"tokens but both use ACT bank 0 \[0x0, 0x20000\)"):
            run(program, Memory.create(DEFAULT, 64))
    else:
        run(program, Memory.create(DEFAULT, 64))


def test_out_of_bounds_accesses_name_command_field_and_address():
    program = Program()
    program.append(Command.make(Opcode.LOAD, buffer=Buffer.ACT, dram_addr=60, run=8))
    program.append(Command.make(Opcode.FINISH, unit=Unit.LOAD))
    with pytest.raises(ExecutionError, match=r"LOAD\[0\] LOAD: field dram_addr = 0x3c: strided access reaches "
                                             r"byte 0x43, beyond DRAM \(0x40 bytes\)"):
        run(program, Memory.create(DEFAULT, 64))
    program = Program()
    program.append(Command.make(Opcode.CONV, in_addr=DEFAULT.buffers.act.bytes - 8, in_h=2, in_w=2, in_c=4,
                                out_c=1))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(ExecutionError, match=r"CONV\[0\] CONV: field in_addr = 0x3fff8: access of 16 bytes ends "
                                             r"at byte 0x40008, beyond ACT"):
        run(program, Memory.create(DEFAULT, 64))


def test_store_pattern_that_overlaps_itself_is_rejected():
    program = Program()
    program.append(Command.make(Opcode.STORE, x_size=2, run=4, dram_x_stride=2))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    with pytest.raises(ExecutionError, match="writes some bytes twice"):
        run(program, Memory.create(DEFAULT, 64))


def test_memory_and_program_configs_must_agree():
    config = hardware_config_from_dict({"mac": {"rows": 8}})
    with pytest.raises(ValueError, match="memory image is for config"):
        run(_two_unit(), Memory.create(config, 64))


def test_a_run_leaves_its_input_image_alone_unless_in_place():
    """By default the run works on a copy; in_place runs on the caller's image (no copy) to the same result."""
    table = RNG.integers(-128, 128, LUT8_ENTRIES).astype(np.int16)
    x = RNG.integers(-128, 128, 64).astype(np.int8)
    lut = Command.make(Opcode.LUT, src_buf=Buffer.ACT, count=x.size, mode=LutMode.DIRECT8, in_type=DType.INT8,
                       out_type=DType.INT8, dst_addr=0x40, table_addr=0x10)
    program = _vector_program(_dram(), lut, out_bytes=x.size,
                              loads=[_load(Buffer.ACT, 0, x.size), _load(Buffer.LUT, 0x100, 512, sram_addr=0x10)])
    image = Memory.create(DEFAULT, _dram((0, x), (0x100, table)))
    before = image.copy()
    copied = run(program, image)
    assert image == before and copied.memory is not image
    in_place = run(program, image, in_place=True)
    assert in_place.memory is image and image == copied.memory and image != before
    out = image.dram[OUT_ADDR:OUT_ADDR + x.size].view(np.int8)
    np.testing.assert_array_equal(out, golden.lut8(x, table.astype(np.int8)))


@pytest.mark.parametrize("mode", ["native", "leaky", "float32"])
def test_requant_modes_against_golden(mode):
    pixels, channels = 9, 5
    acc = RNG.integers(-2 ** 20, 2 ** 20, (pixels, channels)).astype(np.int32)
    records = np.zeros(channels, PARAM_DTYPE)
    records["bias"] = RNG.integers(-1000, 1000, channels)
    records["multiplier"] = RNG.integers(1, 2 ** 16, channels)
    records["shift"] = RNG.integers(18, 26, channels)
    records["negative_multiplier"] = RNG.integers(1, 2 ** 16, channels)
    records["negative_shift"] = RNG.integers(20, 30, channels)
    records["scale"] = RNG.uniform(1e-5, 1e-3, channels).astype(np.float32)
    memory = Memory.create(DEFAULT, 0x1000)
    memory.buffers[Buffer.ACC][0x40:0x40 + acc.nbytes] = acc.reshape(-1).view(np.uint8)
    memory.buffers[Buffer.PARAM][3 * 16:3 * 16 + records.nbytes] = records.view(np.uint8)
    requant = Command.make(Opcode.REQUANT, acc_addr=0x10, out_addr=0x20, pixels=pixels, channels=channels,
                           param_index=3, out_type=DType.UINT8, out_zero_point=30, qmin=10, qmax=250,
                           mode=RequantMode.FLOAT32 if mode == "float32" else RequantMode.NATIVE,
                           rounding=Rounding.HALF_TO_EVEN, leaky=int(mode == "leaky"), push=[Unit.STORE])
    program = Program()
    program.append(requant)
    program.append(Command.make(Opcode.STORE, pop=[Unit.REQUANT], sram_addr=0x20, dram_addr=OUT_ADDR,
                                run=acc.size))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    result = run(program, memory)
    common = dict(bias=records["bias"], out_zero_point=30, qmin=10, qmax=250, out_dtype=np.uint8, channel_axis=1,
                  return_saturated=True)
    if mode == "float32":
        expected, saturated = golden.requantize_float32(acc, scale=records["scale"], **common)
    else:
        leaky = (dict(negative_multiplier=records["negative_multiplier"].astype(np.int64),
                      negative_shift=records["negative_shift"].astype(np.int64)) if mode == "leaky" else {})
        expected, saturated = golden.requantize(acc, multiplier=records["multiplier"].astype(np.int64),
                                                shift=records["shift"].astype(np.int64), rounding="half_to_even",
                                                **leaky, **common)
    out = result.memory.dram[OUT_ADDR:OUT_ADDR + acc.size].reshape(pixels, channels)
    np.testing.assert_array_equal(out, expected)
    assert result.stats.saturations == {"REQUANT[0]": saturated}


def test_requant_rejects_nonzero_reserved_record_bits():
    memory = Memory.create(DEFAULT, 64)
    memory.buffers[Buffer.PARAM][PARAM_DTYPE.itemsize + PARAM_DTYPE.fields["reserved"][1]] = 1   # record 1
    program = Program()
    program.append(Command.make(Opcode.REQUANT, channels=2, qmin=-128, qmax=127))
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    with pytest.raises(ExecutionError, match=r"REQUANT\[0\] REQUANT: parameter record 1 has non-zero reserved"):
        run(program, memory)


@pytest.mark.parametrize("store_offset, hazard", [(4, False), (2, True)])
def test_strided_dram_accesses_are_compared_byte_exactly(store_offset, hazard):
    """LOAD reads channels 0..3 of 8-channel pixels while STORE writes channels 4..7 (disjoint, no hazard
    although the bounding intervals overlap) or 2..5 (overlap: hazard); no token orders them."""
    program = Program()
    program.append(Command.make(Opcode.LOAD, buffer=Buffer.ACT, x_size=6, run=4, dram_x_stride=8))
    program.append(Command.make(Opcode.STORE, dram_addr=store_offset, x_size=6, run=4, dram_x_stride=8))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    for seed in (None, 1, 2):
        if hazard:
            with pytest.raises(HazardError, match=r"both access DRAM"):
                run(program, Memory.create(DEFAULT, 64), seed=seed)
        else:
            run(program, Memory.create(DEFAULT, 64), seed=seed)


@pytest.mark.parametrize("second_half", [True, False])
def test_accumulator_wraps_and_only_consumed_sums_must_fit(second_half):
    """D6: partial sums may leave int32 (the register wraps); a sum REQUANT consumes must fit, else an error."""
    taps_c, kernel = 4000, 3                       # 36000 taps of 255 * 255 = 65025: 2.34e9 > 2**31
    memory = Memory.create(DEFAULT, 0x1000)
    memory.buffers[Buffer.ACT][:kernel * kernel * taps_c] = 255                          # uint8 x, zero point 0
    memory.buffers[Buffer.WEIGHT][:kernel * kernel * taps_c] = np.uint8(127)             # int8 +127, w_zp -128
    memory.buffers[Buffer.WEIGHT][0x10000:0x10000 + kernel * kernel * taps_c] = np.uint8(0x80)   # -128, w_zp 127
    records = np.zeros(1, PARAM_DTYPE)
    records["multiplier"], records["shift"] = 1, 0
    memory.buffers[Buffer.PARAM][:records.nbytes] = records.view(np.uint8)
    conv = dict(in_addr=0, in_h=kernel, in_w=kernel, in_c=taps_c, in_type=DType.UINT8, out_c=1, k_h=kernel,
                k_w=kernel, acc_addr=0)
    program = Program()
    program.append(Command.make(Opcode.CONV, wgt_addr=0, w_zero_point=-128, push=[] if second_half else [Unit.REQUANT],
                                **conv))
    if second_half:   # brings the exact sum back to 0: (255 * 255 - 255 * 255) * 36000
        program.append(Command.make(Opcode.CONV, wgt_addr=0x10000, w_zero_point=127, accumulate=1,
                                    push=[Unit.REQUANT], **conv))
    program.append(Command.make(Opcode.REQUANT, pop=[Unit.CONV], acc_addr=0, out_addr=0, pixels=1, channels=1,
                                param_index=0, out_type=DType.INT8, qmin=-128, qmax=127))
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    if second_half:
        result = run(program, memory)
        assert result.memory.buffers[Buffer.OUT][0] == 0
    else:
        with pytest.raises(ExecutionError, match=r"REQUANT\[0\] REQUANT: accumulator sum 2340900000 does not fit"):
            run(program, memory)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.integers(0, 40), st.integers(1, 6), st.integers(0, 12), st.integers(1, 10))
def test_repeated_store_bytes_are_found_without_sorting(y_size, y_stride, x_size, x_stride, run):
    """The overlap check of a STORE pattern (a shortcut for rows laid out apart, else marks) agrees with
    np.unique on every small pattern."""
    pattern = (7, y_size, y_stride, x_size, x_stride, run)
    offsets = _pattern_offsets(*pattern)
    assert writes_a_byte_twice(pattern) == (np.unique(offsets).size != offsets.size)
