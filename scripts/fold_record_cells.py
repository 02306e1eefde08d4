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
cell's existing tags are kept; tagging writes nothing but cell options (``:tags: [...]``, or ``tags:``
in a ``---`` options block).

With ``--split`` it also takes the records out of the cells that mix them with computation, where that
changes neither what runs nor the order of the records (:func:`plan_split`):

* a cell ending with a block of record statements is cut before the block: the block becomes a new cell
  right below it, tagged as above (``remove-input``, or ``hide-input`` when an argument may print);
* a cell whose record block is followed only by what the cell shows (``table(...)``, ``show_figure(...)``,
  ``print(...)``, ``display(...)``, a bare expression last) has the block moved below the display and
  cut off the same way, when neither side changes a name the other reads;
* a cell whose records alternate with computation stays as it is, as does one whose records read a clock.

The new cell follows its cell at once, so the glue still comes before the prose that uses it; the rest
of each cell (its options, comments, the other lines) is kept as it was, comment lines right above a
block (and, below a moved one, before a blank line) going with it. Each file's statements are checked
before it is written: the same multiset over its code cells, the record calls in the same order.

Usage::

    python scripts/fold_record_cells.py                    # tag the chapters in place (idempotent)
    python scripts/fold_record_cells.py --split            # tag, and split the mixed cells (idempotent)
    python scripts/fold_record_cells.py --check [--split]  # exit 1 if a cell is untagged (or unsplit)
    python scripts/fold_record_cells.py --report           # displayed code lines, record lines, mixed cells

