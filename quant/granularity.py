"""Granularity (T/AI 115.1-2021 Tables 169 and 230): which elements share one parameter set.

Every method goes through :func:`partition`, which gives each element of the input tensors a unit number:
1 unified (one unit over all the tensors), 2 layer-wise (one per tensor), 3 channel-wise (one per output channel,
axis 0, of each tensor), 4 user-defined (the caller's integer label per element; equal labels share a unit, across
tensors too). A method computes per-unit statistics with :meth:`Partition.reduce` or :meth:`Partition.units`,
spreads per-unit parameters back over the elements with :meth:`Partition.spread` and reassembles its output with
:meth:`Partition.join`, so no method repeats the bookkeeping.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from aipu.quant._checks import check_choice, check_finite


class Granularity(IntEnum):
    UNIFIED = 1
    LAYER = 2
    CHANNEL = 3
    USER_DEFINED = 4


@dataclass(frozen=True, eq=False)
class Partition:
    """The units of a list of tensors: ``unit`` numbers each element of the flat concatenation (0..count-1)."""
    shapes: tuple[tuple[int, ...], ...]
    unit: np.ndarray
    count: int
    single: bool        # the caller passed one array (outputs are one array), not a list

    def flatten(self, tensors, name: str = "x") -> np.ndarray:
        """Tensors of this partition's shapes as one flat float64 array."""
        arrays, _ = _as_list(tensors)
        shapes = tuple(np.shape(array) for array in arrays)
        if shapes != self.shapes:
            raise ValueError(f"{name} has shapes {shapes}, expected {self.shapes}")
        return np.concatenate([check_finite(name, a).ravel() for a in arrays]) if arrays else np.zeros(0)

    def spread(self, per_unit) -> np.ndarray:
        """A per-unit parameter (one value per unit, or one row per unit) at every element."""
        return np.asarray(per_unit)[self.unit]

    def join(self, flat: np.ndarray):
        """A flat per-element array back in the tensors' shapes (one array, or a list as given)."""
        ends = np.cumsum([int(np.prod(shape)) for shape in self.shapes])
        pieces = [part.reshape(shape) for part, shape in zip(np.split(flat, ends[:-1]), self.shapes)]
        return pieces[0] if self.single else pieces

    def order(self) -> tuple[np.ndarray, np.ndarray]:
        """The element indices grouped by unit (stable) and each unit's start in that order."""
        order = np.argsort(self.unit, kind="stable")
        starts = np.searchsorted(self.unit[order], np.arange(self.count))
        return order, starts

    def reduce(self, flat: np.ndarray, ufunc) -> np.ndarray:
        """``ufunc`` (np.minimum, np.maximum, np.add) over each unit's elements: one value per unit."""
        order, starts = self.order()
        return ufunc.reduceat(flat[order], starts)

    def units(self, flat: np.ndarray) -> list[np.ndarray]:
        """Each unit's elements, in their order within the tensors."""
        order, starts = self.order()
        return np.split(flat[order], starts[1:])


def _as_list(tensors) -> tuple[list, bool]:
    if isinstance(tensors, (list, tuple)):
        return list(tensors), False
    return [tensors], True


def partition(tensors, granularity, labels=None) -> Partition:
    """The units of ``tensors`` (one array or a list) at ``granularity``; ``labels`` (integer arrays of the
    tensors' shapes, one array or a list like ``tensors``) only for USER_DEFINED."""
    granularity = Granularity(check_choice("granularity", granularity, tuple(Granularity)))
    arrays, single = _as_list(tensors)
    shapes = tuple(np.shape(array) for array in arrays)
    if not arrays or any(int(np.prod(shape)) == 0 for shape in shapes):
        raise ValueError(f"tensors have shapes {shapes}: give at least one tensor and no empty one")
    if (labels is not None) != (granularity == Granularity.USER_DEFINED):
        raise ValueError(f"labels={'given' if labels is not None else None} goes with granularity 4 "
                         f"(user-defined) only, got granularity {int(granularity)}")
    sizes = [int(np.prod(shape)) for shape in shapes]
    if granularity == Granularity.UNIFIED:
        unit = np.zeros(sum(sizes), np.int64)
    elif granularity == Granularity.LAYER:
        unit = np.repeat(np.arange(len(arrays)), sizes)
    elif granularity == Granularity.CHANNEL:
        if any(len(shape) == 0 for shape in shapes):
            raise ValueError(f"granularity 3 (channel-wise) needs tensors with an axis 0, got shapes {shapes}")
        first = np.cumsum([0] + [shape[0] for shape in shapes[:-1]])
        unit = np.concatenate([np.repeat(np.arange(shape[0]) + start, size // shape[0])
                               for shape, size, start in zip(shapes, sizes, first)])
    else:
        unit = _user_units(labels, shapes)
    return Partition(shapes, unit, int(unit.max()) + 1, single)


def _user_units(labels, shapes) -> np.ndarray:
    label_arrays, _ = _as_list(labels)
    label_shapes = tuple(np.shape(label) for label in label_arrays)
    if label_shapes != shapes:
        raise ValueError(f"labels have shapes {label_shapes}, expected the tensors' {shapes}")
    flat = np.concatenate([np.asarray(label).ravel() for label in label_arrays])
    if not np.issubdtype(flat.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {flat.dtype.name}")
    return np.unique(flat, return_inverse=True)[1].astype(np.int64)
