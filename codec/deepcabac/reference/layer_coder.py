"""A layer's levels, both directions, through one traversal.

:func:`code_levels` walks the layer's matrix in row-major order (DeepCABAC patent (seed 004) §5: rows = output
channels, coded top to bottom, each left to right) and codes every level as sig_flag, sign_flag (1 =
negative) and the magnitude's flags and remainder (``binarization``), each flag in the context ``contexts``
chooses. It codes through a bin coder ``io``: :class:`BinWriter` codes the value it is given, :class:`BinReader`
ignores it and decodes one; both return the bin, and the traversal continues from that. So the encoder runs
the decoder's own logic and the two cannot disagree on a context.

The stream is the bare payload: the layer's shape and the options are side information (the patent sends the
dimensions and the step size raw, before the payload; §3).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...errors import CodecError
from .binarization import LEVEL_LIMIT, LevelLaw, code_magnitude
from .contexts import GREATER_ABOVE, SIG_METHODS, SIGN_METHODS, Neighbourhood, greater_key
from .engine import ArithmeticDecoder, ArithmeticEncoder
from .estimators import estimator_factory

MAX_WINDOW = 64


@dataclass(frozen=True)
class DeepCabacOptions:
    """One choice of every free part of the method. The defaults are the patent's preferred embodiment
    with NNC's numbers: left-neighbour contexts, X' = 11, two contexts by sign for X < 12, one per position
    above, rem', NNCodec's estimator with its default parameters."""

    sig_context: str = "left"
    sign_context: str = "left"
    distance_window: int = 3
    law: LevelLaw = LevelLaw()
    greater_split: int = 12
    greater_above: str = "position"
    estimator: str = "nnc"
    estimator_parameters: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sig_context not in SIG_METHODS:
            raise ValueError(f"sig_context must be one of {SIG_METHODS}, got {self.sig_context!r}")
        if self.sign_context not in SIGN_METHODS:
            raise ValueError(f"sign_context must be one of {SIGN_METHODS}, got {self.sign_context!r}")
        if not 1 <= self.distance_window <= MAX_WINDOW:
            raise ValueError(f"distance_window must be 1..{MAX_WINDOW}, got {self.distance_window}")
        if self.greater_above not in GREATER_ABOVE:
            raise ValueError(f"greater_above must be one of {GREATER_ABOVE}, got {self.greater_above!r}")
        if self.greater_split < 1:
            raise ValueError(f"greater_split must be >= 1, got {self.greater_split}")
        estimator_factory(self.estimator, **self.estimator_parameters)


class ContextStore:
    """The contexts by key, each made by ``make(key)`` when first used."""

    def __init__(self, make) -> None:
        self._make = make
        self._contexts: dict = {}

    def __getitem__(self, key):
        context = self._contexts.get(key)
        if context is None:
            context = self._contexts[key] = self._make(key)
        return context


class BinWriter:
    """Codes the bins it is given."""

    def __init__(self, contexts: ContextStore) -> None:
        self.engine = ArithmeticEncoder()
        self.contexts = contexts

    @property
    def bit_position(self) -> int:
        return self.engine.bits_written

    def decision(self, key, bin_value: int) -> int:
        self.engine.encode(self.contexts[key], bin_value)
        return bin_value

    def bypass(self, count: int, value: int) -> int:
        self.engine.encode_bypass(value, count)
        return value


class BinReader:
    """Decodes bins; the value handed in is ignored. An error names the element being decoded."""

    def __init__(self, data: bytes, contexts: ContextStore) -> None:
        self.engine = ArithmeticDecoder(data)
        self.contexts = contexts

    @property
    def bit_position(self) -> int:
        return self.engine.bit_position

    def decision(self, key, bin_value: int = 0) -> int:
        try:
            return self.engine.decode(self.contexts[key])
        except CodecError as error:
            raise error.add_context(element=key[0])

    def bypass(self, count: int, value: int = 0) -> int:
        try:
            return self.engine.decode_bypass(count)
        except CodecError as error:
            raise error.add_context(element="bypass")


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The layer as a matrix: rows = the first dimension, columns = the rest; a vector is one row."""
    if len(shape) <= 1:
        return 1, math.prod(shape)
    return shape[0], math.prod(shape[1:])


def code_level(io, options: DeepCabacOptions, around: Neighbourhood, level: int) -> int:
    """One level (ignored by a reader) at the neighbourhood's position; returns the level coded."""
    window = options.distance_window
    if not io.decision(("sig_flag", around.method_context(options.sig_context, window)), int(level != 0)):
        return 0
    negative = io.decision(("sign_flag", around.method_context(options.sign_context, window)), int(level < 0))
    key = greater_key(options.greater_split, options.greater_above, negative)
    magnitude = code_magnitude(io, options.law, abs(level), key)
    return -magnitude if negative else magnitude


def code_levels(io, options: DeepCabacOptions, levels: list[int], columns: int) -> None:
    """Every level of the row-major ``levels`` in scan order; a reader overwrites them with what it decodes."""
    around = Neighbourhood(levels, columns)
    for index, level in enumerate(levels):
        around.row, around.column = divmod(index, columns)
        try:
            coded = code_level(io, options, around, level)
        except CodecError as error:
            raise error.add_context(bit_position=io.bit_position, weight=index)
        levels[index] = around.previous = coded


def integer_levels(levels, limit: int = LEVEL_LIMIT) -> np.ndarray:
    """``levels`` as an int64 array; anything else than integers within ±limit is refused."""
    array = np.asarray(levels)
    if array.dtype.kind not in "iu":
        raise ValueError(f"levels must be integers, got {array.dtype}")
    array = array.astype(np.int64)
    if array.size and int(np.abs(array).max()) > limit:
        raise ValueError(f"a level of magnitude {int(np.abs(array).max())} is above the limit {limit}")
    return array


def encode_layer(levels, options: DeepCabacOptions = DeepCabacOptions()) -> bytes:
    """The payload of one layer of integer levels."""
    array = integer_levels(levels, options.law.limit)
    make = estimator_factory(options.estimator, **options.estimator_parameters)
    writer = BinWriter(ContextStore(lambda key: make()))
    code_levels(writer, options, array.ravel().tolist(), matrix_shape(array.shape)[1])
    return writer.engine.finish()


def decode_layer(data: bytes, shape: tuple[int, ...], options: DeepCabacOptions = DeepCabacOptions()) -> np.ndarray:
    """The int32 levels of a layer of ``shape`` from its payload; the payload must end where ``data`` ends."""
    make = estimator_factory(options.estimator, **options.estimator_parameters)
    reader = BinReader(data, ContextStore(lambda key: make()))
    levels = [0] * math.prod(shape)
    code_levels(reader, options, levels, matrix_shape(tuple(shape))[1])
    finish_stream(reader.engine, data)
    return np.array(levels, np.int32).reshape(shape)


def finish_stream(engine: ArithmeticDecoder, data: bytes) -> None:
    """The terminating bin, stop bit and padding, then the end of ``data``."""
    end = engine.finish()
    if end != 8 * len(data):
        left = len(data) - end // 8
        raise CodecError(f"{left} byte{'s' if left != 1 else ''} left after the end of the stream", bit_position=end)