Paths may be given; the default is every chapter, ``chapters/*.md`` and ``chapters/appendix/*.md``.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
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


# --- splitting -----------------------------------------------------------------------------------------

# What a mixed cell may end with for its records to move below it: lib.book's table and show_figure, print and
# IPython's display, called by name. They read their arguments and change none of them (table and show_figure
# also note a width or a figure's legibility in the record's meta, under keys no record call writes).
SHOWS = frozenset({"table", "show_figure", "print", "display"})
RETURNS_NONE = frozenset({"show_figure", "print", "display"})   # a cell ending in one shows no value
DISPLAY_META = frozenset({"tables", "figures"})   # the record's meta keys table / show_figure write
# Methods that change their object in place: what one side changes so must not be read by the other.
MUTATORS = frozenset({"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault",
                      "sort", "reverse", "add", "discard", "fill", "resize", "put"})
# Clock readings (time.perf_counter(), datetime.now(), ...): a record of one depends on when it runs.
CLOCKS = frozenset({"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                    "process_time", "process_time_ns", "now", "utcnow", "today"})
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


@dataclass
class Split:
    """How a mixed cell is split: its code keeps ``keep``; a new cell right below it, tagged ``tag``, holds
    ``moved`` (its record statements, with their comments)."""

    kind: str            # "trailing" or "before-display" (:func:`mixed_kind`)
    keep: list[str]
    moved: list[str]
    tag: str


def _effects(statements: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """(read, changed): the cell-level names the statements read, and those they bind, delete, assign into
    or call an in-place method of (:data:`MUTATORS`). A comprehension's or a lambda's own variables are
    neither (a walrus inside one still binds in the cell)."""
    read: set[str] = set()
    changed: set[str] = set()

    def root(node: ast.expr) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def visit(node: ast.AST, local: frozenset) -> None:
        if isinstance(node, ast.Name):
            if node.id not in local:
                (read if isinstance(node.ctx, ast.Load) else changed).add(node.id)
            return
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            if (name := root(node)) and name not in local:
                changed.add(name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            if (name := root(node.func.value)) and name not in local:
                changed.add(name)
        if isinstance(node, ast.NamedExpr):
            changed.add(node.target.id)
            visit(node.value, local)
            return
        if isinstance(node, ast.Lambda):
            a = node.args
            for default in a.defaults + [d for d in a.kw_defaults if d is not None]:
                visit(default, local)
            own = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None}
            visit(node.body, local | own)
            return
        if isinstance(node, _COMPREHENSIONS):
            own = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
            inner = local | own
            for i, gen in enumerate(node.generators):
                visit(gen.iter, local if i == 0 else inner)   # the first iterable is evaluated outside
                for cond in gen.ifs:
                    visit(cond, inner)
            for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
                visit(part, inner)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    for stmt in statements:
        visit(stmt, frozenset())
    return read, changed


def _shows(stmt: ast.stmt) -> bool:
    """A call of table / show_figure / print / display by name, as a statement."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in SHOWS)


def _bare(stmt: ast.stmt) -> bool:
    """A bare expression that only names a value (``df``, ``result.rows``, ``rows[0]``): shown when last."""
    if not isinstance(stmt, ast.Expr):
        return False
    return all(isinstance(n, (ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Tuple, ast.Slice, ast.Load))
               for n in ast.walk(stmt.value))


def _reads_clock(statements: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Call) and _called_name(n.func) in CLOCKS for s in statements for n in ast.walk(s))


def _rstrip_blank(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _lstrip_blank(lines: list[str]) -> list[str]:
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    return lines[start:]


def plan_split(source: str) -> Split | str | None:
    """How a displayed cell that mixes computing and recording is split (a :class:`Split`), or why it is
    left as it is (a reason); None for a cell that does not mix (or is not plain Python).

    * trailing records (the cell's last statements, after at least one other): they go to a new cell;
    * records followed only by what the cell shows (``table(...)``, ``show_figure(...)``, ``print(...)``,
      ``display(...)``, a bare expression last): they go below it, to a new cell, when neither side changes
      a name the other reads (:func:`_effects`), so both compute what they did;
    * records between computations: left (``interleaved``), as are records that read a clock (their value
      depends on when they run) and a cell whose last expression would be shown once the records leave it.
    """
    statements = _parse(source)
    if not statements:
        return None
    book = [is_bookkeeping(s) for s in statements]
    if all(book) or not any(book):
        return None
    last = len(book) - 1 - book[::-1].index(True)
    first = last
    while first > 0 and book[first - 1]:
        first -= 1
    if any(book[:first]):
        return "interleaved: records between computations"
    before, block, after = statements[:first], statements[first:last + 1], statements[last + 1:]
    if not any(is_record_call(n) for s in block for n in ast.walk(s) if isinstance(n, ast.stmt)):
        return "the block after the computation records nothing"
    if after and not (all(map(_shows, after[:-1])) and (_shows(after[-1]) or _bare(after[-1]))):
        shown = [s for s in after if not (_shows(s) or _bare(s))]
        if all(map(_is_display, shown)):
            return f"ends with {ast.unparse(shown[0].value.func)}(...), not one of {', '.join(sorted(SHOWS))}"
        return "interleaved: computation follows the records"
    lines = source.split("\n")
    b0, b1 = block[0].lineno - 1, block[-1].end_lineno - 1
    if (before and before[-1].end_lineno - 1 >= b0) or (after and after[0].lineno - 1 <= b1):
        return "a record statement shares a line with another statement"
    if _reads_clock(block):
        return "the records read the clock: their value depends on when they run"
    start = b0
    floor = before[-1].end_lineno if before else 0
    while start > floor and lines[start - 1].lstrip().startswith("#"):
        start -= 1   # comment lines right above the records go with them
    if not after:
        last_kept = before[-1]
        if isinstance(last_kept, ast.Expr) and not (isinstance(last_kept.value, ast.Call)
                                                    and isinstance(last_kept.value.func, ast.Name)
                                                    and last_kept.value.func.id in RETURNS_NONE):
            return "its last expression would be shown once the records leave the cell"
        moved, keep = lines[start:], lines[:start]
        kind = "trailing"
    else:
        read_block, changed_block = _effects(block)
        read_shown, changed_shown = _effects(after)
        clash = (changed_block & (read_shown | changed_shown)) | (changed_shown & read_block)
        clash |= {f"record_meta({kw.arg}=...)" for s in block for n in ast.walk(s) if isinstance(n, ast.Call)
                  and _is_recorder(n.func) and _called_name(n.func) == "record_meta"
                  for kw in n.keywords if kw.arg in DISPLAY_META}
        if clash:
            return f"the records and the display share a name one of them changes: {', '.join(sorted(clash))}"
        d0 = after[0].lineno - 1
        gap = list(range(b1 + 1, d0))
        blank = next((n for n in gap if not lines[n].strip()), None)
        end = blank if blank is not None else b1 + 1   # comments below the records, before a blank line, go too
        moved = lines[start:end]
        head, tail = _rstrip_blank(lines[:start]), _lstrip_blank(lines[end:])
        # where the records were: as many blank lines as the wider of the two sides had (none at the top)
        seam = max(start - len(head), len(lines) - end - len(tail)) if head else 0
        keep = head + [""] * seam + tail
        kind = "before-display"
    moved = _lstrip_blank(_rstrip_blank(moved))
    keep = _rstrip_blank(keep)
    tag = classify("\n".join(moved))
    assert tag is not None, moved
    return Split(kind, keep, moved, tag)


def split_text(text: str, path: Path | None = None) -> tuple[str, list[tuple[Cell, Split]], list[tuple[Cell, str]]]:
    """The text with every displayed mixed cell that :func:`plan_split` can split split in two, the (cell,
    split) pairs done and the (cell, reason) pairs left. The new cell follows its cell at once (a blank line
    between), with the same fences and the tag only; the cell keeps its options. Checked by
    :func:`check_preserved` before it is returned."""
    cells = parse_cells(text, path)
    lines = text.split("\n")
    done, left = [], []
    for cell in cells:
        if not displayed(cell):
            continue
        plan = plan_split(cell.source)
        if isinstance(plan, Split):
            done.append((cell, plan))
        elif plan is not None:
            left.append((cell, plan))
    for cell, plan in reversed(done):  # from the end: earlier line numbers stay valid
        new_cell = ["", lines[cell.fence_line], f":tags: [{plan.tag}]", "", *plan.moved, lines[cell.end_line]]
        lines[cell.end_line + 1:cell.end_line + 1] = new_cell
        lines[cell.end_line - len(cell.code):cell.end_line] = plan.keep
    new = "\n".join(lines)
    check_preserved(text, new, path)
    return new, done, left


def _cell_statements(text: str) -> list[list[ast.stmt] | str]:
    """Each code cell's statements in order (its source when it is not plain Python)."""
    return [statements if (statements := _parse(c.source)) is not None else c.source for c in parse_cells(text)]


def statements(text: str) -> Counter:
    """The multiset of the top-level statements of every code cell (``ast.dump``, no line numbers)."""
    return Counter(ast.dump(s) if isinstance(s, ast.AST) else s
                   for cell in _cell_statements(text) for s in (cell if isinstance(cell, list) else [cell]))


def record_calls(text: str) -> list[str]:
    """Every ``record``/``record_meta`` call of the code cells, in the order they run (``ast.dump``)."""
    return [ast.dump(node) for cell in _cell_statements(text) if isinstance(cell, list) for stmt in cell
            for node in ast.walk(stmt) if isinstance(node, ast.Call) and _is_recorder(node.func)]


def check_preserved(before: str, after: str, path: Path | None = None) -> None:
    """Raise ValueError unless ``after`` runs the same statements as ``before`` (the same multiset over all
    code cells) with its record calls in the same order."""
    if statements(before) != statements(after):
        raise ValueError(f"{path}: splitting would change the statements the chapter runs")
    if record_calls(before) != record_calls(after):
        raise ValueError(f"{path}: splitting would change the order of the record calls")


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
          "recording statement, continuation lines included; --split takes the trailing and before-display "
          "records out of their cells)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="MyST notebooks (default: every chapter)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="change nothing; exit 1 if a record-only cell is untagged (with --split: or a cell unsplit)")
    mode.add_argument("--report", action="store_true", help="change nothing; count displayed lines and mixed cells")
    parser.add_argument("--split", action="store_true",
                        help="also split the records off mixed cells that end with them or with what they show")
    args = parser.parse_args(argv)
    if args.split and args.report:
        parser.error("--split and --report do not go together")
    paths = [p.resolve() for p in args.paths] or chapter_paths()
    if args.report:
        report(paths)
        return 0
    todo = 0
    for path in paths:
        text = path.read_text()
        new, added = fold_text(text, path)
        where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        for cell, tag in added:
            line = cell.fence_line + 1
            print(f"{where}:{line}: record-only cell {'needs' if args.check else 'tagged'} {tag}")
        todo += len(added)
        if args.split:
            new, done, left = split_text(new, path)
            for cell, plan in done:
                print(f"{where}:{cell.fence_line + 1}: {plan.kind} records {'to split' if args.check else 'split'}"
                      f" off into a {plan.tag} cell ({len(plan.moved)} lines)")
            if not args.check:
                for cell, reason in left:
                    if not reason.startswith("interleaved"):
                        print(f"{where}:{cell.fence_line + 1}: left as it is: {reason}")
                interleaved = sum(reason.startswith("interleaved") for _, reason in left)
                if interleaved:
                    print(f"{where}: {interleaved} cell(s) with records interleaved with computation left as they are")
            todo += len(done)
        if new != text and not args.check:
            path.write_text(new)
    if args.check and todo:
        command = "python scripts/fold_record_cells.py" + (" --split" if args.split else "")
        print(f"{todo} cell(s) to tag or split: run {command}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
