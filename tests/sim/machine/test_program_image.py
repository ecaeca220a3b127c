"""The program image: a compiled program's queues come back word for word, the header follows its table, the
placement after the DRAM image is aligned, and a damaged or hostile image is refused in one line naming the
field (each fuzz case in a forked child under a time and a memory limit, tests/sandbox.py)."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import strategies as st

from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import COMMAND_BYTES, Unit
from aipu.sim.machine.program_image import (BY_NAME, HEADER_BYTES, HEADER_FIELDS, alignment, build_image,
                                            constant_values, image_base, pack_image, parse_image, read_header,
                                            with_image)
from tests.rtl.configs import SMALL
from tests.sandbox import fuzz, profiles, run_case
from tests.strategies import mangled_bytes

WIDE_WORD = hardware_config_from_dict({"dram": {"bytes_per_cycle": 128}})   # four commands per DRAM word


@functools.cache
def compiled_program(config, seed: int = 3):
    """A small conv layer lowered by the compiler (LOAD, CONV, REQUANT, maybe LUT, STORE, FINISH)."""
    rng = np.random.default_rng(seed)
    return lower_conv_layer(random_layer(rng, with_lut=True, max_channels=6, max_size=5), config)


@pytest.mark.parametrize("config", [DEFAULT, SMALL, WIDE_WORD], ids=["default", "small", "wide-word"])
def test_a_compiled_program_comes_back_word_for_word(config):
    lowered = compiled_program(config)
    image = build_image(lowered.program)
    queues = parse_image(config, image)
    assert queues == {unit: [c.encode(config) for c in lowered.program.queues[unit]] for unit in Unit}
    header = read_header(image)
    assert {name: header[name] for name in constant_values(config)} == constant_values(config)
    assert len(image) % alignment(config) == 0
    for unit in Unit:
        assert header[f"{unit.name.lower()}_offset"] % alignment(config) == 0


def test_the_header_fields_tile_the_header_in_order():
    end = 0
    for field in HEADER_FIELDS:
        assert field.offset == end
        end += field.size
    assert end == HEADER_BYTES
    assert [f.unit for f in HEADER_FIELDS if f.unit is not None] == [u for u in Unit for _ in range(2)]


def test_the_image_goes_after_the_dram_image_aligned():
    lowered = compiled_program(DEFAULT)
    image = build_image(lowered.program)
    dram, base = with_image(DEFAULT, lowered.dram, image)
    assert base == image_base(DEFAULT, lowered.dram.size) >= lowered.dram.size
    assert base % alignment(DEFAULT) == 0 and base - lowered.dram.size < alignment(DEFAULT)
    assert np.array_equal(dram[:lowered.dram.size], lowered.dram)
    assert parse_image(DEFAULT, dram[base:].tobytes()) == parse_image(DEFAULT, image)
    assert image_base(WIDE_WORD, 129) == 256 and image_base(DEFAULT, 64) == 64


def _with(image: bytes, **values: int) -> bytes:
    data = bytearray(image)
    for name, value in values.items():
        field = BY_NAME[name]
        data[field.offset:field.offset + field.size] = value.to_bytes(field.size, "little")
    return bytes(data)


def _one_word_each() -> bytes:
    return pack_image(DEFAULT, {unit: [bytes([int(unit) + 1]) * COMMAND_BYTES] for unit in Unit})


@pytest.mark.parametrize("change, message", [
    (lambda image: image[:HEADER_BYTES - 1], "size = 79: truncated"),
    (lambda image: _with(image, magic=0), "magic = '0x0': expected 0x51504941"),
    (lambda image: _with(image, version=2), "version = '0x2': expected 0x1"),
    (lambda image: _with(image, isa_hash=1), "isa_hash = '0x1'"),
    (lambda image: _with(image, config_hash=1), "config_hash = '0x1'"),
    (lambda image: _with(image, conv_offset=97), "conv_offset = 97: a multiple of 32 in 96 .. 320"),
    (lambda image: _with(image, conv_offset=64), "conv_offset = 64: a multiple of 32 in 96"),
    (lambda image: _with(image, store_offset=1 << 32 - 5), "store_offset = 134217728"),
    (lambda image: _with(image, store_count=0xFFFF_FFFF), "store_count = 4294967295: at most 1"),
    (lambda image: _with(image, load_count=2), "wdec_offset = 128: at least 160: the LOAD queue ends there"),
])
def test_a_bad_field_is_named_in_one_line(change, message):
    with pytest.raises(InputError) as caught:
        parse_image(DEFAULT, change(_one_word_each()), source="img.bin")
    assert str(caught.value).startswith("img.bin: ") and message in str(caught.value), str(caught.value)


def _parse_outcome(data: bytes) -> str:
    """Child side: parsed, or refused with one line naming the image."""
    try:
        parse_image(DEFAULT, data)
    except InputError as error:
        text = str(error)
        assert text.startswith("program image: ") and "\n" not in text, text
        return "refused"
    return "parsed"


@st.composite
def _hostile_header(draw, image: bytes) -> bytes:
    """``image`` with a few header fields set to edge values: huge counts, offsets past the end or into
    another queue, unaligned ones, other constants."""
    values = {}
    for field in draw(st.lists(st.sampled_from(HEADER_FIELDS), min_size=1, max_size=4)):
        top = (1 << 8 * field.size) - 1
        values[field.name] = draw(st.one_of(st.sampled_from([0, 1, top, top >> 5, len(image), len(image) - 32]),
                                            st.integers(0, len(image) + 64), st.integers(0, top)))
    return _with(image, **values)


@pytest.mark.parametrize("profile", profiles(quick=60, long=3000))
def test_a_damaged_image_is_refused_in_one_line_or_parsed(profile, sandbox):
    image = build_image(compiled_program(DEFAULT).program)
    outcomes = []
    fuzz(profile, st.one_of(mangled_bytes(image), _hostile_header(image)),
         lambda data: outcomes.append(run_case(sandbox, _parse_outcome, data)))
    assert "refused" in outcomes
