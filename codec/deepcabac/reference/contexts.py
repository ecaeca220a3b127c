"""Context selection: which context codes each flag, from the weights coded before it.

The layer is a matrix (rows = output channels), coded row by row, left to right. Position (x, y) of the
patent is column x of row y; a position outside the matrix or not coded yet counts as a zero weight. Two state
identifiers summarise a neighbour (DeepCABAC patent (seed 004) §2.1): Si1 = 0 (zero or unavailable), 1
(negative), 2 (positive); Si2 = 0 (zero or unavailable), 1 (non-zero).

sig_flag and sign_flag methods (``SIG_METHODS``, ``SIGN_METHODS``):

* ``left``: Si1 of the left neighbour (x-1, y), 3 contexts; the first weight of a row has no left neighbour and
  takes the zero context (§2.2, method 1).
* ``previous``: Si1 of the previous weight in coding order, across row ends: NNC's rule (§7.3), 3 contexts.
* ``template``: C = s(x-1,y) + 3 s(x,y-1) + 9 s(x-1,y-1) with Si1, 27 contexts (§2.1).
* ``distance`` (sig_flag only): the number of zero or unavailable positions to the left before the first
  non-zero, looking at most ``window`` positions back, so window + 1 contexts (§2.3, method 2; 4 for the
  patent's window of 3).

abs_level_greater_X (§2.4): a flag whose threshold X is below the split X' has two contexts, one per sign, for
its position j in the unary run; from the split on, ``position`` gives each j one context of its own,
``shared`` gives all of them one, ``bypass`` codes them without a context.
"""
from __future__ import annotations

SIG_METHODS = ("left", "previous", "template", "distance")
SIGN_METHODS = ("left", "previous", "template")
GREATER_ABOVE = ("position", "shared", "bypass")


def si1(level: int) -> int:
    return 0 if level == 0 else (1 if level < 0 else 2)


def si2(level: int) -> int:
    return int(level != 0)


class Neighbourhood:
    """The levels coded so far, row-major in ``levels`` (``columns`` wide), seen from one position."""

    def __init__(self, levels: list[int], columns: int) -> None:
        self.levels, self.columns = levels, columns
        self.row = self.column = 0
        self.previous = 0

    def at(self, dx: int, dy: int) -> int:
        """The level at (x + dx, y + dy), dx, dy <= 0; 0 outside the matrix."""
        column, row = self.column + dx, self.row + dy
        if column < 0 or row < 0:
            return 0
        return self.levels[row * self.columns + column]

    def method_context(self, method: str, window: int) -> int:
        if method == "previous":
            return si1(self.previous)
        if method == "left":
            return si1(self.at(-1, 0))
        if method == "template":
            return si1(self.at(-1, 0)) + 3 * si1(self.at(0, -1)) + 9 * si1(self.at(-1, -1))
        for distance in range(window):
            if si2(self.at(-1 - distance, 0)):
                return distance
        return window


def greater_key(split: int, above: str, negative: int):
    """The context key function of code_magnitude for a weight of sign ``negative``."""
    def key(j: int, x: int):
        if x < split:
            return ("abs_level_greater_x", j, negative)
        if above == "bypass":
            return None
        return ("abs_level_greater_x", j if above == "position" else -1, None)
    return key
