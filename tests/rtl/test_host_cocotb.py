"""HostRegisters as Verilog under cocotb, driven by cocotbext-axi's AxiLiteMaster (tests/rtl/host_cocotb.py):
the bus model a chip team's testbench would use agrees with the register table and the model of it. Icarus in
the default suite (the build takes a second); Verilator, whose build of this small block takes a minute or two
of C++, in the slow suite."""
from __future__ import annotations

from pathlib import Path

import pytest

from aipu.sim.cosim.verilog import HOST_TOPLEVEL, compile_verilog, host_verilog, quiet_runner
from aipu.sim.machine.arch import DEFAULT

REPO = Path(__file__).resolve().parents[2]
COCOTB_TESTS = 3


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
