"""The unrolled mapping of a conv with few input channels (im2col by LOAD; docs/compiler.md §4, "Unrolled").

The MAC array reduces ``mac.rows`` input channels of one kernel tap per cycle, so a conv over C < rows input
channels leaves most rows idle for each of its k_h * k_w taps (ResNet's 7x7 stem: 3 of 16). Unrolled, the
kernel window becomes the channel axis: LOAD gathers every output pixel's window as one [k_h][k_w][C] vector,
and the layer runs as a 1x1 conv over k_h * k_w * C channels (147 for the stem) whose weights are the same
OHWI bytes. An ACT tile is [rows][out_w][k_h * k_w * C]; per output row, one LOAD copies the windows that lie
inside the image in width (y: output column, x: kernel row, run: k_w * C contiguous bytes, the kernel rows
outside the image padded on the x axis) and one LOAD per edge column copies a window that crosses the left or
right edge (y: kernel row, x: kernel column, run: C, padded on both axes). Needs groups = 1 and horizontal
dilation 1 (a run is a whole kernel row); any stride and vertical dilation.
"""
from __future__ import annotations

from dataclasses import dataclass

from aipu.compiler.lowering.conv_layer import DIM_MAX, ConvLayer, output_size
from aipu.sim.timing.dma import walk_words


@dataclass(frozen=True)
class Span:
    """The taps of one kernel axis at one output position: ``before`` padding, ``real`` in the image from input
    index ``first`` on, ``after`` padding."""

    before: int
    real: int
    after: int
    first: int


@dataclass(frozen=True)
class UnrolledWindow:
    """A conv layer's geometry as the unrolled mapping reads it: the input (H, W, C), the kernel, stride,
    vertical dilation, top and left padding and the output size."""

    height: int
    width: int
    channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation_h: int
    pad_top: int
    pad_left: int
    out_h: int
    out_w: int

    @classmethod
    def of(cls, layer: ConvLayer) -> UnrolledWindow | None:
        """The layer's window, or None where the mapping does not apply (an INT4 input, whose windows LOAD
        would have to cut within bytes; grouped, dilated in width, a 1x1 kernel, too many unrolled channels, or
        an output row whose kernel rows all fall into padding)."""
        _, c, h, w = layer.x.shape
        _, _, kh, kw = layer.w.shape
        if layer.x_int4 or layer.groups != 1 or layer.dilation[1] != 1 or kh * kw == 1 or kh * kw * c > DIM_MAX:
            return None
        window = cls(h, w, c, (kh, kw), layer.stride, layer.dilation[0], layer.padding[0], layer.padding[1],
                     *output_size(layer))
        return window if all(window.rows_of(oy).real for oy in range(window.out_h)) else None

    @property
    def depth(self) -> int:
        """Channels of the unrolled 1x1 conv: one output pixel's window."""
        return self.kernel[0] * self.kernel[1] * self.channels

    def rows_of(self, oy: int) -> Span:
        """The kernel rows of output row ``oy``."""
        kh, step = self.kernel[0], self.dilation_h
        top = oy * self.stride[0] - self.pad_top
        before = min(kh, max(0, -(-(-top) // step)))
        end = min(kh, max(0, -(-(self.height - top) // step)))
        real = max(0, end - before)
        return Span(before, real, kh - before - real, top + before * step)

    def columns_of(self, ox: int) -> Span:
        """The kernel columns of output column ``ox`` (dilation 1: always one at least)."""
        kw = self.kernel[1]
        left = ox * self.stride[1] - self.pad_left
        before, after = max(0, -left), max(0, left + kw - self.width)
        return Span(before, kw - before - after, after, left + before)

    @property
    def inner_columns(self) -> range:
        """The output columns whose window lies inside the image in width."""
        sw, kw = self.stride[1], self.kernel[1]
        first = -(-self.pad_left // sw)
        end = min(self.out_w, (self.width - kw + self.pad_left) // sw + 1)
        return range(first, max(first, end))

    @property
    def edge_columns(self) -> list[int]:
        inner = self.inner_columns
        return [ox for ox in range(self.out_w) if ox not in inner]

    def loads_per_row(self) -> int:
        return int(bool(self.inner_columns)) + len(self.edge_columns)

    def row_loads(self, oy: int, row_bytes: int) -> list[tuple[int, dict]]:
        """Output row ``oy``'s LOADs as (byte offset in the row's [out_w][depth] tile, fields with ``dram_addr``
        relative to the input's start); ``row_bytes``: bytes between input rows in DRAM."""
        rows, c, kw = self.rows_of(oy), self.channels, self.kernel[1]
        kernel_rows = dict(dram_y_stride=self.dilation_h * row_bytes, pad_top=rows.before, pad_bottom=rows.after)
        loads = []
        inner = self.inner_columns
        if inner:
            loads.append((inner.start * self.depth, dict(
                dram_addr=rows.first * row_bytes + (inner.start * self.stride[1] - self.pad_left) * c,
                y_size=len(inner), x_size=rows.real, run=kw * c, dram_y_stride=self.stride[1] * c,
                dram_x_stride=self.dilation_h * row_bytes, pad_top=0, pad_bottom=0, pad_left=rows.before,
                pad_right=rows.after)))
        for ox in self.edge_columns:
            columns = self.columns_of(ox)
            loads.append((ox * self.depth, dict(
                dram_addr=rows.first * row_bytes + columns.first * c, y_size=rows.real, x_size=columns.real, run=c,
                dram_x_stride=c, pad_left=columns.before, pad_right=columns.after, **kernel_rows)))
        return loads

    def input_words(self, word: int) -> int:
        """DRAM words the DMA walks for every output row's LOADs once (the input placed word-aligned)."""
        return sum(_walked_words(fields, word) for oy in range(self.out_h)
                   for _, fields in self.row_loads(oy, self.width * self.channels))


def _walked_words(load: dict, word: int) -> int:
    """DRAM words the DMA walks for one LOAD (``dram_addr`` taken modulo the word): a slot per word of each
    run; a row's runs walked as one where they touch, whole rows too where no padding lies between them
    (``dma.run_shape``); no other runs merge."""
    rows, runs, run = load["y_size"], load["x_size"], load["run"]
    x_stride, y_stride, start = load["dram_x_stride"], load["dram_y_stride"], load["dram_addr"]
    if runs == 1 or x_stride == run:
        runs, run, x_stride = 1, runs * run, 0
        if rows == 1 or (y_stride == run and not (load["pad_left"] or load["pad_right"])):
            return walk_words(word, 1, rows * run, 0, start % word)
    if rows >= runs and y_stride != run:        # walk_words merges only runs a stride of one run apart
        return sum(walk_words(word, rows, run, y_stride, (start + x * x_stride) % word) for x in range(runs))
    return sum(walk_words(word, runs, run, x_stride, (start + y * y_stride) % word) for y in range(rows))
