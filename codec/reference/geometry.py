"""Where the CTUs and CUs of a sublayer lie, and the shapes of the coding trees (10.5.4, 10.5.6, Table 319).

Both directions and both paths take their geometry from here: the reference syntax walks it, and the
compiled sublayer decoder receives the CTU list and the CU grids computed by ``ctu_geometries``. Every
halving loop tests ``> 1``, so it ends after at most bit_length(extent) steps whatever it is given.
"""
from __future__ import annotations

from .headers import SCAN_KC, StreamHeader, Sublayer

MIN_CU3D_SIZE = 8            # 10.1
CTU_SIZES = (64, 32, 16, 8)  # maxCtu3dWidth3d by max_ctu3d_idx, 10.3.3


def get_bitdepth(w: int) -> int:
    """Table 320 with A2: the number of significant bits of w (1 for w = 0)."""
    return max(1, int(w).bit_length())


def ctu_size_from_idx(max_ctu3d_idx: int) -> int:
    """maxCtu3dWidth3d = maxCtu3dHeight3d per 10.3.3."""
    return CTU_SIZES[max_ctu3d_idx]


def tree_shapes(zdepth: int, height: int, width: int, planar: bool) -> list[tuple[int, int, int]]:
    """Level shapes of create_tree3d (Table 319), root first: halve (ceil) until 1 (planar: z kept).

    The extents are >= 1 (code_layer_header refuses 0); the loop tests ``> 1`` so that it ends after at most
    bit_length(max extent) halvings whatever it is given.
    """
    shapes = [(zdepth, height, width)]
    cd = 1 if planar else zdepth
    while height > 1 or width > 1 or cd > 1:
        height, width, cd = (height + 1) >> 1, (width + 1) >> 1, (cd + 1) >> 1
        shapes.append((zdepth if planar else cd, height, width))
    return shapes[::-1]


class CtuGeometry:
    """CTU3D and CU3D geometry of 10.5.6 (create_tensor3d) and the CU rectangles of §7.6 (A14)."""

    def __init__(self, y_off: int, x_off: int, height: int, width: int, min_h: int, min_w: int, index: int):
        self.y_off, self.x_off, self.height, self.width = y_off, x_off, height, width
        self.min_h, self.min_w, self.index = min_h, min_w, index
        grid_h, grid_w = -(-height // min_h), -(-width // min_w)
        grids = [(grid_h, grid_w)]
        while grid_h > 1 or grid_w > 1:       # ends after bit_length(max grid) halvings, as tree_shapes
            grid_h, grid_w = (grid_h + 1) >> 1, (grid_w + 1) >> 1
            grids.append((grid_h, grid_w))
        self.grids = grids[::-1]          # grids[d]: CU grid at depth d (d = 0 is the whole CTU)
        self.depth = len(self.grids)      # Ctu3dDepth

    def cu_rect(self, depth: int, y_idx: int, x_idx: int) -> tuple[int, int, int, int]:
        """(y offset, x offset, height, width) of a CU, relative to the CTU."""
        cu_h = self.min_h << (self.depth - 1 - depth)
        cu_w = self.min_w << (self.depth - 1 - depth)
        y0, x0 = y_idx * cu_h, x_idx * cu_w
        return y0, x0, min(cu_h, self.height - y0), min(cu_w, self.width - x0)


def max_ctu_dims(header: StreamHeader, sub: Sublayer) -> tuple[int, int]:
    """MaxCtu3dHeight/Width of 10.5.4."""
    size = ctu_size_from_idx(header.max_ctu3d_idx)
    if not header.enable_max_ctu3d_size:
        return size, size
    if sub.dim == 4 and sub.shape[2] == 1:
        return 1 << (get_bitdepth(size * size // sub.zdepth) - 1), 1
    if sub.dim == 4 and sub.shape[3] == 1:
        return 1, 1 << (get_bitdepth(size * size // sub.zdepth) - 1)
    return 1 << (get_bitdepth(size // sub.shape[1]) - 1), 1 << (get_bitdepth(size // sub.shape[0]) - 1)


def ctu_geometries(header: StreamHeader, sub: Sublayer) -> list[CtuGeometry]:
    """CTUs of a sublayer in scan order (Table 322) with their CU geometry (10.5.6; A25 clamps min CU to 1)."""
    max_h, max_w = max_ctu_dims(header, sub)
    ctu_depth = get_bitdepth(max(max_h, max_w) // MIN_CU3D_SIZE)
    min_h = max(1, max_h >> (ctu_depth - 1))
    min_w = max(1, max_w >> (ctu_depth - 1))
    channels, kernels = sub.shape[2], sub.shape[3]
    origins = [(c, k) for c in range(0, channels, max_h) for k in range(0, kernels, max_w)]
    if sub.scan_order == SCAN_KC:
        origins = [(c, k) for k in range(0, kernels, max_w) for c in range(0, channels, max_h)]
    return [CtuGeometry(c, k, min(max_h, channels - c), min(max_w, kernels - k), min_h, min_w, i)
            for i, (c, k) in enumerate(origins)]
