"""The Verilator lint check the Verilog tests share: ``-Wall`` finds nothing past the warnings a test accepts."""
from __future__ import annotations

import subprocess
from pathlib import Path

from aipu.sim.cosim.verilog import verilator_environment


def assert_lint_clean(source: Path, top: str, accepted: tuple[str, ...]) -> None:
    """Verilator's ``--lint-only -Wall`` on module ``top`` of ``source``, the ``accepted`` warnings off."""
    with verilator_environment():
        result = subprocess.run(["verilator", "--lint-only", "-Wall", *(f"-Wno-{name}" for name in accepted),
                                 "--top-module", top, str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
