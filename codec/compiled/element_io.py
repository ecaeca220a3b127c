"""The ElementIO classes of the compiled path: the syntax coded over the numba engine.

The syntax (``codec.reference``) codes the stream and layer headers element by element through an
ElementIO. ``FastElementReader`` decodes those elements with the compiled engine and takes over every weight
sublayer whole (``decode_weight_sublayer``: the compiled sublayer decoder). ``FastElementWriter`` encodes
them with the compiled encoder and takes over every CU tree (``code_tree``: the compiled tree coders); its
``fork()`` counts bits, so the encoder's whole mode search runs on the compiled encoder.
"""
from __future__ import annotations

import numpy as np

from ..errors import CodecError
from ..reference.binarization import MAX_EG_VALUE
from ..reference.elements import element_spec
from .aec_decoder import (NO_TRACE, S_BINS, S_POS, STATE_SIZE, decode_decision, decode_fl, decode_u, decode_uegk,
                          finish_stream, new_state, raise_on_error)
from .aec_encoder import (FastEncoder, encode_decision, encode_escapes, encode_fl, encode_u, encode_uegk,
                          new_encoder_state)
from .contexts import INC_CONST, INC_RULE_CODES, new_contexts
from .sublayer_decoder import decode_weight_sublayer
from .tree_coders import encode_tree

NO_BYTES = np.zeros(0, dtype=np.uint8)      # the data of an encoder, the output of a decoder: never touched


class FastElementReader:
    """ElementIO of the decoder over the compiled engine: headers element by element, each weight sublayer in
    one call of the compiled sublayer decoder (``decode_weight_sublayer``)."""

    decoding = True

    def __init__(self, data: bytes, trace: np.ndarray = NO_TRACE):
        self.data = np.frombuffer(bytes(data), dtype=np.uint8)
        self.state = new_state(self.data)
        self.ctx = new_contexts()
        self.trace = trace              # every bin decoded, as aec_decoder.record writes it
        raise_on_error(self.state)
        self._io = (self.state, self.ctx, self.data, trace, new_encoder_state(), NO_BYTES.copy())

    @property
    def bins_decoded(self) -> int:
        return int(self.state[S_BINS])

    @property
    def bit_position(self) -> int:
        """The next bit the engine will fetch, as AecDecoder.bit_position."""
        return int(self.state[S_POS])

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        spec = element_spec(name)
        if spec.binarization == "FL":
            length = spec.fixed_length if spec.fixed_length is not None else inputs["length"]
            if spec.bypass:
                result = decode_fl(self.state, self.ctx, self.data, self.trace, -1, INC_CONST, length)
            else:
                result = decode_decision(self.state, self.ctx, self.data, self.trace,
                                         spec.ctx_start + spec.ctx_inc(0, inputs))
        elif spec.binarization == "U":
            rule = INC_RULE_CODES[spec.inc_rule]
            result = decode_u(self.state, self.ctx, self.data, self.trace, spec.ctx_start, rule, inputs["max_value"])
        else:
            rule = INC_RULE_CODES[spec.inc_rule]
            result = decode_uegk(self.state, self.ctx, self.data, self.trace, spec.ctx_start, rule,
                                 inputs.get("sign", 0), spec.c_max, spec.k)
        raise_on_error(self.state, element=name)
        return int(result)

    def decode_weight_sublayer(self, header, sub, limits) -> dict[str, int]:
        """All CTUs of a weight sublayer in one njit call (codec.compiled.sublayer_decoder); returns the mode
        statistics."""
        return decode_weight_sublayer(self._io, header, sub, limits)

    def finish(self, strict: bool = True) -> int:
        """The terminator (aec_decoder.finish): strict, the padding too; else the stuffing bin alone."""
        end = finish_stream(self.state, self.data, self.trace, strict)
        raise_on_error(self.state, element="terminator")
        return int(end)


