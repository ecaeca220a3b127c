"""The POOL unit: max/average pooling (POOL) and the element-wise operations (ELTWISE) of one queue.

Both commands share the unit's ports and its back end (docs/rtl-pool.md; the cycles: ``aipu.sim.timing.pool``):

  CHECK   register the command's geometry (window extents, output size, region sizes)
  VERIFY  refuse, naming the field, everything the interpreter refuses; nothing is written before this
  RUN     one item per cycle, no stall: a window tap of a group of channels (POOL), a group of operand
          pairs (ELTWISE)
  FLUSH   the last partly filled output word is written; ``done``

The ELTWISE engine and the element plumbing both engines share (source reads, the output packer that
writes whole OUT words, type bounds) live in :mod:`aipu.rtl.eltwise`. Average pooling divides exactly by
multiplying with a reciprocal (:func:`reciprocal_table`, checked at elaboration to give the exact floor
quotient for every window count and every window sum), one multiplier per lane.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from aipu.rtl.arith import net
from aipu.rtl.eltwise import (ELEMENT, SOURCE_BUFFERS, EltwiseEngine, SourceReads, dtype_bounds, element_value,
                              is_wide, pack_output, region_beyond)
from aipu.rtl.ports import read_port, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import DTYPE_NUMPY, Buffer, HardwareConfig
from aipu.sim.machine.isa import COMMANDS, Opcode, PoolMode, Rounding, Unit
from aipu.sim.timing.pool import lanes, pool_lanes

MAX_WINDOW = COMMANDS[Opcode.POOL].field("k_h").legal_range(HardwareConfig())[1] * \
    COMMANDS[Opcode.POOL].field("k_w").legal_range(HardwareConfig())[1]
#: widest |x - zero point| of a pooled element: the span of the widest element type
MAX_CENTRED = max((1 << 8 * numpy_type.itemsize) - 1 for numpy_type in DTYPE_NUMPY.values())
WINDOW_SUM_BITS = (MAX_WINDOW * MAX_CENTRED).bit_length()           # |window sum| < 2**WINDOW_SUM_BITS
RECIPROCAL_SHIFT = WINDOW_SUM_BITS + (MAX_WINDOW - 1).bit_length()  # s = N + ceil(log2(largest divisor))
WINDOW_SUM = signed(WINDOW_SUM_BITS + 1)


def reciprocal_table() -> list[int]:
    """ceil(2**s / d) for every window count d (index 0 unused).

    floor(n * m / 2**s) == floor(n / d) for all 0 <= n < 2**N when 0 <= m * d - 2**s <= 2**(s - N): the
    product is n/d + n * (m*d - 2**s) / (d * 2**s) and that error is below 1/d, too little to reach the next
    integer (the remainder of n/d is at most (d-1)/d). With s = N + ceil(log2 225) the condition holds for
    every d (m*d - 2**s < d <= 2**(s-N)); it is asserted here, so a change of widths cannot break it silently.
    """
    table = [0]
    for divisor in range(1, MAX_WINDOW + 1):
        reciprocal = -(-(1 << RECIPROCAL_SHIFT) // divisor)
        assert 0 <= reciprocal * divisor - (1 << RECIPROCAL_SHIFT) <= 1 << (RECIPROCAL_SHIFT - WINDOW_SUM_BITS)
        table.append(reciprocal)
    return table


def round_up(rounding, above, tie, odd, negative):
    """Whether a floor quotient goes up by one in ``rounding`` (golden rounding._round_floor_quotient):
    ``above``/``tie`` compare the remainder with half the divisor, ``odd`` is the quotient's lowest bit,
    ``negative`` says the dividend is below zero."""
    when = {Rounding.FLOOR: Const(0), Rounding.HALF_UP: above | tie, Rounding.HALF_TO_EVEN: above | (tie & odd),
            Rounding.HALF_AWAY_FROM_ZERO: above | (tie & ~negative)}
    return Cat(*((rounding == mode) & condition for mode, condition in when.items())).any()


def rounded_average(m: Module, window_sum, product, divisor, rounding, lane: int):
    """round(window_sum / divisor) in ``rounding`` from ``product`` = |window_sum| * reciprocal[divisor]: the
    floor quotient and remainder of the signed division (Python's), then ``round_up`` on the remainder."""
    magnitude_quotient = net(m, product >> RECIPROCAL_SHIFT, f"magnitude_quotient{lane}")
    magnitude_remainder = net(m, Mux(window_sum < 0, -window_sum, window_sum) - magnitude_quotient * divisor,
                              f"magnitude_remainder{lane}")
    negative, exact = window_sum < 0, magnitude_remainder == 0
    quotient = net(m, Mux(negative, -magnitude_quotient - ~exact, magnitude_quotient), f"floor_quotient{lane}")
    remainder = net(m, Mux(negative & ~exact, divisor - magnitude_remainder, magnitude_remainder),
                    f"floor_remainder{lane}")
    twice = remainder * 2
    return quotient + round_up(rounding, twice > divisor, twice == divisor, quotient[0], negative)


def lane_element(dtype, run: list, lane: int):
    """Element ``lane`` of a run of elements of ``dtype`` (its bytes in ``run``, at least 2 * (lane + 1))."""
    wide = is_wide(dtype)
    return element_value(dtype, Mux(wide, run[2 * lane], run[lane]), run[2 * lane + 1])


def registered(m: Module, stage: str, **values) -> dict:
    """Each value registered every cycle, as a signal named ``<stage>_<name>``: one pipeline stage."""
    signals = {}
    for name, value in values.items():
        value = Value.cast(value)
        signals[name] = Signal(value.shape(), name=f"{stage}_{name}")
        m.d.sync += signals[name].eq(value)
    return signals


class PoolUnit(UnitComponent):
    """POOL and ELTWISE (docs/rtl-pool.md). Ports: per source buffer four read ports, two per stream
    (:class:`SourceReads`: POOL's taps and ELTWISE's operand a, ELTWISE's operand b), one OUT write."""

    UNIT = Unit.POOL

    def ports(self, config: HardwareConfig) -> dict:
        reads = {f"{buffer.name.lower()}_read{suffix}": Out(read_port(config, buffer))
                 for buffer in SOURCE_BUFFERS for suffixes in SourceReads.PORTS.values() for suffix in suffixes}
        return {**reads, "out_write": Out(write_port(config, Buffer.OUT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field) -> None:
        is_pool = self.view(word, Opcode.FINISH).opcode == Opcode.POOL
        pool, eltwise = self.view(word, Opcode.POOL), self.view(word, Opcode.ELTWISE)
        phase = {name: Signal(name=name) for name in ("check", "begin", "run", "flush")}
        width = lanes(self.config)      # >= pool_lanes: the packer's group holds either engine's results
        reads = SourceReads(m, self, Mux(is_pool, pool.src_buf, eltwise.a_buf), eltwise.b_buf,
                            max(width, 2 * pool_lanes(self.config)), width)
        engines = ((PoolEngine(self, m, pool, phase, reads, enabled=is_pool), is_pool),
                   (EltwiseEngine(self, m, eltwise, phase, reads, enabled=~is_pool), ~is_pool))
        valid, last, count = Signal(), Signal(), Signal(range(width + 1))
        values = [Signal(ELEMENT, name=f"result{lane}") for lane in range(width)]
        for engine, selected in engines:
            with m.If(selected):
                m.d.comb += [valid.eq(engine.out_valid), last.eq(engine.out_last), count.eq(engine.out_count),
                             *(value.eq(result) for value, result in zip(values, engine.out_values))]
        pack_output(m, self.config, self.out_write, phase["begin"], Mux(is_pool, pool.dst_addr, eltwise.dst_addr),
                    Mux(is_pool, is_wide(pool.dtype), is_wide(eltwise.out_type)), valid, values, count,
                    phase["flush"])

        refusals = [[(net(m, condition, f"refuse_{name}"), name) for condition, name in engine.faults]
                    for engine, _ in engines]
        with m.FSM(name="pool_engine"):
            with m.State("IDLE"):
                with m.If(start):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += phase["check"].eq(1)
                m.next = "VERIFY"
            with m.State("VERIFY"):
                for (engine, selected), refusals in zip(engines, refusals):  # the first, in the interpreter's order
                    with m.If(selected):
                        for index, (condition, name) in enumerate(refusals):
                            with (m.Elif if index else m.If)(condition):
                                m.d.comb += [fault.eq(1), fault_field.eq(self.error_index(name))]
                with m.If(fault):
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += phase["begin"].eq(1)
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += phase["run"].eq(1)
                with m.If(valid & last):
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += [phase["flush"].eq(1), done.eq(1)]
                m.next = "IDLE"


class PoolEngine:
    """POOL: one window tap of a group of ``pool_lanes`` channels per cycle, in output order
    [out_h][out_w][channel groups] and, within a window, the taps row by row. Each lane keeps its channel's
    running maximum or sum; the group's results reach the packer together, the last group holding the rest."""

    def __init__(self, unit: PoolUnit, m: Module, command, phase: dict, reads: SourceReads, enabled):
        self.unit, self.m, self.command, self.phase, self.enabled = unit, m, command, phase, enabled
        self.width = pool_lanes(unit.config)
        self.out_valid, self.out_last, self.out_count = Signal(), Signal(), Signal(range(self.width + 1))
        self.out_values = [Signal(ELEMENT, name=f"pool_out{lane}") for lane in range(self.width)]
        self.faults: list[tuple] = []     # (condition, field name) in the interpreter's order
        self._geometry()
        tap = self._issue(reads)
        window = self._fold(tap, reads)
        self._divide(window)

    def _geometry(self) -> None:
        """CHECK registers the window extents, output size and region sizes; VERIFY's fault conditions."""
        m, c, config = self.m, self.command, self.unit.config
        self.element_bytes = 1 + is_wide(c.dtype)
        checked = {    # dilation * (k - 1) + 1, the padded input and the source bytes, in CHECK
            "span_h": c.dilation_h * (c.k_h - 1) + 1, "span_w": c.dilation_w * (c.k_w - 1) + 1,
            "padded_h": c.in_h + c.pad_top + c.pad_bottom, "padded_w": c.in_w + c.pad_left + c.pad_right,
            "in_bytes": c.in_h * c.in_w * c.channels * self.element_bytes}
        for name, expression in checked.items():
            checked[name] = Signal(Value.cast(expression).shape(), name=name)
            with m.If(self.phase["check"]):
                m.d.sync += checked[name].eq(expression)
        span_h, span_w, padded_h, padded_w, in_bytes = checked.values()
        self.span_h, self.span_w = span_h, span_w
        # out_h/out_w follow from the registered spans one cycle later (VERIFY uses them only if the window fits)
        self.out_h = net(m, ((padded_h - span_h) // c.stride_h + 1)[:len(padded_h)], "out_h")
        self.out_w = net(m, ((padded_w - span_w) // c.stride_w + 1)[:len(padded_w)], "out_w")
        out_bytes = self.out_h * self.out_w * c.channels * self.element_bytes
        zero_low, zero_high = dtype_bounds(c.dtype)
        is_max = c.mode == PoolMode.MAX
        self.faults += [
            (region_beyond(config, c.src_buf, c.src_addr, in_bytes), "src_addr"),
            (is_max & (c.count_include_pad != 0), "count_include_pad"),
            (is_max & (c.zero_point != 0), "zero_point"),
            (~is_max & (c.dilation_h != 1), "dilation_h"),
            (~is_max & (c.dilation_w != 1), "dilation_w"),
            (~is_max & ((c.zero_point < zero_low) | (c.zero_point > zero_high)), "zero_point"),
            *(((getattr(c, name) >= span), name) for name, span in
              (("pad_top", span_h), ("pad_left", span_w), ("pad_bottom", span_h), ("pad_right", span_w))),
            (span_h > padded_h, "k_h"),
            (span_w > padded_w, "k_w"),
            (out_bytes + c.dst_addr > config.buffer(Buffer.OUT).bytes, "dst_addr"),
        ]

    def _issue(self, reads: SourceReads) -> dict:
        """The item counters (oy, ox, ``group_start``: the group's first channel, ky, kx) and the read of the
        group's run of bytes at the tap; returns the item's control as it enters the fold stage (registered)."""
        m, c, width = self.m, self.command, self.width
        begin, run = self.phase["begin"], self.phase["run"] & self.enabled
        oy, ox, group_start = Signal.like(self.out_h), Signal.like(self.out_w), Signal.like(c.channels)
        ky, kx = Signal.like(c.k_h), Signal.like(c.k_w)
        # first window row/column of (oy, ox): from -pad up to below in_h / in_w
        top, left = Signal(signed(len(c.in_h) + 2)), Signal(signed(len(c.in_w) + 2))
        row_step, column_step = Signal.like(self.span_h), Signal.like(self.span_w)   # ky * dilation_h, ...
        finished = Signal()
        row, column = net(m, top + row_step, "tap_row"), net(m, left + column_step, "tap_column")
        inside = (row >= 0) & (row < c.in_h) & (column >= 0) & (column < c.in_w)
        last_tap_column, last_tap_row = kx == c.k_w - 1, ky == c.k_h - 1
        remaining = net(m, c.channels - group_start, "group_remaining")     # channels from the group on
        last_group = remaining <= width
        last_column, last_row = ox == self.out_w - 1, oy == self.out_h - 1
        window_done = last_tap_row & last_tap_column
        all_done = window_done & last_group & last_column & last_row
        issuing = run & ~finished
        pixel = net(m, row * c.in_w + column, "tap_pixel")
        with m.If(self.enabled):
            m.d.comb += [reads.a_address.eq(c.src_addr + (pixel * c.channels + group_start) * self.element_bytes),
                         reads.a_enable.eq(issuing & inside),
                         reads.a_used.eq(Mux(last_group, remaining, width) * self.element_bytes)]

        with m.If(begin):
            m.d.sync += [oy.eq(0), ox.eq(0), group_start.eq(0), ky.eq(0), kx.eq(0), row_step.eq(0),
                         column_step.eq(0), top.eq(-c.pad_top), left.eq(-c.pad_left), finished.eq(0)]
        with m.Elif(issuing):
            m.d.sync += [kx.eq(kx + 1), column_step.eq(column_step + c.dilation_w)]
            with m.If(last_tap_column):
                m.d.sync += [kx.eq(0), column_step.eq(0), ky.eq(ky + 1), row_step.eq(row_step + c.dilation_h)]
                with m.If(last_tap_row):
                    m.d.sync += [ky.eq(0), row_step.eq(0), group_start.eq(group_start + width)]
                    with m.If(last_group):
                        m.d.sync += [group_start.eq(0), ox.eq(ox + 1), left.eq(left + c.stride_w)]
                        with m.If(last_column):
                            m.d.sync += [ox.eq(0), left.eq(-c.pad_left), oy.eq(oy + 1),
                                         top.eq(top + c.stride_h)]
            with m.If(all_done):
                m.d.sync += finished.eq(1)
        return registered(m, "tap", valid=issuing, inside=inside, first=(ky == 0) & (kx == 0), last=window_done,
                          all=all_done, count=Mux(last_group, remaining, width)[:len(self.out_count)])

    def _fold(self, tap: dict, reads: SourceReads) -> dict:
        """Each lane folds its channel's element into the window (MAX: the larger value; AVG: the sum of
        ``x - zero_point``), the taps inside are counted; returns the window's results (registered) when its
        last tap is folded, with AVG's divisor."""
        m, c = self.m, self.command
        dtype_low, _ = dtype_bounds(c.dtype)
        count = Signal(range(MAX_WINDOW + 1))
        count_next = Mux(tap["first"], 0, count) + tap["inside"]
        window = {"valid": tap["valid"] & tap["last"], "last": tap["all"], "count": tap["count"],
                  "divisor": Mux(c.count_include_pad, c.k_h * c.k_w, count_next)}
        with m.If(tap["valid"]):
            m.d.sync += count.eq(count_next)
        for lane in range(self.width):
            element = net(m, lane_element(c.dtype, reads.a_bytes, lane), f"tap_element{lane}")
            best, total = Signal(ELEMENT, name=f"best{lane}"), Signal(WINDOW_SUM, name=f"total{lane}")
            best_in = Mux(tap["first"], dtype_low, best)
            best_next = net(m, Mux(tap["inside"] & (element > best_in), element, best_in), f"best_next{lane}")
            total_next = net(m, Mux(tap["first"], 0, total) + Mux(tap["inside"], element - c.zero_point, 0),
                             f"total_next{lane}")
            with m.If(tap["valid"]):
                m.d.sync += [best.eq(best_next), total.eq(total_next)]
            window |= {f"max{lane}": best_next, f"sum{lane}": total_next[:len(total)].as_signed()}
        return registered(m, "window", **window)

    def _divide(self, window: dict) -> None:
        """AVG: each lane multiplies |sum| by the divisor's reciprocal (registered), then takes the exact floor
        quotient and rounds it; the group's results go to the packer."""
        m, c = self.m, self.command
        m.submodules.reciprocals = reciprocals = Memory(shape=unsigned(RECIPROCAL_SHIFT + 1), depth=MAX_WINDOW + 1,
                                                        init=reciprocal_table())
        reciprocal = reciprocals.read_port(domain="comb")
        m.d.comb += reciprocal.addr.eq(window["divisor"])
        held = {"valid": window["valid"], "last": window["last"], "count": window["count"],
                "divisor": window["divisor"]}
        for lane in range(self.width):
            window_sum = window[f"sum{lane}"]
            magnitude = Mux(window_sum < 0, -window_sum, window_sum)[:WINDOW_SUM_BITS]
            held |= {f"max{lane}": window[f"max{lane}"], f"sum{lane}": window_sum,
                     f"product{lane}": magnitude * reciprocal.data}
        held = registered(m, "quotient", **held)
        is_max = c.mode == PoolMode.MAX
        m.d.comb += [self.out_valid.eq(held["valid"] & self.enabled), self.out_last.eq(held["last"]),
                     self.out_count.eq(held["count"])]
        for lane, out in enumerate(self.out_values):
            average = rounded_average(m, held[f"sum{lane}"], held[f"product{lane}"], held["divisor"], c.rounding,
                                      lane)
            m.d.comb += out.eq(Mux(is_max, held[f"max{lane}"], average + c.zero_point))
