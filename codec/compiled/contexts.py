"""The context array and the element table of the compiled path, derived from ``codec.reference.elements``.

* ``ctx``: int64[num_contexts, 3] with columns CTX_MPS, CTX_CYCNO, CTX_LG_PMPS (``new_contexts``), adapted by
  ``update_ctx`` exactly as the reference's ``ContextModels``.
* The ctxIdxInc rules of Table 337 as njit functions: ``ctx_inc`` for the rules of the multi-bin elements
  (their INC_* codes), ``inc_nz_neighbours``, ``inc_coef_sign`` and ``inc_coef_pair`` for the flags whose
  context the trees compute from their neighbours.
* ``Element``: every name an element is coded under (the table's names, then the syntax's aliases), as an
  IntEnum whose values index ``ELEMENT_ROWS``, the table's rows as numbers. numba reads an IntEnum member
  as a constant, so njit code names an element as the syntax does (``Element.oct_nzflag``) and the
  indices are never kept in step with the table by hand.
"""
from __future__ import annotations

import enum

import numpy as np

from ..reference.elements import ALIASES, ELEMENTS, INC_RULES, NUM_CONTEXTS, element_spec
from ..reference.engine import LG_PMPS_INIT, LG_PMPS_MAX, LPS_INCREMENT
from .jit_cache import njit

CTX_MPS, CTX_CYCNO, CTX_LG_PMPS = 0, 1, 2          # ctx[] columns

# ctxIdxInc rules of the multi-bin context-coded elements (Table 337), as codes for njit code
INC_CONST, INC_BIN_NONZERO, INC_CLAMP23, INC_CLAMP46 = 0, 1, 2, 3
INC_RULE_CODES = {"0": INC_CONST, "binIdx?1:0": INC_BIN_NONZERO, "binIdx<23?binIdx+1:23": INC_CLAMP23,
                  "binIdx<46?binIdx+2:46": INC_CLAMP46, "binIdx<46+sign?binIdx+2:46+sign": INC_CLAMP46}

Element = enum.IntEnum("Element", [(name, index) for index, name in enumerate((*ELEMENTS, *ALIASES))],
                       module=__name__)

# ELEMENT_ROWS[element] columns. ROW_CTX: the context of bin 0 before any increment that depends on inputs
# (ctxIdxStart, plus the fixed Inc of a flag whose rule needs no input), -1 for a bypass element;
# ROW_RULE: the INC_* code of a multi-bin element; ROW_C_MAX, ROW_K: UEGk's parameters.
ROW_CTX, ROW_RULE, ROW_C_MAX, ROW_K = 0, 1, 2, 3


def element_row(name: str) -> tuple[int, int, int, int]:
    """The row of ``ELEMENT_ROWS`` of an element (see the ROW_* columns)."""
    spec = element_spec(name)
    if spec.bypass:
        return -1, INC_CONST, 0, 0
    if spec.fixed_length == 1:
        fixed_inc = 0 if INC_RULES[spec.inc_rule][1] else spec.ctx_inc(0, {})
        return spec.ctx_start + fixed_inc, INC_CONST, 0, 0
    return spec.ctx_start, INC_RULE_CODES[spec.inc_rule], spec.c_max, spec.k


ELEMENT_ROWS = np.array([element_row(name) for name in Element.__members__], dtype=np.int64)


def uegk_params(name: str) -> tuple[int, int, int, int]:
    """(ctx_start, INC_* rule, cMax, k) of a UEGk element, for njit de-binarisers called by name."""
    spec = element_spec(name)
    if spec.binarization != "UEGk":
        raise ValueError(f"element {name} is {spec.binarization}, not UEGk")
    return element_row(name)


def new_contexts(count: int = NUM_CONTEXTS) -> np.ndarray:
    """The context array after 10.4.2.1's initialisation (mps 0, cycno 0, lgPmps 1023)."""
    ctx = np.zeros((count, 3), dtype=np.int64)
    ctx[:, CTX_LG_PMPS] = LG_PMPS_INIT
    return ctx


@njit
def update_ctx(ctx, ctx_idx, bin_val):
    """update_ctx (10.4.3.3.5), as reference.engine.ContextModels.update."""
    cycno = ctx[ctx_idx, CTX_CYCNO]
    lg_pmps = ctx[ctx_idx, CTX_LG_PMPS]
    cwr = 3 if cycno <= 1 else (4 if cycno == 2 else 5)
    if bin_val != ctx[ctx_idx, CTX_MPS]:
        ctx[ctx_idx, CTX_CYCNO] = cycno + 1 if cycno <= 2 else 3
        lg_pmps += LPS_INCREMENT[cwr - 3]
        if lg_pmps > LG_PMPS_MAX:
            lg_pmps = 2047 - lg_pmps
            ctx[ctx_idx, CTX_MPS] = 1 - ctx[ctx_idx, CTX_MPS]
    else:
        if cycno == 0:
            ctx[ctx_idx, CTX_CYCNO] = 1
        lg_pmps -= (lg_pmps >> cwr) + (lg_pmps >> (cwr + 2))
    ctx[ctx_idx, CTX_LG_PMPS] = lg_pmps


@njit
def ctx_inc(rule, bin_idx, sign):
    """ctxIdxInc of the rules shared by the multi-bin elements (INC_* codes)."""
    if rule == INC_CLAMP46:
        return bin_idx + 2 if bin_idx < 46 + sign else 46 + sign
    if rule == INC_CLAMP23:
        return bin_idx + 1 if bin_idx < 23 else 23
    if rule == INC_BIN_NONZERO:
        return 1 if bin_idx else 0
    return 0


@njit
def inc_nz_neighbours(n0, n1):
    """Table 337's ``N0==N1?N0:2``."""
    return n0 if n0 == n1 else 2


@njit
def inc_coef_sign(c0):
    """Table 337's ``C0<0?0:C0==0?1:2``."""
    return 0 if c0 < 0 else (1 if c0 == 0 else 2)


@njit
def inc_coef_pair(c0, c1):
    """Table 337's ``C0!=0&&C1!=0?0:C0==0&&C1==0?1:2``."""
    return 0 if (c0 != 0 and c1 != 0) else (1 if (c0 == 0 and c1 == 0) else 2)