class FastElementWriter:
    """ElementIO of the encoder over the compiled encoder: headers, codebooks and escapes element by element,
    each CU tree in one call (``code_tree``); ``fork()`` counts bits for trial encodes."""

    decoding = False
    _MAX_ELEMENT_BINS = 128        # the longest bin string: UEGk of a 32-bit value with cMax 16

    def __init__(self, encoder: FastEncoder | None = None):
        self.engine = encoder or FastEncoder()
        self._dummy_state = np.zeros(STATE_SIZE, dtype=np.int64)

    def _io(self) -> tuple:
        engine = self.engine
        return (self._dummy_state, engine.ctx, NO_BYTES, NO_TRACE, engine.state, engine.out)

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        spec = element_spec(name)
        value = int(value)
        engine = self.engine
        if spec.binarization == "FL":
            length = spec.fixed_length if spec.fixed_length is not None else inputs["length"]
            if not 0 <= value < (1 << length):
                raise ValueError(f"element {name}: FL{length} value must be in 0..{(1 << length) - 1}, got {value}")
            engine.reserve(length)
            if spec.bypass:
                encode_fl(engine.state, engine.ctx, engine.out, -1, INC_CONST, value, length)
            else:
                encode_decision(engine.state, engine.ctx, engine.out, spec.ctx_start + spec.ctx_inc(0, inputs), value)
        elif spec.binarization == "U":
            if not 0 <= value <= inputs["max_value"]:
                raise ValueError(f"element {name}: unary value must be in 0..{inputs['max_value']}, got {value}")
            engine.reserve(value + 1)
            encode_u(engine.state, engine.ctx, engine.out, spec.ctx_start, INC_RULE_CODES[spec.inc_rule], value)
        else:
            if not 0 <= value <= MAX_EG_VALUE:
                raise ValueError(f"element {name}: UEGk value must be in 0..{MAX_EG_VALUE}, got {value}")
            engine.reserve(self._MAX_ELEMENT_BINS)
            encode_uegk(engine.state, engine.ctx, engine.out, spec.ctx_start, INC_RULE_CODES[spec.inc_rule],
                        inputs.get("sign", 0), spec.c_max, spec.k, value)
        return value

    def code_tree(self, tree: str, shapes: list[tuple[int, int, int]], start_depth: int, cbook_size: int,
                  out_map: np.ndarray, truth_map: np.ndarray) -> None:
        nodes = sum(z * h * w for z, h, w in shapes)
        self.engine.reserve(nodes * self._MAX_ELEMENT_BINS)
        self._dummy_state[:] = 0
        try:
            encode_tree(self._io(), tree, shapes, start_depth, cbook_size, out_map,
                        np.ascontiguousarray(truth_map, dtype=np.int64))
        except CodecError as error:
            raise ValueError(f"tree {tree}: a value cannot be coded ({error.reason})") from None

    def code_escapes(self, values: np.ndarray) -> None:
        """The escaped levels of a CU in coding order, each as esc_nzflag [esc_sign esc_abs_q], in one call."""
        values = np.ascontiguousarray(values, dtype=np.int64)
        if values.size and int(np.abs(values).max()) > MAX_EG_VALUE:
            raise ValueError(f"element esc_abs_q: UEGk value must be in 0..{MAX_EG_VALUE}, "
                             f"got {int(np.abs(values).max())}")
        nz, sign, magnitude = (element_spec(name) for name in ("esc_nzflag", "esc_sign", "esc_abs_q"))
        engine = self.engine
        engine.reserve(values.size * (2 + self._MAX_ELEMENT_BINS))
        encode_escapes(engine.state, engine.ctx, engine.out, values, nz.ctx_start + nz.ctx_inc(0, {}),
                       sign.ctx_start + sign.ctx_inc(0, {}), magnitude.ctx_start,
                       INC_RULE_CODES[magnitude.inc_rule], magnitude.c_max, magnitude.k)

    def fork(self) -> FastElementWriter:
        return FastElementWriter(self.engine.fork())

    @property
    def cost_bits(self) -> float:
        return self.engine.cost_bits

    @property
    def bins_encoded(self) -> int:
        return self.engine.bins_encoded

    def finish(self) -> bytes:
        return self.engine.finish()
