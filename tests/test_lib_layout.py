"""The layout of lib: mathematics at the top, and the machinery, text pipeline and models in packages."""
import ast
import importlib
from pathlib import Path

import pytest

import lib
from lib import REPO_ROOT

LIB = REPO_ROOT / "lib"


def lib_imports(path: Path) -> set[str]:
    """The lib modules a file imports (absolute names, relative imports resolved)."""
    package = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "lib" or name.startswith("lib.")}


def test_the_machinery_does_not_depend_on_the_mathematics_text_or_models():
    for path in (LIB / "book").glob("*.py"):
        for name in lib_imports(path):
            assert name in ("lib",) or name.startswith("lib.book"), f"{path.name} imports {name}"


def test_text_and_models_stand_on_the_machinery_only():
    for package, allowed in (("text", ("lib.text", "lib.book")), ("models", ("lib.models", "lib.book"))):
        for path in (LIB / package).glob("*.py"):
            for name in lib_imports(path):
                assert name == "lib" or name.startswith(allowed), f"{package}/{path.name} imports {name}"


@pytest.mark.parametrize("old, new", sorted(lib.MOVED.items()))
def test_old_module_paths_still_import_the_moved_modules(old, new):
    moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    assert moved.__name__ == new and moved.__spec__.name == new


def test_import_lib_alone_stays_cheap():
    import subprocess
    import sys

    code = "import sys, lib; print(sorted(m for m in ('torch', 'numpy', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == "[]"
