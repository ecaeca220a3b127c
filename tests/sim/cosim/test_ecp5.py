"""`aipu rtl pnr`'s ECP5 flow (sim/cosim/ecp5.py) end to end on a toy design: Yosys synth_ecp5, nextpnr-ecp5 on
the smallest device, its figures present and sane; the pin chains; the verb's argument errors."""
from __future__ import annotations

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from aipu.app.cli import main
from aipu.sim.cosim.ecp5 import PinChains, clock_fmax, port_bits, pnr_report, utilization


class MacToy(wiring.Component):
    """A multiply-accumulate into a 512 x 32 memory: one multiplier, one block RAM, a carry chain."""

    def __init__(self):
        super().__init__({"a": In(16), "b": In(16), "addr": In(9), "we": In(1), "acc": Out(32), "q": Out(32)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = memory = Memory(shape=32, depth=512, init=[])
        write, read = memory.write_port(), memory.read_port()
        m.d.sync += self.acc.eq(self.acc + self.a * self.b)
        m.d.comb += [write.addr.eq(self.addr), write.data.eq(self.acc), write.en.eq(self.we),
                     read.addr.eq(self.addr), self.q.eq(read.data)]
        return m


class Echo(wiring.Component):
    """Its output is its input, registered."""

    def __init__(self):
        super().__init__({"x": In(3), "y": Out(3)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.x)
        return m


@pytest.mark.parametrize("mapper", ["abc9", "abc"])
def test_the_toy_is_placed_and_routed_with_its_figures(mapper):
    toy = MacToy()
    result = pnr_report(toy, device="25k", freq_mhz=50, mapper=mapper)
    assert result["mapper"] == mapper
    assert result["device"] == "LFE5U-25F" and result["chain_flip_flops"] == port_bits(toy) == 16 + 16 + 9 + 1 + 64
    synthesis = result["synthesis"]
    assert synthesis["block_rams"] == 1 and synthesis["dsps"] == 1
    assert synthesis["flip_flops"] >= 32 + result["chain_flip_flops"] and synthesis["luts"] > 0
    fmax = result["fmax"]
    assert 10 < fmax["mhz"] < 1000 and fmax["target_mhz"] == 50 and "clk" in fmax["clock"]
    used = result["utilization"]
    assert used["block_rams"] == {"used": 1, "available": 56} and used["dsps"]["used"] == 1
    assert used["flip_flops"]["used"] == synthesis["flip_flops"]
    assert 0 < used["luts"]["used"] < used["luts"]["available"]
    assert used["io"]["used"] == 5           # clk, rst, si, shift, so
    assert set(result["seconds"]) == {"rtlil", "synth_ecp5", "nextpnr"}
    assert all(seconds >= 0 for seconds in result["seconds"].values())


def test_synthesis_only_has_no_placement_figures():
    result = pnr_report(Echo(), device="25k", place=False)
    assert "fmax" not in result and "nextpnr" not in result["seconds"]
    assert result["synthesis"]["flip_flops"] == 3 + 3 + 3      # the design's and both chains'


def test_the_pin_chains_shift_inputs_in_and_outputs_out():
    top = PinChains(Echo())
    seen = []

    async def bench(ctx):
        for bit in (1, 0, 1):          # x := 0b101 after three shifts (first bit in ends highest)
            ctx.set(top.shift, 1)
            ctx.set(top.si, bit)
            await ctx.tick()
        ctx.set(top.shift, 0)
        await ctx.tick()               # y := x
        await ctx.tick()               # the output chain captures y
        ctx.set(top.shift, 1)
        ctx.set(top.si, 0)
        for _ in range(3):
            seen.append(ctx.get(top.so))
            await ctx.tick()

    simulator = Simulator(top)
    simulator.add_clock(1e-6)
    simulator.add_testbench(bench)
    simulator.run()
    assert seen == [1, 0, 1]


def test_report_readers_take_nextpnr_s_fields():
    report = {"fmax": {"$glbnet$clk": {"achieved": 123.456, "constraint": 100.0}},
              "utilization": {"TRELLIS_COMB": {"used": 10, "available": 100}, "DP16KD": {"used": 2, "available": 56}}}
    assert clock_fmax(report) == {"clock": "$glbnet$clk", "mhz": 123.46, "target_mhz": 100.0}
    used = utilization(report)
    assert used["luts"] == {"used": 10, "available": 100} and used["dsps"] == {"used": 0, "available": 0}
    with pytest.raises(RuntimeError, match="one clock"):
        clock_fmax({"fmax": {}})


@pytest.mark.parametrize("arguments, message", [
    (["--unit", "dram"], "--unit 'dram': expected one of npu, "),
    (["--device", "12k"], "--device '12k': expected one of 25k, 45k, 85k"),
    (["--freq", "fast"], "--freq fast: expected a target in MHz"),
    (["--freq", "0"], "--freq 0: expected a target in MHz"),
])
def test_bad_arguments_are_one_line_and_status_2(arguments, message, capsys):
    assert main(["rtl", "pnr", *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
