"""lib.book's modules import each other in the layers its docstring lists: every import (also one inside
a function) goes to a lower layer, so there is no cycle; and every module has its place in the list."""
import ast
import re
from pathlib import Path

import lib.book

BOOK = Path(lib.book.__file__).parent


def documented_layers() -> dict[str, int]:
    """Module → layer, read from the numbered list of lib.book's docstring (the modules in ``double backticks``
    before each item's parentheses)."""
    layers = {}
    for number, item in re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |^\s*$)", lib.book.__doc__, flags=re.M | re.S):
        outside = re.sub(r"\([^)]*\)", "", item)
        for name in re.findall(r"``(\w+)``", outside):
            layers[name] = int(number)
    return layers


def imports(path: Path) -> set[str]:
    """The lib.book modules a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("lib.book"):
            rest = node.module.split(".")[2:]
            found |= set(rest[:1]) if rest else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("lib.book.")}
    return found - {path.stem, "__init__"}


def test_every_import_goes_to_a_lower_layer():
    layers = documented_layers()
    modules = {p.stem for p in BOOK.glob("*.py")} - {"__init__"}
    assert modules - set(layers) == set(), "give these modules a layer in lib/book/__init__.py's docstring"
    assert set(layers) - modules == set(), "lib/book/__init__.py's docstring names modules that do not exist"
    upward = [f"{p.stem} (layer {layers[p.stem]}) imports {m} (layer {layers[m]})"
              for p in sorted(BOOK.glob("*.py")) if p.stem in layers
              for m in sorted(imports(p)) if m in layers and layers[m] >= layers[p.stem]]
    assert not upward, "\n".join(upward)


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from . import a\nfrom .b import x\n\ndef f():\n    from .c import y\n    import lib.book.d\n")
    assert imports(module) == {"a", "b", "c", "d"}
