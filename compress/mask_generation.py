"""Mask generation of T/AI 115.1-2021 §9.5 (Table 299) as numpy functions on weight matrices; the training that
drives them lives with the model it trains (aipu.app.models.prune_digits; docs/pruning.md).

* Magnitude (§7.3.2's "given criterion"): rank rows or columns by their L1 or L2 norm and remove the least
  important fraction.
* ADMM group lasso over rows (§9.5.1, P_Method 2): the W-step's penalty gradient, the F-step of eq. (50)
  (row-wise group soft-thresholding of U = W + K/2), the K-step K + W − F and the stopping test of step g).
* Incremental regularisation over columns (§9.5.2, P_Method 3): column L1 ranks averaged over iterations,
  Reg_func (the standard leaves it open; decision PR-8 of docs/pruning.md), the regularisation update that masks
  a column when its factor reaches Target_reg, the gradient of the regularisation, and Offer_mask (Table 306).

All matrices are (N, C·H·W) (aipu.compress.pruning.as_matrix); masks are 0/1 vectors, 1 = kept.
"""
from __future__ import annotations

import numpy as np

from aipu.compress.pruning import PruneGranularity, as_matrix
from aipu.sim.machine.errors import InputError

CRITERIA = ("l1", "l2")


def group_norms(matrix: np.ndarray, granularity: int, criterion: str = "l2") -> np.ndarray:
    """The L1 or L2 norm of every row (ROW) or column (COLUMN) of ``matrix``."""
    if criterion not in CRITERIA:
        raise InputError("criterion", criterion, " or ".join(CRITERIA))
    if granularity not in (PruneGranularity.ROW, PruneGranularity.COLUMN):
        raise InputError("granularity", granularity, "2 (rows) or 3 (columns)")
    axis = 1 if granularity == PruneGranularity.ROW else 0
    matrix = np.asarray(matrix, np.float64)
    return np.abs(matrix).sum(axis=axis) if criterion == "l1" else np.sqrt((matrix ** 2).sum(axis=axis))


def pruned_count(groups: int, ratio: float) -> int:
    """Groups a ratio removes: round(ratio · groups) half up, leaving at least one group."""
    if not 0.0 <= ratio < 1.0:
        raise InputError("ratio", ratio, "a fraction 0 <= ratio < 1 of the filters or columns to remove")
    return min(int(np.floor(ratio * groups + 0.5)), groups - 1)


def magnitude_mask(w: np.ndarray, ratio: float, granularity: int = PruneGranularity.ROW, *, n_dim: int = 0,
                   criterion: str = "l1") -> np.ndarray:
    """The mask removing the ``ratio`` of rows or columns of ``w`` with the smallest norms; of equal norms the
    lower index goes first (a stable sort)."""
    norms = group_norms(as_matrix(w, n_dim), granularity, criterion)
    mask = np.ones(norms.size, np.uint8)
    mask[np.argsort(norms, kind="stable")[:pruned_count(norms.size, ratio)]] = 0
    return mask


# ------------------------------------------------------------------------------------------ ADMM (§9.5.1)
def group_soft_threshold(u: np.ndarray, lam: float) -> np.ndarray:
    """Eq. (50) on every row i of ``u``: U_i · max(‖U_i‖₂ − λ, 0) / ‖U_i‖₂ (a zero row stays zero)."""
    if not lam >= 0:
        raise InputError("lambda", lam, "a non-negative group-lasso weight")
    u = np.asarray(u, np.float64)
    norms = np.sqrt((u ** 2).sum(axis=1, keepdims=True))
    scale = np.divide(np.maximum(norms - lam, 0.0), norms, out=np.zeros_like(norms), where=norms > 0)
    return u * scale


def admm_penalty_gradient(w: np.ndarray, f: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Step c): the gradient of ½‖W − T‖²_F with T = F − K/2, which the W-step adds to the loss's."""
    return w - (f - 0.5 * k)


def admm_update(w: np.ndarray, k: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Steps d) to f) after a W-step: F = eq. (50) of U = W + K/2, then K = K + W − F. Returns (F, K)."""
    f = group_soft_threshold(w + 0.5 * k, lam)
    return f, k + w - f


def admm_converged(w: np.ndarray, f: np.ndarray, f_previous: np.ndarray, eps: float) -> bool:
    """Step g): ‖W − F‖_F ≤ ε or ‖F − F_previous‖_F ≤ ε."""
    return bool(np.linalg.norm(w - f) <= eps or np.linalg.norm(f - f_previous) <= eps)


def row_mask(f: np.ndarray) -> np.ndarray:
    """Table 302's output mask: 1 for each row of F the group lasso left non-zero."""
    return (np.abs(np.asarray(f)).sum(axis=1) > 0).astype(np.uint8)


