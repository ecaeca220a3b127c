"""Framework tensors <-> the standard's sublayers (codec/layout.py)."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.layout import from_standard, placement, to_standard


def test_layout_matches_the_standard_order():
    w = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)          # [K][C][R][S]
    place = placement(w.shape)
    levels = to_standard(w, place)
    assert place.shape == (4, 5, 3, 2) and levels.shape == (20, 3, 2)
    assert levels[1 * 5 + 2, 1, 0] == w[0, 1, 1, 2]              # zs = r*S + s
    np.testing.assert_array_equal(from_standard(levels, place), w)
    with pytest.raises(ValueError, match="16-bit"):
        placement((70000, 3))
    with pytest.raises(ValueError, match="kernel size"):
        placement((1, 1, 57, 72))
