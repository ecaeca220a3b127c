"""Structured pruning of T/AI 115.1-2021 §7.3 and its inverse of §8.3 (docs/pruning.md).

A weight tensor is seen as the matrix (N, C·H·W): axis ``n_dim`` (the filters) first, everything else
flattened in order. Row pruning (granularity 2) removes whole filters and their biases; column pruning
(granularity 3) removes columns, i.e. one input channel at one kernel position across every filter, and keeps
the biases. A mask holds one 0/1 entry per row or per column, 1 = kept. :class:`StructuredSparsity` is the
record a decoder needs for one tensor: granularity, ``n_dim``, the tensor's original shape and the mask (with
the Skip_Column list that Table 252 reads derived from it, decision PR-2 of docs/pruning.md).

``structured_sparse`` and ``un_structured_sparse`` follow Tables 202 and 252 over lists of tensors;
``compact`` and ``restore`` are the same on one tensor and its record. For every mask,
``restore(compact(w)) == masked(w)`` exactly: compaction only drops values, the inverse only inserts zeros.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from aipu.sim.machine.errors import InputError


class PruneGranularity(IntEnum):
    """Tables 200, 250 and 300 (CUSTOM only in Table 300, the mask generation's; no compaction has it)."""

    UNDEFINED = 1
    ROW = 2          # filter-count pruning
    COLUMN = 3       # kernel-shape pruning
    CUSTOM = 4


class PMethod(IntEnum):
    """Table 301. Code 2 is printed "ALUM"; its algorithm (9.5.1) is ADMM group lasso (decision PR-7)."""

    UNDEFINED = 1
    ADMM = 2
    INCREMENTAL_REGULARIZATION = 3


STRUCTURED = (PruneGranularity.ROW, PruneGranularity.COLUMN)


def as_matrix(w: np.ndarray, n_dim: int = 0) -> np.ndarray:
    """``w`` as the (N, C·H·W) matrix of §7.3.2 b): axis ``n_dim`` first, the others flattened in order."""
    w = np.asarray(w)
    _check_n_dim(w.shape, n_dim)
    return np.moveaxis(w, n_dim, 0).reshape(w.shape[n_dim], -1)


def from_matrix(matrix: np.ndarray, shape: tuple[int, ...], n_dim: int = 0) -> np.ndarray:
    """The inverse of :func:`as_matrix`: ``matrix`` back in ``shape``, its row count on axis ``n_dim``."""
    moved = (shape[n_dim], *shape[:n_dim], *shape[n_dim + 1:])
    return np.moveaxis(matrix.reshape(moved), 0, n_dim)


def _check_n_dim(shape: tuple[int, ...], n_dim: int) -> None:
    if not 0 <= n_dim < len(shape):
        raise InputError("N_dim", n_dim, f"an axis of the weight tensor of shape {list(shape)} (0 .. {len(shape) - 1})")


@dataclass(frozen=True, eq=False)
class StructuredSparsity:
    """One pruned tensor: its granularity, the axis of N, its shape before pruning and the 0/1 mask over its
    rows (ROW: length N) or its columns (COLUMN: length C·H·W). The mask is stored read-only as uint8."""

    granularity: PruneGranularity
    n_dim: int
    shape: tuple[int, ...]
    mask: np.ndarray

    def __post_init__(self) -> None:
        if self.granularity not in STRUCTURED:
            raise InputError("granularity", int(self.granularity),
                             "2 (row / filter pruning) or 3 (column / kernel-shape pruning)")
        object.__setattr__(self, "granularity", PruneGranularity(self.granularity))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        _check_n_dim(self.shape, self.n_dim)
        mask = np.asarray(self.mask)
        if mask.ndim != 1 or mask.size != self.length or not np.isin(mask, (0, 1)).all():
            raise InputError("mask", mask, f"a vector of {self.length} entries, each 0 or 1")
        mask = mask.astype(np.uint8)
        mask.flags.writeable = False
        object.__setattr__(self, "mask", mask)

    @property
    def rows(self) -> int:
        return self.shape[self.n_dim]

    @property
    def columns(self) -> int:
        return int(np.prod(self.shape)) // self.rows if self.rows else 0

    @property
    def length(self) -> int:
        """Entries the mask has: the rows (ROW) or the columns (COLUMN) of the matrix."""
        return self.rows if self.granularity == PruneGranularity.ROW else self.columns

    @property
    def kept(self) -> int:
        return int(self.mask.sum())

    @property
    def skip_column(self) -> tuple[int, ...]:
        """The removed columns, 0-based ascending: Table 252's Skip_Column (COLUMN only)."""
        if self.granularity != PruneGranularity.COLUMN:
            raise ValueError("Skip_Column exists for column pruning only")
        return tuple(int(i) for i in np.flatnonzero(self.mask == 0))

    @classmethod
    def from_skip_column(cls, shape: tuple[int, ...], skip_column, n_dim: int = 0) -> StructuredSparsity:
        """The COLUMN record whose removed columns are ``skip_column`` (0-based, distinct, in range)."""
        probe = cls(PruneGranularity.COLUMN, n_dim, shape, np.ones(int(np.prod(shape)) // shape[n_dim], np.uint8))
        skip = np.asarray(skip_column, dtype=np.int64).ravel()
        if skip.size and (skip.min() < 0 or skip.max() >= probe.columns or np.unique(skip).size != skip.size):
            raise InputError("Skip_Column", skip, f"distinct column indices 0 .. {probe.columns - 1}")
        mask = np.ones(probe.columns, np.uint8)
        mask[skip] = 0
        return cls(PruneGranularity.COLUMN, n_dim, shape, mask)

    def compacted_shape(self) -> tuple[int, ...]:
        """The shape :func:`compact` gives: N shrunk to the kept rows (ROW), or the matrix (N, kept) (COLUMN)."""
        if self.granularity == PruneGranularity.ROW:
            return (*self.shape[:self.n_dim], self.kept, *self.shape[self.n_dim + 1:])
        return (self.rows, self.kept)


def _check_tensor(w: np.ndarray, expected: tuple[int, ...], name: str) -> np.ndarray:
    w = np.asarray(w)
    if w.shape != tuple(expected):
        raise InputError(name, w, f"shape {list(expected)}")
    return w


def _check_bias(b, rows: int, name: str) -> np.ndarray | None:
    if b is None:
        return None
    b = np.asarray(b)
    if b.size != rows:
        raise InputError(name, b, f"{rows} entries, one per filter")
    return b.reshape(rows)


def compact(w: np.ndarray, b: np.ndarray | None, record: StructuredSparsity):
    """(W_o, B_o) of one tensor (Table 202): ROW drops the masked filters and their biases; COLUMN drops the
    masked columns of the (N, C·H·W) matrix and returns that matrix (decision PR-3), the bias unchanged."""
    w = _check_tensor(w, record.shape, "W")
    b = _check_bias(b, record.rows, "B")
    keep = record.mask.astype(bool)
    matrix = as_matrix(w, record.n_dim)
    if record.granularity == PruneGranularity.ROW:
        return (from_matrix(matrix[keep], record.compacted_shape(), record.n_dim),
                None if b is None else b[keep].copy())
    return matrix[:, keep].copy(), None if b is None else b.copy()


def restore(w: np.ndarray, b: np.ndarray | None, record: StructuredSparsity):
    """(W_u, B_u) of one tensor (Table 252): the compacted ``w`` back in the record's shape with zeros where
    the mask is 0 (a removed filter's bias is 0 too)."""
    w = _check_tensor(w, record.compacted_shape(), "W")
    keep = record.mask.astype(bool)
    matrix = np.zeros((record.rows, record.columns), dtype=w.dtype)
    if record.granularity == PruneGranularity.ROW:
        matrix[keep] = as_matrix(w, record.n_dim)
        bias = _check_bias(b, record.kept, "B")
        if bias is not None:
            full = np.zeros(record.rows, dtype=bias.dtype)
            full[keep] = bias
            bias = full
    else:
        matrix[:, keep] = w
        bias = _check_bias(b, record.rows, "B")
        bias = None if bias is None else bias.copy()
    return from_matrix(matrix, record.shape, record.n_dim), bias


def masked(w: np.ndarray, b: np.ndarray | None, record: StructuredSparsity):
    """``w`` (and ``b``) with the pruned rows or columns set to zero, in their own shapes: what pruning
    leaves of the weights, and what :func:`restore` of :func:`compact` equals."""
    w = _check_tensor(w, record.shape, "W")
    b = _check_bias(b, record.rows, "B")
    matrix = as_matrix(w, record.n_dim).copy()
    keep = record.mask.astype(bool)
    if record.granularity == PruneGranularity.ROW:
        matrix[~keep] = 0
        b = None if b is None else np.where(keep, b, 0).astype(b.dtype)
    else:
        matrix[:, ~keep] = 0
        b = None if b is None else b.copy()
    return from_matrix(matrix, record.shape, record.n_dim), b


def _records(W, S, n_dim: int, granularity: int) -> list[StructuredSparsity]:
    if len(S) != len(W):
        raise InputError("S", len(S), f"one mask per weight tensor ({len(W)})")
    return [StructuredSparsity(granularity, n_dim, np.shape(w), s) for w, s in zip(W, S)]


def _biases(B, count: int) -> list:
    if B is None:
        return [None] * count
    if len(B) != count:
        raise InputError("B", len(B), f"one bias per weight tensor ({count}) or none")
    return list(B)


def structured_sparse(W, B, S, n_dim: int, granularity: int):
    """Table 202 over lists: (W_o, B_o) for the weight tensors ``W``, their biases ``B`` (or None) and one
    mask per tensor in ``S``."""
    records = _records(W, S, n_dim, granularity)
    pairs = [compact(w, b, record) for w, b, record in zip(W, _biases(B, len(W)), records)]
    return [w for w, _ in pairs], [b for _, b in pairs]


def un_structured_sparse(W, B, S, n_dim: int, granularity: int, shapes, skip_column=None):
    """Table 252 over lists: (W_u, B_u) of the compacted tensors ``W`` with their biases ``B`` (or None), their
    masks ``S`` and their original ``shapes`` (the record's field the table leaves implicit: a column-pruned
    tensor is stored as its matrix). ``skip_column``, when given, must name the mask's removed columns."""
    if len(shapes) != len(W) or len(S) != len(W):
        raise InputError("S, shapes", (len(S), len(shapes)), f"one mask and one shape per weight tensor ({len(W)})")
    records = [StructuredSparsity(granularity, n_dim, shape, s) for shape, s in zip(shapes, S)]
    if skip_column is not None:
        if len(skip_column) != len(W) or any(
                record.granularity != PruneGranularity.COLUMN or tuple(skip) != record.skip_column
                for skip, record in zip(skip_column, records)):
            raise InputError("Skip_Column", skip_column, "the removed columns of each tensor's mask (column pruning)")
    pairs = [restore(w, b, record) for w, b, record in zip(W, _biases(B, len(W)), records)]
    return [w for w, _ in pairs], [b for _, b in pairs]
