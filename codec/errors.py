"""The one exception of the weight codec.

A corrupt or truncated stream must fail loudly and say where: the arithmetic decoder knows the bit
position, the element coder knows the syntax element, the syntax parser knows the layer and CTU. Each
level adds what it knows while the error propagates (``add_context`` or the ``error_context`` manager), so
the final message reads e.g. ``reading past the end of the stream (bit 8123 = byte 1015 bit 3;
element oct_abs_q; layer 2, ctu 7)``.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class CodecError(ValueError):
    """A stream that cannot be decoded (or a value that cannot be encoded), with where it happened."""

    def __init__(self, reason: str, *, bit_position: int | None = None, element: str | None = None,
                 **context: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.bit_position = bit_position
        self.element = element
        self.context: dict[str, Any] = dict(context)

    def add_context(self, *, bit_position: int | None = None, element: str | None = None,
                    **context: Any) -> CodecError:
        """Attach outer context; what an inner level already recorded is kept (it is more precise)."""
        if self.bit_position is None:
            self.bit_position = bit_position
        if self.element is None:
            self.element = element
        for key, value in context.items():
            self.context.setdefault(key, value)
        return self

    def relocate(self, bits: int) -> CodecError:
        """The input that raised this starts ``bits`` into a larger one (a layer stream or the index inside a
        container): the position then counts from the larger input's start, and an error without a
        position points at the inner input's first bit."""
        self.bit_position = bits + (self.bit_position or 0)
        return self

    def __str__(self) -> str:
        where = []
        if self.bit_position is not None:
            byte, bit = divmod(self.bit_position, 8)
            where.append(f"bit {self.bit_position} = byte {byte} bit {bit}")
        if self.element is not None:
            where.append(f"element {self.element}")
        if self.context:
            where.append(", ".join(f"{key} {value}" for key, value in self.context.items()))
        return f"{self.reason} ({'; '.join(where)})" if where else self.reason


@contextmanager
def error_context(**context: Any) -> Iterator[None]:
    """``with error_context(layer=3, ctu=7): ...`` adds these fields to any CodecError raised inside."""
    try:
        yield
    except CodecError as error:
        raise error.add_context(**context)


def check_stream_end(data: bytes, end: int) -> None:
    """A stream of ``data`` whose terminator ended at bit ``end`` must end there (a strict decoder)."""
    left = len(data) - end // 8
    if left:
        raise CodecError(f"{left} byte{'s' if left != 1 else ''} left after the end of the stream", bit_position=end)
