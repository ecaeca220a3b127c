"""HostRegisters as Verilog: Verilator's lint finds nothing but what Amaranth's output always has, and under
cocotb, driven by cocotbext-axi's AxiLiteMaster (tests/rtl/host_cocotb.py), the bus model a chip team's
testbench would use agrees with the register table and the model of it. Icarus in the default suite (the build
takes a second); Verilator, whose build of this small block takes a minute or two of C++, in the slow suite."""
from __future__ import annotations

from pathlib import Path

import pytest

from aipu.sim.cosim.verilog import HOST_TOPLEVEL, compile_verilog, host_verilog, quiet_runner
from aipu.sim.machine.arch import DEFAULT
from tests.rtl.configs import WIDE_DRAM
from tests.rtl.lint import assert_lint_clean

REPO = Path(__file__).resolve().parents[2]
COCOTB_TESTS = 3
# Verilator -Wall warnings every Amaranth design has, none a defect: registers declared with their reset value and
# assigned in processes (PROCASSINIT), Yosys's constants narrower than the value they are compared with
# (WIDTHEXPAND), the names Amaranth keeps for intermediate values and for the ports' aliases (UNUSEDSIGNAL; AWPROT
# and ARPROT are unused by design), and the port `abort`, a C++ word Verilator renames in its model (SYMRSVDWORD).
ACCEPTED_LINT = ("PROCASSINIT", "WIDTHEXPAND", "UNUSEDSIGNAL", "SYMRSVDWORD")


@pytest.mark.parametrize("config", [DEFAULT, WIDE_DRAM], ids=["default", "wide-dram"])
def test_verilator_lint_finds_nothing_else(config, tmp_path):
    source = tmp_path / f"{HOST_TOPLEVEL}.v"
    source.write_text(host_verilog(config))
    assert_lint_clean(source, HOST_TOPLEVEL, ACCEPTED_LINT)


@pytest.mark.parametrize("simulator", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_cocotbext_axi_master_agrees_with_the_table(simulator, tmp_path):
    from cocotb_tools.runner import get_results

    compile_verilog(tmp_path, HOST_TOPLEVEL, host_verilog(DEFAULT), simulator, build_args=("-Wno-fatal",))
    results = tmp_path / "results.xml"
    quiet_runner(simulator).test(test_module="tests.rtl.host_cocotb", hdl_toplevel=HOST_TOPLEVEL,
                                 hdl_toplevel_lang="verilog", build_dir=tmp_path, test_dir=tmp_path,
                                 results_xml=str(results), log_file=tmp_path / "simulation.log",
                                 extra_env={"PYTHONPATH": str(REPO), "COCOTB_LOG_LEVEL": "WARNING",
                                            # cocotbext-axi 0.1.28 uses Event.data and Task.kill, deprecated in cocotb 2
                                            "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    tests, failed = get_results(results)
    log = (tmp_path / "simulation.log").read_text(errors="replace")
    assert (tests, failed) == (COCOTB_TESTS, 0), log[-4000:]
