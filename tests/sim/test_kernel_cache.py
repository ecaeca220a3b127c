"""The kernel cache's warm check reads numba's cache as numba does: cold until a kernel is compiled, warm in a
later process, cold again for another CPU; and it knows every module that makes kernels."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from aipu.sim.interpreter import kernel_cache

AIPU_DIR = Path(kernel_cache.__file__).resolve().parent.parent.parent
KERNEL = "aipu.sim.golden.fast.checks.first_outside"       # compiles in about a second
# the decorators that make numba kernels (codec/compiled/jit_cache.py defines the codec's; the benchmarks' own
# kernels are left to them)
MAKES_KERNELS = re.compile(r"^\s*@(numba\.)?n?jit\b|^\s*\w+ = n?jit\(", re.M)


def test_every_module_that_makes_kernels_is_listed():
    found = {path for folder in ("sim", "codec", "compiler", "app") for path in (AIPU_DIR / folder).rglob("*.py")
             if MAKES_KERNELS.search(path.read_text()) and "bench" not in path.parts}
    listed = {AIPU_DIR.joinpath(*name.split(".")[1:]).with_suffix(".py")
              for modules in kernel_cache.KERNEL_MODULES.values() for name in modules}
    assert found == listed


def _imported_modules(module_name: str) -> set[str]:
    path = AIPU_DIR.joinpath(*module_name.split(".")[1:]).with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                    # relative: from the module's own package
                base = ".".join(module_name.split(".")[:-node.level] + ([base] if base else []))
            found.update({base, *(f"{base}.{alias.name}" for alias in node.names)})
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_parts_import_no_kernel_module_of_each_other():
    """What lets each part of PARTS compile in a process of its own: no kernel of one calls one of another."""
    modules = [{name for group in part for name in kernel_cache.KERNEL_MODULES[group]} for part in kernel_cache.PARTS]
    assert sorted(group for part in kernel_cache.PARTS for group in part) == sorted(kernel_cache.GROUPS)
    for index, part in enumerate(modules):
        others = set().union(*modules[:index], *modules[index + 1:])
        for name in part:
            assert not _imported_modules(name) & others, name


def _cold_in_fresh_process(cache_dir: Path, compile_first: bool = False, **environment: str) -> list[str]:
    """The golden group's cold kernels, read in a new process on ``cache_dir``, after compiling KERNEL there
    if asked."""
    code = ("import json, numpy as np\n"
            "from aipu.sim.interpreter.kernel_cache import cold_kernels\n"
            "from aipu.sim.golden._checks import first_outside\n"
            f"if {compile_first}: first_outside(np.arange(3.0), 0.0, 1.0)\n"
            "print(json.dumps(cold_kernels(('golden',))))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True,
                            env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), **environment})
    return json.loads(result.stdout)


def test_a_kernel_reads_cold_until_compiled_then_warm_in_a_later_process_and_cold_for_another_cpu(tmp_path):
    everything = _cold_in_fresh_process(tmp_path)
    assert KERNEL in everything and len(everything) == len(kernel_cache.kernels(("golden",)))
    after = _cold_in_fresh_process(tmp_path, compile_first=True)
    assert sorted(after) == sorted(set(everything) - {KERNEL})
    assert _cold_in_fresh_process(tmp_path) == after
    assert KERNEL in _cold_in_fresh_process(tmp_path, NUMBA_CPU_NAME="generic")
