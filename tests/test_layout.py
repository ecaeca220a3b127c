"""The layout holds: one `aipu` namespace, and imports that point only down the data flow (docs/architecture.md).

Floors, bottom up: the specification; the golden model and the codec; the cycle formulas (no Amaranth), the
quantization and compression methods; the model representation; the compiler, the interpreter and the RTL
(siblings: none imports another); the co-simulation and the cycle model; the application. A module imports only its own room or a lower floor.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = {"app": "aipu.app", "codec": "aipu.codec", "compiler": "aipu.compiler", "compress": "aipu.compress",
           "quant": "aipu.quant", "rtl": "aipu.rtl", "sim": "aipu.sim", "tai": "aipu.tai"}
FLOORS = {
    "aipu.sim.machine": 0,
    "aipu.sim.golden": 1, "aipu.codec": 1,
    "aipu.sim.timing": 2, "aipu.quant": 2, "aipu.compress": 2,
    "aipu.tai": 3,
    "aipu.compiler": 4, "aipu.sim.interpreter": 4, "aipu.rtl": 4,
    "aipu.sim.cosim": 5, "aipu.sim.cycle": 5,
    "aipu.app": 6,
}
NAMESPACE_ROOT = {"aipu.sim"}      # package __init__ files above the rooms: docstrings only, no imports


def _modules() -> dict[str, Path]:
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            modules[name.removesuffix(".__init__")] = path
    return modules


def _room(module: str) -> str | None:
    matches = [room for room in FLOORS if module == room or module.startswith(room + ".")]
    return max(matches, key=len) if matches else None


def _imports(module: str, path: Path) -> set[str]:
    """Absolute names of the aipu modules (or packages) that ``module`` imports anywhere in its text."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    for block in ast.walk(tree):      # imports for type annotations only are not dependencies
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            block.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


MODULES = _modules()


def test_every_package_folder_is_installed_under_the_namespace():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert pyproject["package-dir"] == {package: folder for folder, package in FOLDERS.items()}
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert set(pyproject["packages"]) == packages


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_use_the_namespace_and_point_down_the_data_flow(module):
    imported = _imports(module, MODULES[module])
    bare = sorted(name for name in imported if name.split(".")[0] in (*FOLDERS, "tests"))
    assert not bare, f"{module} imports {bare}: import them as aipu.<package> (or not at all, for tests)"
    if module in NAMESPACE_ROOT:
        assert not {name for name in imported if name.startswith("aipu.")}, f"{module} must stay empty"
        return
    room = _room(module)
    assert room is not None, f"{module} lies in no room of FLOORS: place it in docs/architecture.md and here"
    upward = sorted(name for name in imported if name in MODULES and _room(name) not in (None, room)
                    and FLOORS[_room(name)] >= FLOORS[room])
    assert not upward, f"{module} (floor {FLOORS[room]}, {room}) imports {upward} at the same floor or above"


def test_no_two_modules_import_each_other():
    graph = {module: {name for name in _imports(module, path) if name in MODULES and name != module}
             for module, path in MODULES.items()}
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for name in sorted(graph[module]):
            if state.get(name) == 1:
                cycle = trail[trail.index(name):] + [name] if name in trail else [module, name]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if name not in state:
                visit(name, trail + [name])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_generic_names_are_not_importable_from_outside_the_repository(tmp_path):
    script = ("import importlib.util as u\n"
              f"print([n for n in {sorted(FOLDERS)!r} if u.find_spec(n) is not None])\n"
              "import aipu.sim.golden, aipu.sim.machine.arch, aipu.codec, aipu.compiler.lowering.conv_layers, "
              "aipu.app.cli\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"importable outside the repository: {run.stdout.strip()}"
