"""Hardware configuration, command encoding and the program container."""
from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.machine.arch import (DEFAULT, WIDEST, Buffer, DType, HardwareConfig, hardware_config_from_dict,
                                load_hardware_config)
from aipu.sim.machine.isa import (COMMAND_BITS, COMMAND_BYTES, COMMANDS, ISA_LAYOUT_HASH, TOKEN_MASK_BITS, EltwiseOp,
                               IndexBits, LutMode, Opcode, PoolMode, RequantMode, Rounding, Unit)
from aipu.sim.machine.program import FORMAT_VERSION, MAGIC, Command, Program

SMALL = hardware_config_from_dict({"buffers": {"act": {"bytes": 1024}, "acc": {"bytes": 256}},
                                   "dram": {"address_bits": 20}})


# --- configuration --------------------------------------------------------------------------------
def test_shipped_example_config_is_the_default(repo_root):
    assert load_hardware_config(repo_root / "sim/machine/default.toml") == DEFAULT


def test_config_json_round_trip(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(SMALL.to_dict()))
    assert load_hardware_config(path) == SMALL
    assert SMALL.config_hash() != DEFAULT.config_hash()


def test_address_widths_are_derived_from_sizes():
    assert DEFAULT.address_bits(Buffer.ACT) == (DEFAULT.buffers.act.bytes - 1).bit_length()
    assert SMALL.address_bits(Buffer.ACT) == 10
    assert SMALL.address_bits(Buffer.ACC) == 6           # 256 bytes = 64 int32 entries
    assert SMALL.width_parameters["dram_addr_bits"] == 20


