"""The layout of lib, read from its imports (every import, also one inside a function).

Four layers, bottom to top; a module imports only from its own layer or below, and no import
closes a cycle:

1. ``lib`` itself and ``lib.book``: the machinery that runs the book;
2. ``lib.text`` and ``lib.models``: text and models, each on the machinery only;
3. ``lib/<concept>.py``: the mathematics;
4. ``lib/<chapter>_experiments.py``: a chapter's studies, verdicts and ``heavy_steps``.

No module takes a private name (``_name``) of another, by import or by attribute.
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lib import REPO_ROOT

LIB = REPO_ROOT / "lib"
MACHINERY, TEXT_AND_MODELS, MATHEMATICS, STUDIES, ENTRY = 1, 2, 3, 4, 5
LAYER_NAMES = {MACHINERY: "machinery", TEXT_AND_MODELS: "text and models", MATHEMATICS: "mathematics",
               STUDIES: "chapter studies", ENTRY: "entry point"}


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lib_modules(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of ``root/lib`` by its dotted name."""
    return {module_name(path, root): path for path in sorted((root / "lib").rglob("*.py"))}


def layer(module: str) -> int:
    """The layer of a lib module (numbered bottom to top, as in this file's docstring)."""
    parts = module.split(".")
    if module == "lib.__main__":
        return ENTRY
    if len(parts) == 1 or parts[1] == "book":
        return MACHINERY
    if parts[1] in ("text", "models"):
        return TEXT_AND_MODELS
    return STUDIES if parts[1].endswith("_experiments") else MATHEMATICS


def lib_imports(path: Path, modules, root: Path = REPO_ROOT):
    """(module, name or None, local name, line) for every lib import of the file, also inside functions.

    ``from lib import llc`` and ``from . import llc`` import the module ``lib.llc`` (name None);
    ``from lib.llc import x`` takes the name ``x`` of ``lib.llc``. Relative imports are resolved
    against the file's package."""
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "lib":
                    yield alias.name, None, alias.asname or alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] != "lib":
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}", None, local, node.lineno
                else:
                    yield base, alias.name, local, node.lineno


def import_graph(modules: dict[str, Path], root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """module -> the lib modules it imports (a package's ``__init__`` counts as the package)."""
    return {name: {m for m, _, _, _ in lib_imports(path, modules, root) if m != name and m in modules}
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} ({LAYER_NAMES[layer(a)]}) imports {b} ({LAYER_NAMES[layer(b)]})"
            for a, targets in sorted(graph.items()) for b in sorted(targets) if layer(b) > layer(a)]


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path, modules, root: Path = REPO_ROOT) -> list[str]:
    """Private names of another lib module that the file takes, by import or as an attribute."""
    own = module_name(path, root)
    imports = list(lib_imports(path, modules, root))
    found = [f"{own}:{line} imports {m}.{name}" for m, name, _, line in imports
             if name and is_private(name) and m != own]
    modules_bound = {local: m for m, name, local, _ in imports if name is None and m != own}
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules_bound and is_private(node.attr)):
            found.append(f"{own}:{node.lineno} uses {modules_bound[node.value.id]}.{node.attr}")
    return found


# Private attributes of other libraries that lib uses on purpose, each with its reason.
FOREIGN_PRIVATE_ALLOWED = {
    "_getframe": "sys._getframe: the caller's globals for setup(), CPython's documented introspection hook",
    "_foreach_add_": "torch._foreach_add_: the fused multi-tensor update of the SGLD step",
    "_TorchCompileInductorWrapper": "torch's Inductor backend object, built once per device type so that "
                                    "models of one architecture share compiled graphs (lib.sgld)",
}


