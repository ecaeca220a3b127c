"""`aipu rtl verify`: a Verilog module in a unit's place, checked against the interpreter and the cycle model.

The module under test is the project's own POOL unit exported to Verilog for SMALL (it must pass), and copies
of that text edited as a user's bugs would be: a datapath operator flipped (must fail, naming the element), a
port renamed or narrowed, a syntax error (one-line errors, exit status 2); and a wrapper around it that takes
each command a cycle late (bit-exact, slower: only --values-only passes it). Each distinct text is one Verilator
build of the System (about 100 s cold, cached by content)."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from aipu.app.cli import main
from aipu.rtl.conv import ConvUnit
from aipu.rtl.pool import PoolUnit
from aipu.sim.cosim.foreign import expected_ports
from aipu.sim.cosim.verilog import unit_verilog
from aipu.sim.machine.arch import DEFAULT
from tests.rtl.configs import SMALL
from tests.sandbox import assert_one_line_error

COMMANDS = "50"
SEED = "0"     # its POOL stimulus has average pooling that rounds up in lane 0 (what the broken copy breaks)
# POOL's rounded average adds the round-up bit to lane 0's floor quotient; subtracting it is the user's bug
ROUND_UP_LANE0 = re.compile(r"(\$signed\(floor_quotient0\)) \+")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """POOL's Verilog for SMALL (as `aipu rtl verilog` writes it) and SMALL as a configuration file."""
    root = tmp_path_factory.mktemp("rtl_verify")
    (root / "small.json").write_text(json.dumps(SMALL.to_dict()))
    (root / "pool.v").write_text(unit_verilog(PoolUnit, SMALL))
    return root


def verify(root, verilog, *extra) -> list[str]:
    return ["rtl", "verify", "--unit", "pool", "--verilog", str(verilog), "--config", str(root / "small.json"),
            "--commands", COMMANDS, "--seed", SEED, *extra]


def edited(root, name: str, pattern: str, replacement: str) -> str:
    """A copy of the exported POOL with every match of ``pattern`` replaced (there must be one)."""
    text, count = re.subn(pattern, replacement, (root / "pool.v").read_text())
    assert count, pattern
    (root / name).write_text(text)
    return str(root / name)


