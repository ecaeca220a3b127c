"""docs/registers.md is generated from the register table and current; `aipu register-doc` writes it."""
from __future__ import annotations

from aipu.app.cli import main
from aipu.app.register_doc import generate
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.registers import REGISTERS, UNIT_BLOCK_BASE, ErrorCause


def test_docs_registers_md_is_current(repo_root):
    assert (repo_root / "docs/registers.md").read_text() == generate(), \
        "docs/registers.md is stale: run `aipu register-doc -o docs/registers.md`"


def test_every_register_field_and_cause_is_documented():
    text = generate()
    for register in REGISTERS:
        if register.offset < UNIT_BLOCK_BASE:
            section = text.split(f"### {register.name} ({register.offset:#05x}, ")[1].split("\n### ")[0]
            for fld, _ in register.layout(DEFAULT):
                assert f"| `{fld.name}` |" in section, (register.name, fld.name)
        else:
            assert register.name in text
    for cause in ErrorCause:
        assert f"| {int(cause)} | {cause.name} |" in text


def test_cli_register_doc(tmp_path):
    assert main(["register-doc", "-o", str(tmp_path / "registers.md")]) == 0
    assert (tmp_path / "registers.md").read_text() == generate()