@pytest.mark.parametrize("data, message", [
    ({"mac": {"rows": 0}}, "mac.rows = 0"),
    ({"buffers": {"act": {"bytes": 1000}}}, "buffers.act.bytes = 1000: must be a power of two"),
    ({"buffers": {"out": {"port_bytes": 12}}}, "buffers.out.port_bytes = 12"),
    ({"clock": 5}, "clock = 5: unknown key"),
    ({"buffers": {"act": {"size": 3}}}, "buffers.act.size = 3: unknown key"),
    ({"clock_mhz": "fast"}, "clock_mhz = 'fast': expected an integer"),
    ({"clock_mhz": 1.5}, "clock_mhz = 1.5: expected an integer"),
    ({"dram": {"latency_cycles": True}}, "dram.latency_cycles = True"),
    ({"buffers": {"act": 5}}, "buffers.act = 5: expected a table"),
    ({"queues": {"token_depth": -1}}, "queues.token_depth = -1: must be positive"),
    ({"buffers": {"param": {"bytes": 8}}}, "buffers.param.bytes = 8"),
    ({"dram": {"latency_cycles": 2}}, "dram.latency_cycles = 2: at least 3"),
    ({"buffers": {"out": {"bytes": 32, "port_bytes": 16}}}, "buffers.out.bytes = 32: at least 4 words"),
    ({"buffers": {"act": {"bytes": 2 ** 40}}}, "buffers.act.bytes = 1099511627776: at most 67108864"),
    ({"mac": {"rows": 2 ** 20, "cols": 2 ** 20}}, "mac.rows = 1048576: at most 4096"),
])
def test_bad_config_names_key_and_value(data, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        hardware_config_from_dict(data)


def test_bad_config_file_suffix(tmp_path):
    with pytest.raises(ValueError, match="expected a .toml or .json"):
        load_hardware_config(tmp_path / "c.yaml")


@pytest.mark.parametrize("config", [DEFAULT, WIDEST], ids=["default", "widest"])
def test_every_command_fits_its_word(config):
    for spec in COMMANDS.values():
        fld, offset, width = spec.layout(config)[-1]
        assert offset + width <= COMMAND_BITS
        assert spec.layout(config)[0][0].name == "opcode" and spec.layout(config)[0][1] == 0


def test_token_masks_have_a_fixed_width_with_room_for_more_units():
    for spec in COMMANDS.values():
        header = {fld.name: width for fld, _, width in spec.layout(DEFAULT)[:3]}
        assert header["pop"] == header["push"] == TOKEN_MASK_BITS > len(Unit)


# --- encoding ---------------------------------------------------------------------------------------
def _field_values(fld, config):
    legal = fld.legal_values()
    if legal is not None:
        return st.sampled_from([int(v) for v in legal])
    low, high = fld.legal_range(config)
    return st.one_of(st.sampled_from([low, high]), st.integers(low, high))


@st.composite
def commands(draw, config=DEFAULT):
    spec = COMMANDS[draw(st.sampled_from(list(Opcode)))]
    args = {fld.name: draw(_field_values(fld, config)) for fld in spec.fields}
    unit = spec.unit if spec.unit is not None else Unit(args["unit"])
    others = [u for u in Unit if u != unit]
    pop = draw(st.sets(st.sampled_from(others)))
    push = draw(st.sets(st.sampled_from(others))) if spec.opcode != Opcode.FINISH else set()
    return Command.make(spec.opcode, pop=pop, push=push, **args)


@settings(max_examples=400, deadline=None)
@given(commands())
def test_encode_decode_is_identity(command):
    word = command.encode()
    assert len(word) == COMMAND_BYTES
    assert Command.decode(word) == command
    assert Command.decode(word).encode() == word


@settings(max_examples=100, deadline=None)
@given(commands(SMALL))
def test_encode_decode_with_a_small_config(command):
    assert Command.decode(command.encode(SMALL), SMALL) == command


def _word(command: Command, **raw_fields) -> bytes:
    """Encode, then overwrite raw bit fields (bypassing validation) to build malformed words."""
    word = int.from_bytes(command.encode(), "little")
    for fld, offset, width in command.spec.layout(DEFAULT):
        if fld.name in raw_fields:
            word &= ~(((1 << width) - 1) << offset)
            word |= (raw_fields[fld.name] & ((1 << width) - 1)) << offset
    return word.to_bytes(COMMAND_BYTES, "little")


CONV = Command.make(Opcode.CONV, in_h=3, in_w=3, in_c=8, out_c=8, k_h=3, k_w=3)


@pytest.mark.parametrize("raw, message", [
    ({"opcode": 0}, "field opcode = 0: unknown opcode"),
    ({"opcode": 15}, "field opcode = 15: unknown opcode"),
    ({"stride_h": 0}, "CONV field stride_h = 0: outside legal range 1..7"),
    ({"k_w": 0}, "CONV field k_w = 0: outside legal range 1..15"),
    ({"in_type": 2}, "CONV field in_type = 2: not one of INT8=0, UINT8=1, INT4=3"),
    ({"w_type": 1}, "CONV field w_type = 1: not one of INT8=0, INT4=3"),
    ({"pop": 1 << int(Unit.CONV)}, r"CONV field pop = \['CONV'\]: names its own unit CONV"),
    ({"push": 0x7F}, "CONV field push = .*: names its own unit CONV"),
    ({"pop": 1 << len(Unit)}, f"CONV field pop = {1 << len(Unit)}: bit {len(Unit)} and up name no unit"),
])
def test_malformed_word_names_field_and_value(raw, message):
    with pytest.raises(ValueError, match=message):
        Command.decode(_word(CONV, **raw))


def test_reserved_bits_must_be_zero():
    word = bytearray(CONV.encode())
    word[-1] |= 0x80
    with pytest.raises(ValueError, match="CONV: reserved bits .* must be zero"):
        Command.decode(bytes(word))


def test_enum_field_outside_its_legal_subset():
    load = Command.make(Opcode.LOAD, buffer=Buffer.ACT)
    with pytest.raises(ValueError, match="LOAD field buffer = 2: not one of ACT=0, WEIGHT=1, LUT=4, PARAM=5"):
        Command.decode(_word(load, buffer=int(Buffer.ACC)))


def test_signed_field_decodes_negative_values():
    command = Command.make(Opcode.REQUANT, out_zero_point=-5, qmin=-32768, qmax=32767)
    assert Command.decode(command.encode()).args["qmin"] == -32768


def test_int4_outputs_are_requant_only():
    """REQUANT writes INT4 (two a byte); the other units' outputs stay whole bytes."""
    assert Command.decode(Command.make(Opcode.REQUANT, out_type=DType.INT4).encode()).args["out_type"] == DType.INT4
    for opcode in (Opcode.LUT, Opcode.SOFTMAX, Opcode.ELTWISE):
        with pytest.raises(ValueError, match=f"{opcode.name} field out_type = 3: not one of INT8=0, UINT8=1, INT16=2"):
            Command.make(opcode, out_type=DType.INT4).encode()


def test_encode_rejects_out_of_range_and_wrong_types():
    with pytest.raises(ValueError, match="LOAD field pad_top = 16: outside legal range 0..15"):
        Command.make(Opcode.LOAD, pad_top=16).encode()
    with pytest.raises(ValueError, match="CONV field in_addr = 1024: outside legal range 0..1023"):
        Command.make(Opcode.CONV, in_addr=1024).encode(SMALL)
    with pytest.raises(ValueError, match="field stride_h = '2'"):
        Command.make(Opcode.CONV, stride_h="2").encode()
    with pytest.raises(ValueError, match="FINISH may not push"):
        Command.make(Opcode.FINISH, unit=Unit.STORE, push=[Unit.LOAD]).encode()
    with pytest.raises(ValueError, match="unknown field"):
        Command.make(Opcode.CONV, stirde=1)
    with pytest.raises(ValueError, match="expected 32"):
        Command.decode(b"\x01" * 5)


# --- pinned words: the encoding itself -----------------------------------------------------------------
# Known words under the default configuration (hex of the 32 little-endian bytes), two per opcode: one with
# every field at its smallest legal value, one with tokens and values across the ranges (negative signed
# fields, maxima). Any change to the packing fails here and must be made deliberately, together with
# FORMAT_VERSION and the pinned ISA layout hash.
PINNED_WORDS = [
    (Command.make(Opcode.LOAD, push=[Unit.CONV]),
     "0100040000000000000008000800080000000000000000000000000000000000"),
    (Command.make(Opcode.LOAD, pop=[Unit.STORE], push=[Unit.CONV, Unit.REQUANT], buffer=Buffer.WEIGHT,
                  sram_addr=0x1234, dram_addr=0xDEADBEEF, elem_type=DType.INT16, y_size=3, x_size=5, run=7,
                  dram_y_stride=1000, dram_x_stride=20, pad_top=1, pad_bottom=2, pad_left=3, pad_right=4,
                  pad_value=-129),
     "01040c101a09de7d5bbd1d0028003800401f00a000000819fafb070000000000"),
    (Command.make(Opcode.LOAD, push=[Unit.CONV], buffer=Buffer.WEIGHT, sram_addr=0x40, dram_addr=0x1000, run=64,
                  index_bits=IndexBits.FOUR, codebook_addr=0xFFFF),
     "0100041020000020000008000800000200000000000000000000e0ff3f000000"),
    (Command.make(Opcode.LOAD, push=[Unit.CONV], buffer=Buffer.WEIGHT, sram_addr=0x40, dram_addr=0x1000, y_size=8,
                  x_size=9, run=32, dram_y_stride=288, dram_x_stride=32, codebook_addr=3, circ_log2=3),
     "0100041020000020000040004800000100090000010000000000c000c0000000"),
    (Command.make(Opcode.STORE, pop=[Unit.REQUANT]),
     "8200000000000000004000400040000000000000000000000000000000000000"),
    (Command.make(Opcode.STORE, pop=[Unit.LUT], push=[Unit.LOAD], sram_addr=0xFFFF, dram_addr=0x40,
                  elem_type=DType.UINT8, y_size=65535, x_size=2, run=16, dram_y_stride=0xFFFFFF, dram_x_stride=16),
     "020101f0ff0f040000d0ffbf000004c0ffff3f04000000000000000000000000"),
    (Command.make(Opcode.CONV),
     "0300000000400004400000000000800088489200000000000000000000000000"),
    (Command.make(Opcode.CONV, pop=[Unit.LOAD, Unit.REQUANT], push=[Unit.LOAD, Unit.REQUANT], in_addr=0x3FFFF, in_h=9,
                  in_w=4095, in_c=3, in_type=DType.UINT8, in_zero_point=-255, wgt_addr=0x100, w_zero_point=-128,
                  out_c=64, k_h=3, k_w=15, stride_h=2, stride_w=7, dilation_h=1, dilation_w=3, groups=1,
                  acc_addr=0x2000, accumulate=1),
     "930009f0ff7f02fcff0014102000402098d7b300000003000000000000000000"),
    (Command.make(Opcode.DWCONV),
     "0b00000000400004400000000000808824010000000000000000000000000000"),
    (Command.make(Opcode.DWCONV, pop=[Unit.LOAD], push=[Unit.LOAD, Unit.REQUANT], in_addr=0x3FFFF, in_h=18,
                  in_w=4095, channels=16, in_type=DType.INT8, in_zero_point=-3, wgt_addr=0x20001, w_zero_point=-128,
                  k_h=5, k_w=5, stride_h=2, stride_w=7, dilation_h=1, dilation_w=3, acc_addr=0x2000, accumulate=1),
     "1b0009f0ffbf04fc3f04d03f0040c02a3d030003000000000000000000000000"),
    (Command.make(Opcode.REQUANT),
     "0400000000000004000400000000000000000000000000000000000000000000"),
    (Command.make(Opcode.REQUANT, pop=[Unit.CONV, Unit.LOAD], push=[Unit.STORE], acc_addr=0x3FFF, out_addr=0x8000,
                  pixels=300, channels=17, param_index=511, out_type=DType.INT16, out_zero_point=-7, qmin=-32768,
                  qmax=32767, mode=RequantMode.NATIVE, rounding=Rounding.HALF_AWAY_FROM_ZERO, leaky=1),
     "540040f0ff0300b20444c07ff3ff0100ffff3800000000000000000000000000"),
    (Command.make(Opcode.LUT),
     "0500000000000000020000000000000000000000000000000000000000000000"),
    (Command.make(Opcode.LUT, pop=[Unit.REQUANT], push=[Unit.STORE], src_buf=Buffer.OUT, src_addr=0x20, dst_addr=0x20,
                  count=1 << 19, mode=LutMode.INTERP16, in_type=DType.INT16, out_type=DType.INT16, table_addr=0xFFF,
                  table_log2=10, index_shift=16, input_min=-32768, qmin=-1000, qmax=1000),
     "85004030100040000000b0febf4200400c7ef401000000000000000000000000"),
    (Command.make(Opcode.POOL),
     "0600000000000000022000020011490200000000000000000000000000000000"),
    (Command.make(Opcode.POOL, pop=[Unit.LOAD], push=[Unit.STORE], src_addr=0x10, dst_addr=0x200, in_h=7, in_w=8,
                  channels=32, dtype=DType.UINT8, mode=PoolMode.AVG, k_h=3, k_w=2, stride_h=2, stride_w=1,
                  pad_top=1, pad_left=0, pad_bottom=1, pad_right=1, count_include_pad=1, zero_point=128,
                  rounding=Rounding.HALF_TO_EVEN),
     "16004000080000040e000140a0234a1210111040000000000000000000000000"),
    (Command.make(Opcode.ELTWISE),
     "0700000000000000000000020000000000000000000000000000000000000000"),
    (Command.make(Opcode.ELTWISE, pop=[Unit.LOAD], push=[Unit.STORE, Unit.LUT], op=EltwiseOp.SUB, a_buf=Buffer.OUT,
                  a_addr=0x100, b_buf=Buffer.ACT, b_addr=0x3FFFF, dst_addr=0x400, count=1000, a_type=DType.UINT8,
                  b_type=DType.INT8, out_type=DType.UINT8, a_zero_point=255, b_zero_point=-128, out_zero_point=3,
                  a_multiplier=40000, a_shift=20, b_multiplier=65535, b_shift=47, rounding=Rounding.FLOOR, qmin=0,
                  qmax=200),
     "17005090010480ffff0108d00720fa077800008893faff7f0100400600000000"),
    (Command.make(Opcode.WDEC),
     "0800000000000010000000004000044044000000000000000000000000000000"),
    (Command.make(Opcode.WDEC, push=[Unit.CONV], dram_addr=0x1000, length=12345, wgt_addr=0x800, out_c=16, in_c=8,
                  k_h=3, k_w=3, parts=5),
     "080004000001009003030080000420c04c010000000000000000000000000000"),
    (Command.make(Opcode.SOFTMAX, rows=1, length=1),
     "0a00000000000000020002000000000000000000000000000000000000000000"),
    (Command.make(Opcode.SOFTMAX, pop=[Unit.LOAD], push=[Unit.STORE], src_buf=Buffer.ACT, src_addr=0x200, dst_addr=0x40,
                  rows=196, length=1000, in_type=DType.INT8, out_type=DType.UINT8, table_addr=0x400, multiplier=65280,
                  shift=8, out_zero_point=0, qmin=0, qmax=255),
     "1a004000000180008801d0870008e01f01000000f80700000000000000000000"),
    (Command.make(Opcode.FINISH, unit=Unit.STORE),
     "0900006000000000000000000000000000000000000000000000000000000000"),
    (Command.make(Opcode.FINISH, pop=[Unit.CONV, Unit.STORE], unit=Unit.LOAD),
     "4904000000000000000000000000000000000000000000000000000000000000"),
]
PINNED_ISA_LAYOUT_HASH = "a9b04af8e8c210cb"


@pytest.mark.parametrize("command, word", PINNED_WORDS, ids=[f"{c.opcode.name}-{i}" for i, (c, _) in
                                                             enumerate(PINNED_WORDS)])
def test_encoding_matches_the_pinned_words(command, word):
    assert command.encode().hex() == word
    assert Command.decode(bytes.fromhex(word)) == command


def test_pinned_words_cover_every_opcode():
    assert {command.opcode for command, _ in PINNED_WORDS} == set(Opcode)


def test_isa_layout_hash_is_pinned():
    assert ISA_LAYOUT_HASH == PINNED_ISA_LAYOUT_HASH, "the command layout changed: update the pinned words, " \
        "PINNED_ISA_LAYOUT_HASH and FORMAT_VERSION together"


# --- program container ------------------------------------------------------------------------------
def _program(config: HardwareConfig = DEFAULT) -> Program:
    program = Program(config)
    program.append(Command.make(Opcode.LOAD, push=[Unit.CONV], y_size=3, x_size=3, run=8, pad_value=-128))
    program.append(Command.make(Opcode.CONV, pop=[Unit.LOAD], push=[Unit.REQUANT], in_h=3, in_w=3, in_c=8,
                                out_c=8, k_h=3, k_w=3))
    program.append(Command.make(Opcode.REQUANT, pop=[Unit.CONV], push=[Unit.STORE], pixels=1, channels=8,
                                qmin=-128, qmax=127))
    program.append(Command.make(Opcode.STORE, pop=[Unit.REQUANT], run=8))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    return program


def test_program_file_round_trip(tmp_path):
    program = _program(SMALL)
    path = tmp_path / "p.bin"
    program.write(path)
    again = Program.read(path)
    assert again.config == SMALL and again.queues == program.queues
    listing = again.disassemble()
    assert "CONV[0]      CONV     pop[LOAD] push[REQUANT]" in listing
    assert "pad_value=-128" in listing and "buffer=ACT" in listing and "STORE[1]     FINISH" in listing
    assert len(listing.splitlines()) == 1 + 4 + len(program)


def test_program_needs_exactly_one_final_finish():
    program = _program()
    program.queues[Unit.STORE].pop()
    with pytest.raises(ValueError, match="FINISH commands = 0: a program has exactly 1"):
        program.to_bytes()
    program = _program()
    program.queues[Unit.STORE].insert(0, program.queues[Unit.STORE].pop())
    with pytest.raises(ValueError, match=r"STORE\[0\] = 'FINISH': FINISH must be the last command of its queue"):
        program.to_bytes()
    program = _program()
    program.queues[Unit.LOAD].append(Command.make(Opcode.CONV, in_h=1, in_w=1, in_c=1, out_c=1))
    with pytest.raises(ValueError, match=r"LOAD\[1\] = 'CONV': belongs to queue CONV"):
        program.to_bytes()


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b"ELF\x7f" + b[4:], "not an AIPU program"),
    (lambda b: b[:10], "truncated"),
    (lambda b: b[:-40], "truncated"),
    (lambda b: b + b"\0", "trailing data"),
    (lambda b: MAGIC + struct.pack("<H", FORMAT_VERSION + 1) + b[10:], f"format version = {FORMAT_VERSION + 1}"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "checksum mismatch"),
    (lambda b: b[:12] + b"0" * 16 + b[28:], "configuration hash"),
])
def test_bad_program_file(mutate, message):
    data = _program().to_bytes()
    with pytest.raises(ValueError, match=message):
        Program.from_bytes(mutate(data))


