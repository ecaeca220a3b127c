"""Coding one syntax element with the pure-Python engine, and the ElementIO the syntax codes through.

``ElementDecoder.read(name, **inputs)`` and ``ElementEncoder.write(name, value, **inputs)`` do both halves
for one element of the table (``codec.reference.elements``): its binarisation (``binarization``) and the
context of every bin (``engine``). ``inputs`` are exactly the values the element's context rule and
binarisation need, and are checked.

The syntax (``headers``, ``sublayer_coder``, ``tree_coder``, ``nnc``) codes every element through an
``ElementIO``: ``ElementReader`` and ``ElementWriter`` here over the pure-Python engine, or the compiled
path's ``FastElementReader`` / ``FastElementWriter`` (``codec.compiled.element_io``).
"""
from __future__ import annotations

import operator
from typing import Any, Protocol

from ..errors import CodecError
from . import binarization as bz
from .elements import ELEMENTS, INC_RULES, ElementSpec, element_spec
from .engine import AecDecoder, AecEncoder


class ElementIO(Protocol):
    """Reads (decoder) or writes (encoder) one syntax element; returns its value.

    A reader's ``value`` is ignored; a writer codes it. Both return the element, and the syntax updates its
    state from that returned value, so decoder and encoder run the same parsing logic (docs/codec.md §1).
    """

    decoding: bool

    def code(self, name: str, value: int = 0, **inputs: int) -> int: ...


def _checked_inputs(spec: ElementSpec, inputs: dict[str, Any]) -> dict[str, int]:
    """The inputs the element needs, exactly; flags must be 0/1, all integers (numpy ints accepted)."""
    needed = _INPUT_SETS[spec.name]
    if inputs.keys() != needed:
        missing = [name for name in spec.inputs if name not in inputs]
        unknown = [name for name in inputs if name not in needed]
        raise ValueError(f"element {spec.name} needs inputs {list(spec.inputs) or 'none'}; "
                         f"missing {missing}, unexpected {unknown}")
    checked: dict[str, int] = {}
    for name, value in inputs.items():
        try:
            value = operator.index(value)
        except TypeError:
            raise ValueError(f"element {spec.name}: input {name} must be an integer, got {value!r}") from None
        low, high = _INPUT_RANGES.get(name, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"element {spec.name}: input {name} must be in {low}..{high if high is not None else ''}"
                             f", got {value}")
        checked[name] = value
    return checked


_INPUT_SETS = {name: frozenset(spec.inputs) for name, spec in ELEMENTS.items()}
_INPUT_RANGES = {"sign": (0, 1), "n0": (0, 1), "n1": (0, 1), "at_max_depth": (0, 1),
                 "length": (0, bz.MAX_FL_LENGTH), "max_value": (0, None)}


class ElementDecoder:
    """Reads whole syntax elements from an AecDecoder."""

    def __init__(self, decoder: AecDecoder) -> None:
        self.decoder = decoder

    def read(self, name: str, **inputs: Any) -> int:
        spec = element_spec(name)
        values = _checked_inputs(spec, inputs) if inputs or _INPUT_SETS[spec.name] else inputs
        decoder = self.decoder
        try:
            if spec.bypass:                      # all bypass elements are FL
                return bz.decode_fl(lambda bin_idx: decoder.decode_bypass(), _fl_length(spec, values))
            inc = INC_RULES[spec.inc_rule][0]
            start = spec.ctx_start
            if spec.fixed_length == 1:           # a flag: the bin string is one bin, binIdx 0
                return decoder.decode_decision(start + inc(0, values))
            read_bin = lambda bin_idx: decoder.decode_decision(start + inc(bin_idx, values))  # noqa: E731
            if spec.binarization == "U":
                return bz.decode_u(read_bin, values["max_value"])
            return bz.decode_uegk(read_bin, spec.c_max, spec.k)
        except CodecError as error:
            raise error.add_context(bit_position=decoder.bit_position, element=name)


class ElementEncoder:
    """Writes whole syntax elements to an AecEncoder (or to a fork of one, to measure their cost)."""

    def __init__(self, encoder: AecEncoder) -> None:
        self.encoder = encoder

    def write(self, name: str, value: int, **inputs: Any) -> None:
        spec = element_spec(name)
        values = _checked_inputs(spec, inputs) if inputs or _INPUT_SETS[spec.name] else inputs
        encoder = self.encoder
        try:
            if spec.bypass:
                bz.encode_fl(lambda bin_idx, bin_val: encoder.encode_bypass(bin_val), value, _fl_length(spec, values))
                return
            inc = INC_RULES[spec.inc_rule][0]
            start = spec.ctx_start

            def write_bin(bin_idx: int, bin_val: int) -> None:
                encoder.encode_decision(start + inc(bin_idx, values), bin_val)

            if spec.binarization == "FL":
                bz.encode_fl(write_bin, value, spec.fixed_length)
            elif spec.binarization == "U":
                bz.encode_u(write_bin, value, values["max_value"])
            else:
                bz.encode_uegk(write_bin, value, spec.c_max, spec.k)
        except ValueError as error:
            raise ValueError(f"element {name}: {error}") from None


def _fl_length(spec: ElementSpec, values: dict[str, int]) -> int:
    return spec.fixed_length if spec.fixed_length is not None else values["length"]


class ElementReader:
    """ElementIO of the decoder: ``value`` is ignored, the element is read."""

    decoding = True

    def __init__(self, decoder: AecDecoder):
        self.engine = decoder
        self._read = ElementDecoder(decoder).read

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        return self._read(name, **inputs)


class ElementWriter:
    """ElementIO of the encoder; ``fork()`` gives a bit-counting writer for trial encodes."""

    decoding = False

    def __init__(self, encoder: AecEncoder):
        self.engine = encoder
        self._write = ElementEncoder(encoder).write

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        value = int(value)
        self._write(name, value, **inputs)
        return value

    def fork(self) -> ElementWriter:
        return ElementWriter(self.engine.fork())

    @property
    def cost_bits(self) -> float:
        return self.engine.cost_bits
