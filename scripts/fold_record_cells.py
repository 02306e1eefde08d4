"""Fold the chapters' bookkeeping cells: a code cell that only records is not shown to the reader.

A chapter writes its key numbers with ``record(name, value)`` (glued for the text, written to the
chapter's JSON record) and its metadata with ``record_meta(**items)`` (:mod:`lib.book.records`).
Neither shows anything on the page: ``record`` glues with ``display=False`` and both return None,
so a cell made only of such calls has no visible output, and its source is bookkeeping a reader
scrolls past. This script finds every code cell whose statements are all recording calls (possibly
spanning several lines, possibly ``for`` loops or ``if`` blocks whose bodies only record) and tags it:

* ``remove-input`` when the cell cannot show anything: every call in it is a recording call or a
  quiet one (built-ins such as ``float``/``max``, NumPy/math functions, ``.item()``...);
* ``hide-input`` when an argument calls something else (a library function may print, warn or show a
  progress bar): the output stays, and its source stays one click away.

A cell that already carries ``remove-input``, ``remove-cell`` or ``hide-input`` is left alone, and a
cell's existing tags are kept; the only lines this script writes are cell options (``:tags: [...]``,
or ``tags:`` in a ``---`` options block). Cells that mix computation with recording stay as they are
(``--report`` counts them; it splits nothing).

Usage::

    python scripts/fold_record_cells.py            # tag the chapters in place (idempotent)
    python scripts/fold_record_cells.py --check    # exit 1 if a record-only cell is untagged
    python scripts/fold_record_cells.py --report   # displayed code lines, record lines, mixed cells

Paths may be given; the default is every chapter, ``chapters/*.md`` and ``chapters/appendix/*.md``.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# The pure-recording helpers of lib.book (lib/book/records.py): they write the chapter's record and glue
# with display=False, show nothing and return None. Not show_figure (a figure), table (a Markdown table),
# records.start (called by setup), nor tables.record_width (it warns when a table is too wide).
RECORDERS = frozenset({"record", "record_meta"})

# Tags under which a cell's source is already off the page (or folded).
FOLDED = ("remove-input", "remove-cell", "hide-input")
REMOVE, HIDE = "remove-input", "hide-input"

# Calls that cannot print, warn on the page, draw or display: what a record's value is commonly made with.
QUIET_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "float", "frozenset", "int", "isinstance",
    "len", "list", "max", "min", "pow", "range", "reversed", "round", "set", "sorted", "str", "sum", "tuple",
    "zip", "repr", "format",
})
QUIET_MODULES = frozenset({"np", "numpy", "math", "time", "statistics"})  # their functions, as np.abs(...)
QUIET_METHODS = frozenset({
    "item", "tolist", "get", "items", "keys", "values", "copy", "astype", "mean", "sum", "max", "min", "std",
    "var", "round", "abs", "all", "any", "argmax", "argmin", "count", "index", "join", "format", "split",
    "strip", "lower", "upper", "replace", "startswith", "endswith", "numel", "detach", "cpu", "numpy",
    "total_seconds",
})

OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})\{code-cell\}")


@dataclass
class Cell:
    """One code cell of a MyST notebook: where it is, its options and its code."""

    path: Path | None
    fence_line: int                  # index of the opening fence line in the file's lines
    end_line: int                    # index of the closing fence line
    option_lines: list[int]          # indices of the option lines (":tags: ..." or the "---" block)
    yaml_block: bool                 # options written as a "---" YAML block
    tags: list[str]
    code: list[str] = field(default_factory=list)   # the code lines (options and the blank line after left out)

    @property
    def source(self) -> str:
        return "\n".join(self.code)

    @property
    def first_code_line(self) -> int:
        """1-based line of the file where the cell's code starts (for messages)."""
        return self.end_line - len(self.code) + 1