# ------------------------------------------------------------------------ incremental regularisation (§9.5.2)
def column_ranks(w2d: np.ndarray) -> np.ndarray:
    """Step 4.2's ranking: each column's rank by L1 norm, 0 = the least important (ties: lower index first)."""
    order = np.argsort(group_norms(w2d, PruneGranularity.COLUMN, "l1"), kind="stable")
    ranks = np.empty(order.size, np.int64)
    ranks[order] = np.arange(order.size)
    return ranks


def averaged_ranks(history: list[np.ndarray]) -> np.ndarray:
    """Step 4.2: the ranks of the last M iterations averaged, then ranked again (ties: lower index first)."""
    if not history:
        raise ValueError("at least one ranking to average")
    mean = np.mean(np.stack(history), axis=0)
    ranks = np.empty(mean.size, np.int64)
    ranks[np.argsort(mean, kind="stable")] = np.arange(mean.size)
    return ranks


def reg_func(ranks: np.ndarray, sparsity: float, amplitude: float, *, floor: float = 0.1,
             tail: float = 0.25) -> np.ndarray:
    """Reg_func (Table 305; decision PR-8): the regularisation increment of each column from its rank r among G.
    Below the pruning boundary r < sparsity·G it falls linearly from ``amplitude`` at r = 0 but never under
    floor·amplitude (so the columns just inside the boundary still reach Target_reg); from the boundary on it
    is negative, down to −tail·amplitude at the most important column: unimportant columns gain
    regularisation, important ones lose it."""
    if not 0.0 < sparsity < 1.0 or not amplitude > 0:
        raise InputError("Reg_func", (sparsity, amplitude), "0 < sparsity < 1 and amplitude > 0")
    ranks = np.asarray(ranks, np.float64)
    groups = ranks.size
    boundary = sparsity * groups
    below = amplitude * np.maximum(1.0 - ranks / boundary, floor)
    above = -tail * amplitude * (ranks - boundary) / max(groups - 1 - boundary, 1.0)
    return np.where(ranks < boundary, below, above)


def update_regularisation(reg: np.ndarray, increment: np.ndarray, mask: np.ndarray, target_reg: float):
    """Steps 4.3 and 4.4: Reg_val = max(reg + increment, 0) on the columns still kept; a column whose factor
    reaches ``target_reg`` is masked. Returns (Reg_val, mask); masked columns keep their factor."""
    mask = np.asarray(mask, np.uint8).copy()
    kept = mask.astype(bool)
    reg = np.asarray(reg, np.float64).copy()
    reg[kept] = np.maximum(reg[kept] + increment[kept], 0.0)
    mask[kept & (reg >= target_reg)] = 0
    return reg, mask


def regularisation_gradient(w2d: np.ndarray, reg: np.ndarray) -> np.ndarray:
    """Step 5: the gradient of ½ Σ_g Reg_val_g ‖W[:, g]‖² added to the loss, column by column."""
    return np.asarray(w2d) * np.asarray(reg)[None, :]


def sparsity(mask: np.ndarray) -> float:
    """L_sparsity: the fraction of a layer's groups masked."""
    mask = np.asarray(mask)
    return float(np.count_nonzero(mask == 0) / mask.size) if mask.size else 0.0


def offer_mask(a: np.ndarray, a_mask: np.ndarray, b: np.ndarray | None = None, b_mask: np.ndarray | None = None):
    """Offer_mask (Table 306): (A ⊙ A_mask, B ⊙ B_mask); a column mask vector of A's columns broadcasts over
    its rows, and B passes unchanged without a mask."""
    a = np.asarray(a)
    a_mask = np.asarray(a_mask)
    if a_mask.shape != a.shape and a_mask.shape != a.shape[-1:]:
        raise InputError("A_mask", a_mask, f"the shape of A {list(a.shape)} or one entry per column")
    sparse_b = None if b is None else (np.asarray(b) if b_mask is None else np.asarray(b) * np.asarray(b_mask))
    return a * a_mask, sparse_b
