"""`aipu rtl synth`'s Yosys flow (sim/cosim/synth.py) on toy designs: gates, flip-flops, the longest path and
memories kept as memories, their ports counted after synthesis and in the Amaranth design."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.sim.cosim.synth import longest_path, memory_ports, over_two_ports, report, unit_report, yosys_memories
from tests.rtl.configs import SMALL
from tests.sim.cosim.toy_units import CopyWordLoad


class ThreePorts(wiring.Component):
    """A memory of 48 x 16 bits with one write port and two read ports (three: one too many), and a 1R1W one."""

    def __init__(self):
        super().__init__({"addr": In(6).array(3), "data": In(16), "en": In(1), "out": Out(16).array(3)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.crowded = crowded = Memory(shape=16, depth=48, init=[])
        m.submodules.plain = plain = Memory(shape=16, depth=32, init=[])
        for memory in (crowded, plain):
            write = memory.write_port()
            m.d.comb += [write.addr.eq(self.addr[0]), write.data.eq(self.data), write.en.eq(self.en)]
        for addr, out, memory in ((self.addr[1], self.out[0], crowded), (self.addr[2], self.out[1], crowded),
                                  (self.addr[1], self.out[2], plain)):
            read = memory.read_port()
            m.d.comb += [read.addr.eq(addr), out.eq(read.data)]
        return m

LTP_OUTPUT = """7. Executing LTP pass (find longest path).

Longest topological path in aipu_pool (length=3):
    0: \\padded_w [1]
    1: $abc$1$new_n187 (via $abc$1$blif$39)
    2: $abc$1$new_n189 (via $abc$1$blif$41)
    3: $procmux$500_Y[2] (via $abc$1$blif$42)
   ff: \\error_field [2] (via $auto$ff.cc:337:slice$11170)
"""


def test_longest_path_reads_the_length_and_both_ends():
    assert longest_path(LTP_OUTPUT) == {"gates": 3, "from": "padded_w[1]", "to": "error_field[2]"}


def test_a_toy_unit_synthesizes_to_gates_flip_flops_and_a_path():
    report = unit_report(CopyWordLoad, SMALL)
    assert report["flip_flop_bits"] > 0 and report["gates"] > 0
    assert report["cells"] == report["gates"] + report["flip_flop_bits"] == sum(report["cells_by_type"].values())
    assert report["longest_path"]["gates"] > 0 and report["longest_path"]["to"]


def test_memories_stay_memories_and_a_third_port_is_named():
    figures = report(ThreePorts(), "three_ports")
    assert figures["memories"] == [
        {"name": "crowded", "depth": 48, "width": 16, "bits": 768, "read_ports": 2, "write_ports": 1, "ports": 3},
        {"name": "plain", "depth": 32, "width": 16, "bits": 512, "read_ports": 1, "write_ports": 1, "ports": 2}]
    assert figures["memory_bits"] == 1280 and figures["memories_over_two_ports"] == ["crowded"]
    assert figures["flip_flop_bits"] < 100          # not 48 x 16 + 32 x 16 bits of flip-flops
    assert memory_ports(ThreePorts()) == figures["memories"]


def test_a_read_and_a_write_port_on_one_address_count_as_one_port():
    # parameters as write_json gives them (binary), addresses as bit numbers: a 4 x 8-bit memory
    def cell(read_addresses, write_addresses):
        return {"parameters": {"ABITS": "10", "RD_PORTS": f"{len(read_addresses):b}", "MEMID": "\\m",
                               "WR_PORTS": f"{len(write_addresses):b}", "SIZE": "100", "WIDTH": "1000"},
                "connections": {"RD_ADDR": sum(read_addresses, []), "WR_ADDR": sum(write_addresses, [])}}

    two_rw = yosys_memories({"m": cell([[1, 2], [3, 4]], [[1, 2], [3, 4]])})
    assert two_rw[0]["ports"] == 2 and two_rw[0]["bits"] == 4 * 8
    assert over_two_ports(yosys_memories({"m": cell([[1, 2], [3, 4]], [[5, 6]])})) == ["m"]


def test_an_unknown_unit_names_the_npu_top_and_the_system(capsys):
    from aipu.app.cli import main

    assert main(["rtl", "synth", "--unit", "top"]) == 2
    error = capsys.readouterr().err
    assert "--unit top: expected one of load, " in error and ", npu, system" in error
