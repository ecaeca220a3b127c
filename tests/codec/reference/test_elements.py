"""Tables 337/338 as data (codec/reference/elements.py): the context array, its overlaps, the project rows."""
from __future__ import annotations

import itertools

from aipu.codec.reference.elements import (ALIASES, BYPASS_ELEMENTS, ELEMENTS, NUM_CONTEXTS, PROJECT_ELEMENTS,
                                           TABLE_337, element_spec)


INPUT_SAMPLES = {"sign": (0, 1), "n0": (0, 1), "n1": (0, 1), "at_max_depth": (0, 1),
                 "c0": (-3, 0, 5), "c1": (-1, 0, 2)}


def reachable_contexts(spec) -> set[int]:
    names = [n for n in spec.inputs if n in INPUT_SAMPLES]
    max_bins = {"FL": 1, "U": 40, "UEGk": 100}[spec.binarization]
    found = set()
    for combo in itertools.product(*(INPUT_SAMPLES[n] for n in names)):
        inputs = dict(zip(names, combo))
        found |= {spec.ctx_start + spec.ctx_inc(b, inputs) for b in range(max_bins)}
    return found


def test_context_array_size():
    assert NUM_CONTEXTS == 690                 # 594 + 48: the end of Table 337's last block
    assert len(TABLE_337) == 48 and len(BYPASS_ELEMENTS) == 17
    assert sum(1 for spec in TABLE_337 if spec.ctx_count) == 48


def test_every_context_index_inside_the_array():
    for spec in ELEMENTS.values():
        if not spec.bypass:
            reach = reachable_contexts(spec)
            assert min(reach) >= 0 and max(reach) < NUM_CONTEXTS, spec.name


def test_reachable_context_ranges():
    expected = {"abs_predicted_diff": (19, 41), "abs_delta": (83, 129), "oct_nzflag": (138, 140),
                "oct_index": (152, 197), "oct_abs_q": (200, 246), "uni_map_nzflag": (249, 251),
                "tgtm_delta_index": (376, 398), "esc_abs_q": (590, 636), "qval_minus_one": (643, 665),
                "oct_start_depth_delta": (135, 136), "tag_start_depth_delta": (360, 361)}
    for name, (low, high) in expected.items():
        reach = reachable_contexts(ELEMENTS[name])
        assert (min(reach), max(reach)) == (low, high), name
        assert reach == set(range(low, high + 1)), name


def test_documented_overlaps_and_nothing_else():
    """Table 337 literally (A20): which elements share a context index."""
    owners: dict[int, set[str]] = {}
    for spec in TABLE_337:
        for ctx_idx in reachable_contexts(spec):
            owners.setdefault(ctx_idx, set()).add(spec.name)
    shared = {frozenset(names) for names in owners.values() if len(names) > 1}
    assert shared == {
        frozenset({"abs_delta", "oct_cbook_esc_mode"}),          # abs_delta Inc 48 -> 129
        frozenset({"oct_abs_q", "uni_nzflag"}),                  # oct_abs_q Inc 48 -> 246
        frozenset({"tgt_mode", "tag_start_depth_delta"}),        # duplicate start 360
        frozenset({"tgtm_index", "tgtm_delta_index"}),           # 375
        frozenset({"tgtm_abs_q", "tgtm_delta_abs_q"}),           # 423
        frozenset({"uni_tgt_index", "uni_tgt_delta_index"}),     # 486
        frozenset({"uni_tgt_abs_q", "uni_tgt_delta_abs_q"}),     # 534
        frozenset({"esc_abs_q", "reorder_flag"}),                # esc_abs_q count 3 spills into 591
        frozenset({"esc_abs_q", "signalled_flag"}),              # ... and 594
    }
    # map_mode_flag uses Inc 1 in ctu3d_map_mode_flag's block: deliberate, no overlap
    assert reachable_contexts(ELEMENTS["map_mode_flag"]) == {10}
    assert reachable_contexts(ELEMENTS["ctu3d_map_mode_flag"]) == {9}


def test_project_elements_share_their_siblings_contexts():
    assert {spec.name for spec in PROJECT_ELEMENTS} == {
        "cbook_sign", "tgtm_nzflag_q", "uni_tgt_nzflag_index", "uni_index", "uni_abs_q", "uni_map_sign"}
    assert reachable_contexts(ELEMENTS["cbook_sign"]) == reachable_contexts(ELEMENTS["sign_delta"])
    assert reachable_contexts(ELEMENTS["tgtm_nzflag_q"]) == reachable_contexts(ELEMENTS["tgtm_nzflag_index"])
    assert reachable_contexts(ELEMENTS["uni_index"]) == reachable_contexts(ELEMENTS["uni_cmap_val"])
    assert reachable_contexts(ELEMENTS["uni_abs_q"]) == reachable_contexts(ELEMENTS["uni_qmap_val"])
    assert reachable_contexts(ELEMENTS["uni_map_sign"]) == reachable_contexts(ELEMENTS["uni_sign"])
    assert reachable_contexts(ELEMENTS["uni_tgt_nzflag_index"]) == {474}


def test_aliases_and_bypass_list():
    assert element_spec("select_map_mode_flag") is ELEMENTS["ctu3d_map_mode_flag"]
    assert element_spec("tag_mode") is ELEMENTS["tgt_mode"]
    assert set(ALIASES) == {"select_map_mode_flag", "tag_mode"}
    assert all(ELEMENTS[name].bypass and ELEMENTS[name].binarization == "FL" for name in BYPASS_ELEMENTS)
    assert all(not spec.bypass for spec in TABLE_337 + PROJECT_ELEMENTS)
    assert ELEMENTS["sublayer_cmaxw"].fixed_length == 32 and ELEMENTS["bias_abs_q"].inputs == ("length",)
