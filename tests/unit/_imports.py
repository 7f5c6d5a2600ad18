"""A module's imports read from its source with ``ast``, for the tests that
hold the code's shape (``test_core_pure``, ``test_code_shape``).

Every ``import`` and ``from ... import`` counts, at any depth (inside a
function, under ``TYPE_CHECKING``), relative ones resolved.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, root: Path, package: str) -> str:
    """The dotted name of the module at ``path``, ``root`` being ``package``'s folder."""
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` (the module ``name``):
    ``from x import y`` gives ``x`` and ``x.y`` (``y`` may be a submodule);
    ``__import__`` and ``import_module`` calls count as imports of
    ``builtins``/``importlib``."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            called = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if called == "__import__":
                found.append((node.lineno, "builtins"))
            elif called == "import_module":
                found.append((node.lineno, "importlib"))
    return found