def defined_private_names(path: Path) -> set[str]:
    """Private names a module defines: functions, classes, names, and attributes it sets on self or cls."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and is_private(node.name):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and is_private(node.attr)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and is_private(node.id):
            names.add(node.id)
    return names


def foreign_private_attributes(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """``x._name`` where ``x`` is not self, cls or super() and ``_name`` is not the module's own."""
    own = defined_private_names(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        if node.attr not in own and node.attr not in FOREIGN_PRIVATE_ALLOWED:
            found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
    return found


# --- the checks on hand-made graphs: each one can fail -------------------------------------------

def test_cycles_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []
    assert sorted(cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == [["a", "b"], ["c", "d"]]


def test_layers_order_the_packages():
    assert layer("lib") == layer("lib.book.records") == MACHINERY
    assert layer("lib.text.corpus") == layer("lib.models.causal_lm") == TEXT_AND_MODELS
    assert layer("lib.modes") == layer("lib.sgld") == MATHEMATICS
    assert layer("lib.llc_experiments") == STUDIES
    assert upward_imports({"lib.modes": {"lib.modes_experiments"}}) != []
    assert upward_imports({"lib.modes_experiments": {"lib.modes", "lib.book.tables"}}) == []


def test_private_uses_sees_an_imported_private_name_and_a_private_attribute(tmp_path):
    package = tmp_path / "lib"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def _hidden(): pass\ndef shown(): _hidden()\n")
    (package / "b.py").write_text("from .a import _hidden\nfrom . import a\na._hidden()\n")
    (package / "c.py").write_text("from lib.a import shown\nimport lib.a as a\na.shown()\n")
    modules = lib_modules(tmp_path)
    found = private_uses(package / "b.py", modules, tmp_path)
    assert found == ["lib.b:1 imports lib.a._hidden", "lib.b:3 uses lib.a._hidden"]
    assert private_uses(package / "a.py", modules, tmp_path) == []
    assert private_uses(package / "c.py", modules, tmp_path) == []
    assert import_graph(modules, tmp_path) == {"lib": set(), "lib.a": set(), "lib.b": {"lib.a"}, "lib.c": {"lib.a"}}


# --- the checks on lib ---------------------------------------------------------------------------

MODULES = lib_modules()
GRAPH = import_graph(MODULES)


def test_no_import_cycle_inside_lib():
    assert cycles(GRAPH) == []


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    assert upward_imports(GRAPH) == []


def test_text_and_models_do_not_import_each_other():
    def package(module):
        return module.split(".")[1] if module.count(".") else ""

    crossing = [f"{a} imports {b}" for a, targets in GRAPH.items() for b in targets
                if {package(a), package(b)} == {"text", "models"}]
    assert crossing == []


def test_no_module_takes_a_private_name_of_another():
    found = [use for path in MODULES.values() for use in private_uses(path, MODULES)]
    assert found == []


def test_no_module_reaches_into_another_objects_private_attributes():
    found = [use for path in MODULES.values() for use in foreign_private_attributes(path)]
    assert found == []


def test_foreign_private_attributes_sees_another_modules_private_method(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("class A:\n    def _own(self): self._x = 1\n\n"
                    "def f(a, modes, config):\n    a._own(); a._x; super()._y\n"
                    "    modes._full_bases(); config._attn_implementation = 'eager'\n")
    found = foreign_private_attributes(path, tmp_path)
    assert sorted(found) == ["m.py:6 config._attn_implementation", "m.py:6 modes._full_bases"]


def chapter_declarations():
    return sorted((REPO_ROOT / "chapters").glob("*.yml"))


@pytest.mark.parametrize("declaration", chapter_declarations(), ids=lambda p: p.stem)
def test_a_chapters_costs_live_in_its_own_study_module(declaration):
    costs = (yaml.safe_load(declaration.read_text()) or {}).get("costs")
    if costs is None:
        pytest.skip("no heavy steps")
    assert costs == f"lib.{declaration.stem}_experiments:heavy_steps"
    assert f"lib.{declaration.stem}_experiments" in MODULES


def test_no_mathematics_module_declares_heavy_steps():
    declaring = [name for name, path in MODULES.items()
                 if re.search(r"^def heavy_steps\(", path.read_text(), re.M) and layer(name) == MATHEMATICS]
    assert declaring == []


def test_import_lib_alone_stays_cheap():
    code = "import sys, lib; print(sorted(m for m in ('torch', 'numpy', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == "[]"


def moved_names() -> dict[str, dict[str, str]]:
    """Old module -> {moved name: its new module}, read from each module's ``forward_moved``."""
    import importlib

    found = {}
    for name, path in MODULES.items():
        if name != "lib.book.moved" and "forward_moved(" in path.read_text():
            getter = getattr(importlib.import_module(name), "__getattr__", None)
            cells = [c.cell_contents for c in (getattr(getter, "__closure__", None) or ())]
            found[name] = next(c for c in cells if isinstance(c, dict))
    return found


def code_of_chapters() -> list[tuple[Path, str]]:
    """Each chapter's code cells, one text per chapter (Markdown, cell options and magics left out)."""
    found = []
    for path in sorted((REPO_ROOT / "chapters").rglob("*.md")):
        cells = []
        for cell in re.findall(r"```\{code-cell\}[^\n]*\n(.*?)\n```", path.read_text(), re.S):
            if cell.startswith("---\n"):                       # a YAML block of cell options
                cell = cell.split("\n---\n", 1)[1]
            lines = cell.split("\n")
            while lines and lines[0].startswith(":"):          # short-form cell options (:tags: ...)
                lines.pop(0)
            cells.append("\n".join(line for line in lines if not line.lstrip().startswith(("%", "!"))))
        found.append((path, "\n".join(cells)))
    return found


def old_name_uses(source: str, package: str, moved: dict[str, dict[str, str]], where: str) -> list[str]:
    """Where ``source`` takes a moved name from its old module (by import, or as ``alias.name``)."""
    uses, aliases = [], {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                if alias.name in moved.get(base, {}):
                    uses.append(f"{where}:{node.lineno} from {base} import {alias.name}")
                if f"{base}.{alias.name}" in moved:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            aliases.update({alias.asname: alias.name for alias in node.names if alias.name in moved and alias.asname})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr in moved[aliases[node.value.id]]):
            uses.append(f"{where}:{node.lineno} {node.value.id}.{node.attr} (now in "
                        f"{moved[aliases[node.value.id]][node.attr]})")
    return uses


def test_old_name_uses_sees_an_import_and_an_attribute_of_a_moved_name():
    moved = {"lib.llc": {"heavy_steps": "lib.llc_experiments"}}
    source = "from lib.llc import heavy_steps, estimate_llc\nfrom lib import llc as L\nL.heavy_steps\nL.estimate_llc\n"
    assert old_name_uses(source, "lib", moved, "x") == [
        "x:1 from lib.llc import heavy_steps", "x:3 L.heavy_steps (now in lib.llc_experiments)"]
    assert old_name_uses("from .llc import heavy_steps\n", "lib", moved, "y") == ["y:1 from lib.llc import heavy_steps"]


def test_the_library_chapters_and_benchmarks_use_moved_names_at_their_new_homes():
    moved = moved_names()
    uses = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        uses += old_name_uses(path.read_text(), package, moved, name)
    for path in sorted((REPO_ROOT / "benchmarks").glob("*.py")) + sorted((REPO_ROOT / "scripts").glob("*.py")):
        uses += old_name_uses(path.read_text(), "", moved, path.name)
    for path, code in code_of_chapters():
        uses += old_name_uses(code, "", moved, path.name)
    assert uses == []


def rebound_imports(code: str) -> list[str]:
    """Names a chapter's code imports and then binds again (an assignment, a loop or a parameter)."""
    tree = ast.parse(code)
    imported = {alias.asname or alias.name.split(".")[0]
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    rebound = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    rebound |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    return sorted(imported & rebound)


def test_rebound_imports_sees_a_module_alias_bound_again():
    assert rebound_imports("from lib import llc_experiments as experiments\nexperiments = [1]\n") == ["experiments"]
    assert rebound_imports("from lib import logits as lg\nf = lambda lg: lg\n") == ["lg"]
    assert rebound_imports("from lib import logits as lg\nx = [e for e in lg.f()]\n") == []


@pytest.mark.parametrize("path, code", code_of_chapters(), ids=lambda x: getattr(x, "stem", ""))
def test_no_chapter_binds_again_a_name_it_imported(path, code):
    assert rebound_imports(code) == []
