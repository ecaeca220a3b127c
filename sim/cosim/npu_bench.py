"""The NPU with the testbench DRAM on its master port, as one Verilog top (``aipu_npu_bench``) a cocotb test
drives through the host's AXI4-Lite port. Its own module: the build cache keys on its source, not on the
runner's (:mod:`aipu.sim.cosim.npu_verilog`), so an edit to the runner rebuilds nothing."""
from __future__ import annotations

from amaranth.hdl import ClockSignal, Module
from amaranth.hdl._ir import PortDirection
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from aipu.rtl.axi import AxiLiteSignature
from aipu.rtl.npu import Npu
from aipu.sim.cosim.dram.model import DramParams
from aipu.sim.cosim.dram.rtl import AxiDram
from aipu.sim.cosim.verilog import flat_ports
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.timing.dram_bridge import testbench_latency

BENCH_TOPLEVEL = "aipu_npu_bench"


def npu_dram_params(config: HardwareConfig, size: int) -> DramParams:
    """The testbench DRAM under the NPU: its read latency plus the bridge's is ``dram.latency_cycles``; a write
    is answered after as many cycles."""
    latency = testbench_latency(config)
    beat = config.dram.bytes_per_cycle
    return DramParams(size=-(-size // beat) * beat, data_bytes=beat, read_latency=latency, write_latency=latency)


class NpuBench(wiring.Component):
    """The NPU and the testbench DRAM on its master port; ``s_axil`` and ``irq`` are the host's."""

    def __init__(self, config: HardwareConfig, *, dram_bytes: int, trace_depth: int):
        self.npu = Npu(config, trace_depth=trace_depth)
        self.dram = AxiDram(npu_dram_params(config, dram_bytes), config.dram.address_bits,
                              self.npu.bridge.id_bits)
        super().__init__({"s_axil": In(AxiLiteSignature(len(self.npu.s_axil.awaddr), len(self.npu.s_axil.wdata))),
                          "irq": Out(1), "protocol_error": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.npu, m.submodules.dram = self.npu, self.dram
        connect(m, flipped(self.s_axil), self.npu.s_axil)
        connect(m, self.npu.m_axi, self.dram.bus)
        m.d.comb += [self.irq.eq(self.npu.irq), self.protocol_error.eq(self.dram.protocol_error)]
        return m


def bench_ports(bench: NpuBench) -> dict:
    """The bench's ports as ``convert`` takes them, single-underscore names, ``clk`` and no reset."""
    return flat_ports(bench, "_") | {"clk": (ClockSignal("sync"), PortDirection.Input)}


def verilator_control(bench: NpuBench) -> str:
    """Public: the ports (inputs writable), and read-only the memories the testbench reads back (in the NPU and
    the DRAM). Nothing else: a public writable signal is one Verilator must re-evaluate after every VPI call
    (:func:`aipu.sim.cosim.verilog.verilator_control`)."""
    lines = ["`verilator_config"]
    for name, (_, direction) in bench_ports(bench).items():
        access = "rw" if direction is PortDirection.Input else "rd"
        lines.append(f'public_flat_{access} -module "{BENCH_TOPLEVEL}" -var "{name}"')
    lines += [f'public_flat_rd -module "*" -var "{pattern}"' for pattern in ("buffer_*", "cycle_log_*", "dram_words")]
    return "\n".join(lines) + "\n"
