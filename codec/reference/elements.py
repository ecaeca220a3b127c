"""Tables 337 and 338 as data: the one element table of the codec.

Every syntax element of chapter 10 is ``ae(v)``: a bin string (Table 338's binarisation) whose bins are
context-coded with ``ctxIdx = ctxIdxStart + ctxIdxInc`` (Table 337) or bypass-coded (the list of
10.4.3.1). ``ElementSpec`` is one row; ``element_spec(name)`` finds it. The reference element coder
(``codec.reference.element_coder``) codes from these rows, and the compiled path derives its element
indices and its context array from them (``codec.compiled.contexts``), so the two cannot disagree.

Inputs: ``sign`` = the sign flag coded just before (abs_delta: sign_delta; oct_abs_q: oct_sign;
esc_abs_q: esc_sign), ``n0``/``n1`` = NzFlagP[0]/[1], ``c0``/``c1`` = CoefP[0]/[1], ``at_max_depth`` =
(treeDepth == Oct.size() - 1), ``length`` = array1d_depth, ``max_value`` = the largest legal value of a
unary element (signalled_size: MaxCbookSize - PredictedSize; *_start_depth_delta: the tree depth - 1).

======================== ============ ===== ===== ======================================== ======================
element                  binarisation start count ctxIdxInc                                inputs
======================== ============ ===== ===== ======================================== ======================
integer_input ..         FL n         bypass      (17 header/bias elements, 10.4.3.1)      (bias_abs_q: length)
bias_sign                FL1          0     3     0
bias_nz_flag             FL1          3     3     0
split_flag               FL1          6     3     0
ctu3d_map_mode_flag [1]  FL1          9     3     0
map_mode_flag            FL1          9     3     1
enable_start_depth       FL1          12    3     0
cu3d_map_mode            FL1          15    3     0
abs_predicted_diff       UEGk(6,0)    18    48    binIdx<23 ? binIdx+1 : 23
predicted_sign           FL1          66    3     0
predicted_flag           FL1          69    3     0
signalled_size           U            72    3     0                                        max_value
nzflag_delta             FL1          75    3     0
sign_delta               FL1          78    3     0
abs_delta                UEGk(6,0)    81    48    binIdx<46+s ? binIdx+2 : 46+s            sign
oct_cbook_esc_mode       FL1          129   3     0
uni_mode                 FL1          132   3     0
oct_start_depth_delta    U            135   3     binIdx ? 1 : 0                           max_value
oct_nzflag               FL1          138   9     max depth: C0<0?0:C0==0?1:2, else N0==N1?N0:2  at_max_depth n0 n1 c0
oct_sign                 FL1          147   3     C0!=0&&C1!=0 ? 0 : C0==0&&C1==0 ? 1 : 2  c0 c1
oct_index                UEGk(16,0)   150   48    binIdx<46 ? binIdx+2 : 46
oct_abs_q                UEGk(16,0)   198   48    binIdx<46+s ? binIdx+2 : 46+s            sign
uni_nzflag               FL1          246   3     0
uni_map_nzflag           FL1          249   9     N0==N1 ? N0 : 2                          n0 n1
uni_sign                 FL1          258   3     C0<0 ? 0 : C0==0 ? 1 : 2                 c0
uni_cmap_val             UEGk(16,0)   261   48    binIdx<46 ? binIdx+2 : 46
uni_qmap_val             UEGk(16,0)   309   48    binIdx<46 ? binIdx+2 : 46
tag_cbook_esc_mode       FL1          357   3     0
tgt_mode [2]             FL1          360   3     0
tag_start_depth_delta    U            360   3     binIdx ? 1 : 0                           max_value
tgtm_nzflag_index        FL1          363   9     C0!=0&&C1!=0 ? 0 : C0==0&&C1==0 ? 1 : 2  c0 c1
tgtm_sign_q              FL1          372   3     0
tgtm_index               UEGk(16,0)   375   48    binIdx<46 ? binIdx+2 : 46
tgtm_delta_index         UEGk(0,5)    375   48    binIdx<23 ? binIdx+1 : 23
tgtm_abs_q               UEGk(16,4)   423   48    binIdx<46 ? binIdx+2 : 46
tgtm_delta_abs_q         UEGk(0,8)    423   48    binIdx<23 ? binIdx+1 : 23
uni_tgt_nzflag           FL1          471   3     0
uni_tgt_nzflag_q         FL1          474   9     0
uni_tgt_sign_q           FL1          483   3     0
uni_tgt_index            UEGk(16,0)   486   48    binIdx<46 ? binIdx+2 : 46
uni_tgt_delta_index      UEGk(0,5)    486   48    binIdx<23 ? binIdx+1 : 23
uni_tgt_abs_q            UEGk(16,4)   534   48    binIdx<46 ? binIdx+2 : 46
uni_tgt_delta_abs_q      UEGk(0,8)    534   48    binIdx<23 ? binIdx+1 : 23
esc_nzflag               FL1          582   3     0
esc_sign                 FL1          585   3     0
esc_abs_q                UEGk(16,4)   588   3     binIdx<46+s ? binIdx+2 : 46+s            sign
reorder_flag             FL1          591   3     0
signalled_flag           FL1          594   48    0
qval_minus_one           UEGk(8,8)    642   48    binIdx<23 ? binIdx+1 : 23
--- not in Tables 337/338: project decisions (docs/codec-engine.md) ----------------------------------
end_of_last_layer_flag   FL1          bypass                                               (10.4.3.1)
end_of_last_layer_ctu_flag FL1        bypass                                               (10.4.3.1)
cbook_sign               FL1          78    -     0 (sign_delta's block)
tgtm_nzflag_q            FL1          363   -     as tgtm_nzflag_index                     c0 c1
uni_tgt_nzflag_index     FL1          474   -     0 (as uni_tgt_nzflag_q)
uni_index                UEGk(16,0)   261   -     as uni_cmap_val
uni_abs_q                UEGk(16,0)   309   -     as uni_qmap_val (sign = 0)
uni_map_sign             FL1          258   -     as uni_sign                              c0
======================== ============ ===== ===== ======================================== ======================

[1] the syntax's ``select_map_mode_flag`` (Table 327); [2] the syntax's ``tag_mode`` (Table 329). Both
names are accepted. Table 337 is implemented literally, overlaps included (A20): the shared starts
360/375/423/486/534, esc_abs_q's count of 3 spilling over 591..636, and the Inc of 48 that abs_delta /
oct_abs_q / esc_abs_q reach with sign = 1 at binIdx 46.

Signed values stay the syntax's business: every element here is an unsigned bin string.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

BYPASS = None   # ctx_start of a bypass element


# --- ctxIdxInc rules of Table 337: name -> (function of (binIdx, inputs), inputs it needs) -------------
def _inc_bin_plus2(bin_idx: int, sign: int) -> int:
    return bin_idx + 2 if bin_idx < 46 + sign else 46 + sign


def _inc_nz_neighbours(n0: int, n1: int) -> int:
    return n0 if n0 == n1 else 2


def _inc_coef_sign(c0: int) -> int:
    return 0 if c0 < 0 else (1 if c0 == 0 else 2)


def _inc_coef_pair(c0: int, c1: int) -> int:
    return 0 if (c0 != 0 and c1 != 0) else (1 if (c0 == 0 and c1 == 0) else 2)


INC_RULES: dict[str, tuple[Callable[[int, dict[str, int]], int], tuple[str, ...]]] = {
    "0": (lambda b, i: 0, ()),
    "1": (lambda b, i: 1, ()),
    "binIdx?1:0": (lambda b, i: 1 if b else 0, ()),
    "binIdx<23?binIdx+1:23": (lambda b, i: b + 1 if b < 23 else 23, ()),
    "binIdx<46?binIdx+2:46": (lambda b, i: _inc_bin_plus2(b, 0), ()),
    "binIdx<46+sign?binIdx+2:46+sign": (lambda b, i: _inc_bin_plus2(b, i["sign"]), ("sign",)),
    "N0==N1?N0:2": (lambda b, i: _inc_nz_neighbours(i["n0"], i["n1"]), ("n0", "n1")),
    "C0<0?0:C0==0?1:2": (lambda b, i: _inc_coef_sign(i["c0"]), ("c0",)),
    "C0!=0&&C1!=0?0:C0==0&&C1==0?1:2": (lambda b, i: _inc_coef_pair(i["c0"], i["c1"]), ("c0", "c1")),
    "oct_nzflag": (lambda b, i: _inc_coef_sign(i["c0"]) if i["at_max_depth"]
                   else _inc_nz_neighbours(i["n0"], i["n1"]), ("at_max_depth", "n0", "n1", "c0")),
}

@dataclass(frozen=True)
class ElementSpec:
    """One row of Tables 337 + 338 (or of the project's additions for elements they miss)."""

    name: str
    binarization: str            # "FL", "U" or "UEGk"
    ctx_start: int | None        # None: bypass (10.4.3.1)
    ctx_count: int               # Table 337's "ctx数量" column; 0 where the table has no row
    inc_rule: str                # a key of INC_RULES ("0" for bypass elements)
    fixed_length: int | None = None   # FL: the length, or None when it is the input ``length``
    c_max: int = 0               # UEGk
    k: int = 0                   # UEGk
    source: str = ""             # the rows of T/AI 115.1-2021 it comes from, or "decision: ..."

    @property
    def bypass(self) -> bool:
        return self.ctx_start is None

    @property
    def inputs(self) -> tuple[str, ...]:
        names = INC_RULES[self.inc_rule][1]
        if self.binarization == "FL" and self.fixed_length is None:
            names += ("length",)
        if self.binarization == "U":
            names += ("max_value",)
        return names

    def ctx_inc(self, bin_idx: int, inputs: dict[str, int]) -> int:
        return INC_RULES[self.inc_rule][0](bin_idx, inputs)


_TABLES_337_338 = "Table 337 and Table 338, the element's rows"


def _bypass(name: str, length: int | None, in_table_338: bool = True) -> ElementSpec:
    return ElementSpec(name, "FL", BYPASS, 0, "0", fixed_length=length,
                       source="10.4.3.1 bypass list" + ("; Table 338's row" if in_table_338 else ""))


def _fl1(name: str, start: int, count: int, rule: str) -> ElementSpec:
    return ElementSpec(name, "FL", start, count, rule, fixed_length=1, source=_TABLES_337_338)


def _uegk(name: str, start: int, count: int, rule: str, c_max: int, k: int) -> ElementSpec:
    return ElementSpec(name, "UEGk", start, count, rule, c_max=c_max, k=k, source=_TABLES_337_338)


def _unary(name: str, start: int, count: int, rule: str) -> ElementSpec:
    return ElementSpec(name, "U", start, count, rule, source=_TABLES_337_338)


_CLAMP23 = "binIdx<23?binIdx+1:23"
_CLAMP46 = "binIdx<46?binIdx+2:46"
_CLAMP46S = "binIdx<46+sign?binIdx+2:46+sign"
_PAIR = "C0!=0&&C1!=0?0:C0==0&&C1==0?1:2"

# Bypass elements: the list of 10.4.3.1 with Table 338's FL lengths.
_BYPASS_ELEMENTS = (
    _bypass("end_of_last_layer_flag", 1, in_table_338=False),
    _bypass("end_of_last_layer_ctu_flag", 1, in_table_338=False),
    _bypass("integer_input", 1),
    _bypass("total_trainable_layer", 16),
    _bypass("enable_escape_reorder", 1),
    _bypass("enable_zdep_reorder", 1),
    _bypass("enable_max_ctu3d_size", 1),
    _bypass("max_ctu3d_idx", 2),
    _bypass("array1d_depth", 5),
    _bypass("total_sublayer", 4),
    _bypass("sublayer_cmaxw", 32),
    _bypass("sublayer_dim", 2),
    _bypass("sublayer_shape", 16),
    _bypass("include_bias_array1d", 1),
    _bypass("sublayer_scan_order", 1),
    _bypass("sublayer_bitdepth", 5),
    _bypass("bias_abs_q", None),
)

# Table 337 joined with Table 338, in table order.
TABLE_337 = (
    _fl1("bias_sign", 0, 3, "0"),
    _fl1("bias_nz_flag", 3, 3, "0"),
    _fl1("split_flag", 6, 3, "0"),
    _fl1("ctu3d_map_mode_flag", 9, 3, "0"),
    _fl1("map_mode_flag", 9, 3, "1"),
    _fl1("enable_start_depth", 12, 3, "0"),
    _fl1("cu3d_map_mode", 15, 3, "0"),
    _uegk("abs_predicted_diff", 18, 48, _CLAMP23, 6, 0),
    _fl1("predicted_sign", 66, 3, "0"),
    _fl1("predicted_flag", 69, 3, "0"),
    _unary("signalled_size", 72, 3, "0"),
    _fl1("nzflag_delta", 75, 3, "0"),
    _fl1("sign_delta", 78, 3, "0"),
    _uegk("abs_delta", 81, 48, _CLAMP46S, 6, 0),
    _fl1("oct_cbook_esc_mode", 129, 3, "0"),
    _fl1("uni_mode", 132, 3, "0"),
    _unary("oct_start_depth_delta", 135, 3, "binIdx?1:0"),
    _fl1("oct_nzflag", 138, 9, "oct_nzflag"),
    _fl1("oct_sign", 147, 3, _PAIR),
    _uegk("oct_index", 150, 48, _CLAMP46, 16, 0),
    _uegk("oct_abs_q", 198, 48, _CLAMP46S, 16, 0),
    _fl1("uni_nzflag", 246, 3, "0"),
    _fl1("uni_map_nzflag", 249, 9, "N0==N1?N0:2"),
    _fl1("uni_sign", 258, 3, "C0<0?0:C0==0?1:2"),
    _uegk("uni_cmap_val", 261, 48, _CLAMP46, 16, 0),
    _uegk("uni_qmap_val", 309, 48, _CLAMP46, 16, 0),
    _fl1("tag_cbook_esc_mode", 357, 3, "0"),
    _fl1("tgt_mode", 360, 3, "0"),
    _unary("tag_start_depth_delta", 360, 3, "binIdx?1:0"),
    _fl1("tgtm_nzflag_index", 363, 9, _PAIR),
    _fl1("tgtm_sign_q", 372, 3, "0"),
    _uegk("tgtm_index", 375, 48, _CLAMP46, 16, 0),
    _uegk("tgtm_delta_index", 375, 48, _CLAMP23, 0, 5),
    _uegk("tgtm_abs_q", 423, 48, _CLAMP46, 16, 4),
    _uegk("tgtm_delta_abs_q", 423, 48, _CLAMP23, 0, 8),
    _fl1("uni_tgt_nzflag", 471, 3, "0"),
    _fl1("uni_tgt_nzflag_q", 474, 9, "0"),
    _fl1("uni_tgt_sign_q", 483, 3, "0"),
    _uegk("uni_tgt_index", 486, 48, _CLAMP46, 16, 0),
    _uegk("uni_tgt_delta_index", 486, 48, _CLAMP23, 0, 5),
    _uegk("uni_tgt_abs_q", 534, 48, _CLAMP46, 16, 4),
    _uegk("uni_tgt_delta_abs_q", 534, 48, _CLAMP23, 0, 8),
    _fl1("esc_nzflag", 582, 3, "0"),
    _fl1("esc_sign", 585, 3, "0"),
    _uegk("esc_abs_q", 588, 3, _CLAMP46S, 16, 4),
    _fl1("reorder_flag", 591, 3, "0"),
    _fl1("signalled_flag", 594, 48, "0"),
    _uegk("qval_minus_one", 642, 48, _CLAMP23, 8, 8),
)

# Elements the syntax uses but Tables 337/338 miss (A21): project decisions, each
# documented in docs/codec-engine.md. ctx_count 0 marks "no row of its own".
PROJECT_ELEMENTS = (
    ElementSpec("cbook_sign", "FL", 78, 0, "0", fixed_length=1, source="decision: Table 331"),
    ElementSpec("tgtm_nzflag_q", "FL", 363, 0, _PAIR, fixed_length=1, source="decision: Table 334"),
    ElementSpec("uni_tgt_nzflag_index", "FL", 474, 0, "0", fixed_length=1,
                source="decision: Table 335"),
    ElementSpec("uni_index", "UEGk", 261, 0, _CLAMP46, c_max=16, source="decision: Table 332"),
    ElementSpec("uni_abs_q", "UEGk", 309, 0, _CLAMP46, c_max=16, source="decision: Table 332"),
    ElementSpec("uni_map_sign", "FL", 258, 0, "C0<0?0:C0==0?1:2", fixed_length=1,
                source="decision: Table 332"),
)

ELEMENTS: dict[str, ElementSpec] = {spec.name: spec for spec in _BYPASS_ELEMENTS + TABLE_337 + PROJECT_ELEMENTS}

# The syntax tables name two elements differently from Tables 337/338 (A6 Table 327, A10 Table 329).
ALIASES: dict[str, str] = {"select_map_mode_flag": "ctu3d_map_mode_flag", "tag_mode": "tgt_mode"}

BYPASS_ELEMENTS: tuple[str, ...] = tuple(spec.name for spec in _BYPASS_ELEMENTS)

NUM_CONTEXTS: int = max(spec.ctx_start + spec.ctx_count for spec in TABLE_337)   # 690 (594 + 48)


def element_spec(name: str) -> ElementSpec:
    spec = ELEMENTS.get(ALIASES.get(name, name))
    if spec is None:
        raise ValueError(f"unknown syntax element {name!r}")
    return spec


