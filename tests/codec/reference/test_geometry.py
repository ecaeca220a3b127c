"""CTU and CU geometry and tree shapes (codec/reference/geometry.py): the helpers, CTU sizes, scan orders and
the kernel-adapted CTU size, each through a full round trip."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.encoder import EncoderOptions
from aipu.codec.reference.geometry import CtuGeometry, ctu_geometries, get_bitdepth, tree_shapes
from aipu.codec.reference.headers import StreamHeader, Sublayer
from tests.codec.syntax_streams import conv_sublayers, round_trip, weight_levels


def test_geometry_of_tables_319_and_320():
    assert [get_bitdepth(w) for w in (0, 1, 2, 3, 8, 4096)] == [1, 1, 2, 2, 4, 13]
    assert tree_shapes(9, 8, 8, planar=False) == [(1, 1, 1), (2, 1, 1), (3, 2, 2), (5, 4, 4), (9, 8, 8)]
    assert tree_shapes(9, 5, 3, planar=True) == [(9, 1, 1), (9, 2, 1), (9, 3, 2), (9, 5, 3)]
    ctu = CtuGeometry(0, 0, 20, 64, 8, 8, 0)
    assert ctu.grids == [(1, 1), (1, 2), (2, 4), (3, 8)]
    assert ctu.cu_rect(2, 1, 3) == (16, 48, 4, 16)
    header = StreamHeader(enable_max_ctu3d_size=1)
    geometry = ctu_geometries(header, Sublayer(dim=4, shape=(3, 3, 64, 64)))
    assert (geometry[0].height, geometry[0].width, len(geometry)) == (16, 16, 16)


@pytest.mark.parametrize("max_ctu3d_idx", (0, 1, 2, 3))
@pytest.mark.parametrize("scan_order", (0, 1))
def test_ctu_sizes_and_scan_orders(max_ctu3d_idx, scan_order):
    rng = np.random.default_rng(max_ctu3d_idx * 2 + scan_order)
    header = StreamHeader(integer_input=1, max_ctu3d_idx=max_ctu3d_idx, array1d_depth=9)
    subs = conv_sublayers(rng, r=1, s=1, c=37, k=70)
    subs[0].scan_order = scan_order
    options = EncoderOptions(trees=("octree",), codebook="off", start_depth="root", split="always")
    round_trip(header, subs, options)


@pytest.mark.parametrize("shape", [(3, 3, 1, 24), (5, 5, 1, 9), (3, 3, 16, 1), (1, 1, 40, 40), (7, 7, 3, 10),
                                   (1, 3, 6, 6)])
def test_max_ctu3d_size_adapts_to_the_kernel(shape):
    """enable_max_ctu3d_size (10.5.4) including the depthwise C == 1 and K == 1 branches (A25)."""
    rng = np.random.default_rng(sum(shape))
    r, s, c, k = shape
    header = StreamHeader(integer_input=1, enable_max_ctu3d_size=1, array1d_depth=9)
    subs = [Sublayer(dim=4 if r > 1 else 3, shape=shape, levels=weight_levels(rng, r * s, c, k, zero_rows=0))]
    options = EncoderOptions(trees=("tagtree",), codebook="off", start_depth="root", split="always")
    round_trip(header, subs, options)
