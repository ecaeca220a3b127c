"""The one error type for bad user input (layer files, configurations, programs, listings), and the errors of
a program that cannot run.

Every file a user hands us is hostile until validated. Readers check it at the boundary and raise
:class:`InputError` naming the field, the value and what is allowed; ``within`` adds where (the file,
line or command), so the CLI can print one line and exit with status 2. A well-formed program can still
fail when run (:class:`ExecutionError`: a bad address or operand, a deadlock, a data race), named by command.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

_SHOWN_CHARACTERS = 60   # longer values are cut: a message stays one readable line
_SHOWN_ITEMS = 8         # containers with more items (or nested ones) are described, not printed
_SCALARS = (int, float, str, bytes, bool, type(None))


@dataclass(frozen=True)
class ArrayHeader:
    """An array known by its dtype and shape alone (e.g. from a file header, before reading its data)."""

    dtype: np.dtype
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype} array of shape {list(self.shape)}"


def show(value) -> str:
    """A short one-line rendering of any value: arrays by dtype and shape, long values cut."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return show(value.item())
        return show(ArrayHeader(value.dtype, value.shape))
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        text = hex(value)   # Python refuses str() of integers beyond 4300 digits
        return text if len(text) <= _SHOWN_CHARACTERS else f"an integer of {value.bit_length()} bits"
    if isinstance(value, (list, tuple, dict)) and (
            len(value) > _SHOWN_ITEMS or not all(isinstance(v, _SCALARS) for v in value)
            or isinstance(value, dict) and not all(isinstance(v, _SCALARS) for v in value.values())):
        return f"a {type(value).__name__} of length {len(value)}"
    text = repr(value) if isinstance(value, (str, bytes)) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARACTERS else text[:_SHOWN_CHARACTERS - 3] + "..."


def one_line(text: str) -> str:
    """A message with its line breaks escaped: a hostile name inside it keeps the message on one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class InputError(ValueError):
    """``[where: ...] field = value: allowed`` for a value from a user's file that cannot be used."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        self.where: tuple[str, ...] = ()
        super().__init__(field, value, allowed)

    def within(self, where) -> InputError:
        """Prefix where the value came from (a file, then a line or command inside it); returns self."""
        self.where = (str(where), *self.where)
        return self

    def __str__(self) -> str:
        return one_line(": ".join((*self.where, f"{self.field} = {show(self.value)}: {self.allowed}")))


class ExecutionError(ValueError):
    """A command cannot execute: bad address, bad operand, arithmetic overflow. Names the command."""


@contextlib.contextmanager
def executing(where):
    """An ExecutionError inside the block is raised again with ``where`` (the program directory) in front."""
    try:
        yield
    except ExecutionError as error:
        raise type(error)(f"{where}: {error}") from None


class DeadlockError(ExecutionError):
    """No unit can make progress although commands remain."""


class HazardError(ExecutionError):
    """Two commands not ordered by tokens access overlapping bytes and at least one writes."""


class BankError(HazardError):
    """Two commands of different units not ordered by tokens use one bank of a banked buffer."""
