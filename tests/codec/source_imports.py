"""What compiled code is built from: the source files a module imports, followed through the imports (for the
tests that a numba cache key covers every source its kernels read at compile time)."""
from __future__ import annotations

import ast
from pathlib import Path


def relative_imports(path: Path) -> set[Path]:
    """The source files the module at ``path`` imports by relative imports (as the codec writes them)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            stem = base.joinpath(*node.module.split(".")) if node.module else base
            candidates = [stem.with_suffix(".py"), stem / "__init__.py"]
            candidates += [stem / f"{alias.name}.py" for alias in node.names]
            found.update(candidate for candidate in candidates if candidate.is_file())
    return found


def imported_closure(modules: list[Path]) -> set[Path]:
    """``modules`` and every source file they import, directly or not."""
    reached, pending = set(), list(modules)
    while pending:
        path = pending.pop()
        if path not in reached:
            reached.add(path)
            pending += relative_imports(path)
    return reached