def _flow_list(text: str) -> list[str]:
    """The items of a YAML flow list ``[a, b]`` (or a single bare item)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [t.strip().strip("'\"") for t in text.split(",") if t.strip()]


def parse_cells(text: str, path: Path | None = None) -> list[Cell]:
    """The code cells of a MyST notebook's text."""
    lines = text.split("\n")
    cells, i = [], 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group("fence")
        close = re.compile("^" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = list(range(i + 1, j))
        option_lines, tags, yaml_block = [], [], False
        k = 0
        if body and lines[body[0]].strip() == "---":
            yaml_block = True
            end = next((n for n in range(1, len(body)) if lines[body[n]].strip() == "---"), None)
            if end is None:
                raise ValueError(f"{path}:{i + 1}: a code cell's '---' options block is not closed")
            option_lines = body[:end + 1]
            tags = _yaml_tags([lines[n] for n in body[1:end]])
            k = end + 1
        else:
            while k < len(body) and lines[body[k]].startswith(":"):
                option_lines.append(body[k])
                name, _, value = lines[body[k]][1:].partition(":")
                if name.strip() == "tags":
                    tags = _flow_list(value)
                k += 1
        if option_lines and k < len(body) and not lines[body[k]].strip():
            k += 1  # the blank line that ends the options
        cells.append(Cell(path, i, j, option_lines, yaml_block, tags, [lines[n] for n in body[k:]]))
        i = j + 1
    return cells


def _yaml_tags(block: list[str]) -> list[str]:
    """The tags of a cell's YAML options block (flow ``tags: [a, b]`` or a block list)."""
    for n, line in enumerate(block):
        m = re.match(r"^tags\s*:\s*(.*)$", line)
        if not m:
            continue
        if m.group(1).strip():
            return _flow_list(m.group(1))
        items = []
        for item in block[n + 1:]:
            im = re.match(r"^\s*-\s*(.+)$", item)
            if not im:
                break
            items.append(im.group(1).strip().strip("'\""))
        return items
    return []


# --- the classifier -------------------------------------------------------------------------------------


def _parse(source: str) -> list[ast.stmt] | None:
    """The cell's statements, or None when it is not plain Python (a magic, a shell escape, a syntax error)."""
    if any(line.lstrip().startswith(("%", "!")) for line in source.split("\n")):
        return None
    try:
        return ast.parse(source).body
    except SyntaxError:
        return None


def _called_name(func: ast.expr) -> str | None:
    """The name called: ``f`` for ``f``, ``a.f`` and ``a.b.f``."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


RECORDER_MODULES = frozenset({"book", "records"})  # record(...) reached as book.record, lib.book.records.record


def _is_recorder(func: ast.expr) -> bool:
    """``record``/``record_meta`` by name, or as an attribute of ``book`` or ``records`` (not any object's
    ``.record`` method)."""
    if isinstance(func, ast.Name):
        return func.id in RECORDERS
    return (isinstance(func, ast.Attribute) and func.attr in RECORDERS
            and _called_name(func.value) in RECORDER_MODULES)


def is_record_call(stmt: ast.stmt) -> bool:
    """The statement is one call of a recording helper (``record(...)``, ``record_meta(...)``)."""
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _is_recorder(stmt.value.func)


def is_bookkeeping(stmt: ast.stmt) -> bool:
    """A recording call, or a ``for`` loop / ``if`` block whose bodies (all branches) only record."""
    if is_record_call(stmt):
        return True
    if isinstance(stmt, ast.For):
        return all(map(is_bookkeeping, stmt.body)) and all(map(is_bookkeeping, stmt.orelse))
    if isinstance(stmt, ast.If):
        return all(map(is_bookkeeping, stmt.body)) and all(map(is_bookkeeping, stmt.orelse))
    return isinstance(stmt, ast.Pass)


def _quiet_call(call: ast.Call) -> bool:
    """A call that cannot show anything on the page (see QUIET_*), or a recording call itself."""
    func = call.func
    if _is_recorder(func):
        return True
    if isinstance(func, ast.Name):
        return func.id in QUIET_BUILTINS
    if isinstance(func, ast.Attribute):
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in QUIET_MODULES:
            return True
        return func.attr in QUIET_METHODS
    return False


def may_show_output(statements: list[ast.stmt]) -> bool:
    """Whether a record-only cell may still show something: an argument (or a loop's iterable, an if's
    test) calls a function that is neither recording nor quiet. ``record`` and ``record_meta`` themselves
    show nothing (``glue(..., display=False)``, return None)."""
    return any(isinstance(node, ast.Call) and not _quiet_call(node)
               for stmt in statements for node in ast.walk(stmt))


def classify(source: str) -> str | None:
    """The tag a record-only cell gets (``remove-input`` or ``hide-input``); None for any other cell."""
    statements = _parse(source)
    if not statements or not all(map(is_bookkeeping, statements)):
        return None
    if not any(is_record_call(node) for stmt in statements for node in ast.walk(stmt) if isinstance(node, ast.stmt)):
        return None  # nothing but `pass`
    return HIDE if may_show_output(statements) else REMOVE


DISPLAYS = frozenset({"table", "show_figure", "print", "display", "show"})  # what a cell shows, for the report


def _is_display(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and _called_name(stmt.value.func) in DISPLAYS)


def mixed_kind(source: str) -> str | None:
    """How a cell that records also computes (None for a cell that does not mix):

    * ``trailing``: its recording statements are one block at its end (the cell could be split there);
    * ``before-display``: they are one block followed only by what the cell shows (``table(...)``,
      ``show_figure(...)``, ``print(...)``);
    * ``interleaved``: recording and computing alternate (or computing follows the recording).
    """
    statements = _parse(source)
    if not statements:
        return None
    book = [is_bookkeeping(s) for s in statements]
    if all(book) or not any(book):
        return None
    first = book.index(True)
    last = len(book) - 1 - book[::-1].index(True)
    if not all(book[first:last + 1]):
        return "interleaved"
    if last == len(book) - 1:
        return "trailing"
    return "before-display" if all(map(_is_display, statements[last + 1:])) else "interleaved"


# --- tagging -------------------------------------------------------------------------------------------


def needs_tag(cell: Cell) -> str | None:
    """The tag a cell lacks (None when it is not record-only or is already folded)."""
    if any(tag in cell.tags for tag in FOLDED):
        return None
    return classify(cell.source)


def add_tag(lines: list[str], cell: Cell, tag: str) -> None:
    """Add ``tag`` to the cell's options in ``lines`` (in place), keeping its other options and tags."""
    tags = cell.tags + [tag]
    flow = "[" + ", ".join(tags) + "]"
    if cell.yaml_block:
        inner = cell.option_lines[1:-1]
        for n in inner:
            m = re.match(r"^(tags\s*:\s*)(.*)$", lines[n])
            if not m:
                continue
            if m.group(2).strip():          # flow list: rewritten
                lines[n] = m.group(1) + flow
            else:                           # block list: one more item after the last
                last = n
                while last + 1 in inner and re.match(r"^\s*-\s", lines[last + 1]):
                    last += 1
                indent = re.match(r"^(\s*-\s*)", lines[last]).group(1) if last != n else "- "
                lines.insert(last + 1, indent + tag)
            return
        lines.insert(cell.option_lines[-1], f"tags: {flow}")
        return
    for n in cell.option_lines:
        if re.match(r"^:tags\s*:", lines[n]):
            lines[n] = f":tags: {flow}"
            return
    if cell.option_lines:
        lines.insert(cell.option_lines[-1] + 1, f":tags: {flow}")
    else:
        lines[cell.fence_line + 1:cell.fence_line + 1] = [f":tags: {flow}", ""]


def fold_text(text: str, path: Path | None = None) -> tuple[str, list[tuple[Cell, str]]]:
    """The text with every untagged record-only cell tagged, and the (cell, tag) pairs added."""
    cells = parse_cells(text, path)
    todo = [(cell, tag) for cell in cells if (tag := needs_tag(cell))]
    lines = text.split("\n")
    for cell, tag in reversed(todo):  # from the end: earlier line numbers stay valid
        add_tag(lines, cell, tag)
    return "\n".join(lines), todo


# --- counting ------------------------------------------------------------------------------------------


def displayed(cell: Cell) -> bool:
    """Whether the cell's source is on the page unfolded."""
    return not any(tag in cell.tags for tag in FOLDED)


def record_lines(source: str) -> set[int]:
    """The 0-based lines of the cell's code that belong to a recording statement (a call, or a loop/if that
    only records), continuation lines included."""
    statements = _parse(source)
    found: set[int] = set()
    if statements is None:
        return found

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if is_bookkeeping(stmt):
                found.update(range(stmt.lineno - 1, stmt.end_lineno))
            else:
                for name in ("body", "orelse", "finalbody", "handlers"):
                    visit([s for s in getattr(stmt, name, []) if isinstance(s, ast.stmt)])
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)

    visit(statements)
    lines = source.split("\n")
    return {n for n in found if lines[n].strip() and not lines[n].lstrip().startswith("#")}