def test_the_projects_own_unit_passes(exported, capsys):
    assert main(verify(exported, exported / "pool.v", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] and report["values_agree"] and report["cycles_agree"]
    assert report["unit"] == "POOL" and report["top"] == "aipu_pool"
    [run] = report["runs"]
    assert run["agree"] and run["name"].startswith("pool stimulus") and run["first_mismatch"] is None


def test_a_broken_copy_fails_naming_the_element(exported, capsys):
    broken = edited(exported, "broken.v", ROUND_UP_LANE0.pattern, r"\1 -")
    assert main(verify(exported, broken)) == 1
    out = capsys.readouterr().out
    assert re.search(r"first byte divergence from the interpreter: POOL\[\d+\] wrote OUT \w+ element \d+ at byte "
                     r"0x[0-9a-f]+: golden -?\d+, RTL -?\d+", out), out
    assert "values: DIFFER; cycles: agree" in out and "FAIL" in out
    assert main(verify(exported, broken, "--json", "--values-only")) == 1      # values are never excused
    report = json.loads(capsys.readouterr().out)
    mismatch = report["runs"][0]["first_mismatch"]
    assert mismatch["unit"] == "POOL" and mismatch["golden"] != mismatch["rtl"] and not report["pass"]


def one_cycle_late(root) -> str:
    """POOL renamed ``aipu_pool_inner`` inside an ``aipu_pool`` that hands it each command a cycle after the
    queue offers it: the same values, every command later than the cycle model says."""
    ports = expected_ports(PoolUnit, SMALL)
    declarations = "".join(f"  {direction} {f'[{width - 1}:0] ' if width > 1 else ''}{name};\n"
                           for name, (direction, width) in ports.items())
    passed = ", ".join(f".{name}({name})" for name in ports if name not in ("command__valid", "command__ready"))
    wrapper = (f"module aipu_pool({', '.join(ports)});\n{declarations}"
               "  reg waited = 0;\n  wire inner_ready;\n"
               "  always @(posedge clk) waited <= command__valid & ~waited;\n"
               "  assign command__ready = inner_ready & waited;\n"
               f"  aipu_pool_inner inner({passed}, .command__valid(command__valid & waited), "
               ".command__ready(inner_ready));\nendmodule\n")
    (root / "late.v").write_text((root / "pool.v").read_text().replace("module aipu_pool(", "module aipu_pool_inner(")
                                 + wrapper)
    return str(root / "late.v")


def test_a_slower_bit_exact_unit_passes_on_values_only(exported, capsys):
    late = one_cycle_late(exported)
    assert main(verify(exported, late)) == 1
    out = capsys.readouterr().out
    assert "values: agree; cycles: DIFFER" in out and "first command off the cycle model: POOL[0]" in out, out
    assert main(verify(exported, late, "--values-only", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] and report["values_agree"] and not report["cycles_agree"]


@pytest.mark.parametrize("pattern, replacement, message", [
    (r"\bact_read__en\b", "act_read_en", "port act_read__en: missing, expected output of 1 bit"),
    (r"output \[5:0\] error_field;\n  reg \[5:0\] error_field = 6'h00;",
     "output [4:0] error_field;\n  reg [4:0] error_field = 5'h00;",
     "port error_field: found output of 5 bits, expected output of 6 bits"),
    (r"input others_drained;", "output others_drained;",
     "port others_drained: found output of 1 bit, expected input of 1 bit"),
    (r"\Z", "\nmodule oops(input a;\nendmodule\n", "Verilator cannot read module aipu_pool in it: %Error: "),
], ids=["missing", "narrower", "direction", "syntax"])
def test_a_module_that_cannot_stand_in_is_refused_in_one_line(exported, capsys, pattern, replacement, message):
    bad = edited(exported, "bad.v", pattern, replacement)
    code = main(verify(exported, bad))
    err = capsys.readouterr().err
    assert_one_line_error(code, err, "rtl", bad)
    assert message in err


def test_other_bad_arguments_are_refused_in_one_line(exported, capsys, tmp_path):
    for arguments, path in [(verify(exported, tmp_path / "absent.v"), str(tmp_path / "absent.v")),
                            (verify(exported, tmp_path), str(tmp_path)),
                            (verify(exported, exported / "pool.v", "--top", "a;b"), "--top 'a;b'"),
                            (verify(exported, exported / "pool.v", "--top", "elsewhere"),
                             str(exported / "pool.v"))]:
        assert_one_line_error(main(arguments), capsys.readouterr().err, "rtl", path)
    arguments = verify(exported, exported / "pool.v")
    arguments[arguments.index("pool")] = "eltwise"
    assert_one_line_error(main(arguments), capsys.readouterr().err, "rtl", "--unit 'eltwise'")


def test_a_module_that_the_system_refuses_is_named_in_one_line(exported, capsys):
    """Defining the System's top is refused before the build; SystemVerilog that Verilator parses but Icarus
    cannot compile is refused by the build, with the simulator's first error on the user's file."""
    system = edited(exported, "system.v", r"\Z", "\nmodule aipu_system(input a);\nendmodule\n")
    assert_one_line_error(main(verify(exported, system)), capsys.readouterr().err, "rtl", system)
    if shutil.which("iverilog") is None:
        pytest.skip("no Icarus Verilog")
    concurrent = edited(exported, "concurrent.v", r"\Z", "\nmodule held(input clk, input a);\n"
                        "  let twice(x) = 2 * x;\n  always_held: assert property (@(posedge clk) a);\nendmodule\n")
    code, err = main(verify(exported, concurrent, "--sim", "icarus")), capsys.readouterr().err
    error = err.splitlines(keepends=True)[-1]       # after the build's announcement, if it was not cached
    assert_one_line_error(code, error, "rtl", concurrent)
    assert f"icarus cannot build the NPU with module aipu_pool in it: {concurrent}:" in err, err


@pytest.mark.slow
def test_the_projects_own_conv_passes_on_default(tmp_path, capsys):
    (tmp_path / "conv.v").write_text(unit_verilog(ConvUnit, DEFAULT))
    assert main(["rtl", "verify", "--unit", "conv", "--verilog", str(tmp_path / "conv.v"), "--commands", "20",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pass"]
