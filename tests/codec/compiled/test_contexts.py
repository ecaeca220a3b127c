"""The compiled path's element table and context rules (codec/compiled/contexts.py) come from the one table."""
from __future__ import annotations

import pytest

from aipu.codec.compiled import contexts
from aipu.codec.reference import binarization as bz
from aipu.codec.reference.elements import ALIASES, ELEMENTS, element_spec


def test_uegk_params_come_from_the_table():
    assert contexts.uegk_params("oct_abs_q") == (198, contexts.INC_CLAMP46, 16, 0)
    assert contexts.uegk_params("qval_minus_one") == (642, contexts.INC_CLAMP23, 8, 8)
    with pytest.raises(ValueError):
        contexts.uegk_params("split_flag")
    assert bz.MAX_EG_VALUE == (1 << 32) - 1


def test_every_element_name_indexes_its_row_of_the_one_table():
    """Element holds every name an element is coded under; ELEMENT_ROWS holds the table's row for it."""
    members = contexts.Element.__members__
    assert list(members) == [*ELEMENTS, *ALIASES]
    assert [int(member) for member in members.values()] == list(range(len(members)))
    rows = {name: tuple(int(v) for v in contexts.ELEMENT_ROWS[member]) for name, member in members.items()}
    for alias, name in ALIASES.items():
        assert rows[alias] == rows[name]
    for name, row in rows.items():
        spec = element_spec(name)
        if spec.bypass:
            assert row == (-1, contexts.INC_CONST, 0, 0), name
        elif spec.binarization == "UEGk":
            assert row == contexts.uegk_params(name), name
        else:
            assert row[contexts.ROW_CTX] - spec.ctx_start in (0, 1), name
    assert rows["map_mode_flag"][contexts.ROW_CTX] == 10          # its Inc of 1 in ctu3d_map_mode_flag's block
    assert rows["select_map_mode_flag"][contexts.ROW_CTX] == 9
    assert rows["oct_nzflag"][contexts.ROW_CTX] == 138             # Inc from the neighbours, added by the trees
    assert rows["oct_start_depth_delta"][:2] == (135, contexts.INC_BIN_NONZERO)