def count(cells: list[Cell]) -> dict[str, int]:
    """Displayed code lines (non-blank lines of cells not folded) and how many of them record."""
    shown = [c for c in cells if displayed(c)]
    return {"cells": len(shown),
            "lines": sum(1 for c in shown for line in c.code if line.strip()),
            "record_lines": sum(len(record_lines(c.source)) for c in shown)}


def chapter_paths(root: Path = REPO_ROOT) -> list[Path]:
    return sorted((root / "chapters").glob("*.md")) + sorted((root / "chapters" / "appendix").glob("*.md"))


KINDS = ("trailing", "before-display", "interleaved")


def report(paths: list[Path]) -> None:
    """Per chapter: displayed code cells and their non-blank lines, how many of those lines record, and the
    mixed cells by kind (:func:`mixed_kind`) with the recording lines they hold."""
    head = ["cells", "lines", "record", *KINDS]
    print(f"{'displayed code':<30}" + "".join(f"{h:>15}" for h in head))
    total = [0] * len(head)
    held = dict.fromkeys(KINDS, 0)
    for path in paths:
        cells = [c for c in parse_cells(path.read_text(), path) if displayed(c)]
        counts = count(cells)
        kinds = [mixed_kind(c.source) for c in cells]
        for cell, kind in zip(cells, kinds):
            if kind:
                held[kind] += len(record_lines(cell.source))
        row = [counts["cells"], counts["lines"], counts["record_lines"], *(kinds.count(k) for k in KINDS)]
        total = [t + r for t, r in zip(total, row)]
        where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        print(f"{str(where):<30}" + "".join(f"{r:>15}" for r in row))
    print(f"{'total':<30}" + "".join(f"{t:>15}" for t in total))
    print("record lines in the mixed cells: " + ", ".join(f"{k} {held[k]}" for k in KINDS))
    print("(lines: non-blank code lines of cells without " + ", ".join(FOLDED) + "; record: those inside a "
          "recording statement, continuation lines included; mixed cells are left as they are)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="MyST notebooks (default: every chapter)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if a record-only cell is untagged")
    mode.add_argument("--report", action="store_true", help="change nothing; count displayed lines and mixed cells")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.paths] or chapter_paths()
    if args.report:
        report(paths)
        return 0
    untagged = 0
    for path in paths:
        text = path.read_text()
        new, added = fold_text(text, path)
        where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        for cell, tag in added:
            line = cell.fence_line + 1
            print(f"{where}:{line}: record-only cell {'needs' if args.check else 'tagged'} {tag}")
        untagged += len(added)
        if added and not args.check:
            path.write_text(new)
    if args.check and untagged:
        print(f"{untagged} record-only cell(s) untagged: run python scripts/fold_record_cells.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