def test_program_from_another_isa_layout_is_refused_in_one_line():
    data = _program().to_bytes()
    start = data.index(ISA_LAYOUT_HASH.encode())
    other = data[:start] + b"0123456789abcdef" + data[start + 16:-4]
    with pytest.raises(ValueError) as caught:
        Program.from_bytes(other + struct.pack("<I", zlib.crc32(other)), "old.aipu")
    assert str(caught.value) == (f"old.aipu: ISA layout = '0123456789abcdef': this build's layout is "
                                 f"{ISA_LAYOUT_HASH}; re-assemble or recompile the program")


def test_assemble_is_the_inverse_of_disassemble():
    program = _program(SMALL)
    again = Program.assemble(program.disassemble(), SMALL)
    assert again.queues == program.queues


@pytest.mark.parametrize("line, message", [
    ("CONV[0] CONV pop[] push[] stirde=1", "listing: line 1: CONV field stirde = '1': no such field"),
    ("LOAD[0] CONV pop[] push[] in_c=1", "queue = 'LOAD': CONV executes in queue CONV"),
    ("CONV[0] CONV pop[LOAD] push[] stride_h=9", "CONV field stride_h = 9: outside legal range 1..7"),
    ("CONV[0] CONV pop[DMA] push[]", "DMA"),
    ("CONV[0] CONV pop[] push[] in_type=FLOAT", "FLOAT"),
    ("FOO[0] CONV pop[] push[]", "queue = 'FOO': unknown queue"),
    ("CONV[0] CONV pop[] push[XYZ]", "line 1: push = 'XYZ': not a unit; units are LOAD, WDEC, CONV"),
])
def test_assembler_errors_name_the_line_and_problem(line, message):
    with pytest.raises(ValueError, match=message):
        Program.assemble(line + "\nSTORE[0] FINISH pop[] push[] unit=STORE")


@pytest.mark.parametrize("listing, message", [
    ("LOAD[0] LOAD pop[] push[] buffer=--", "LOAD field buffer = '--': expected an integer"),
    ("LOAD[77] FINISH pop[] push[] unit=LOAD", "line 1: index = 'LOAD[77]': LOAD[0], the command's place"),
    ("LOAD FINISH pop[] push[] unit=LOAD", "line 1: queue = 'LOAD': LOAD[i], the command's place in its queue"),
    ("CONV[0] CONV pop[] push[] in_c=1", "line 1: CONV fields = 'in_addr, in_h, "),
])
def test_the_assembler_takes_only_what_the_disassembler_writes(listing, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Program.assemble(listing + "\nSTORE[0] FINISH pop[] push[] unit=STORE")
