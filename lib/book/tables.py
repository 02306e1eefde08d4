"""Tables a reader can read: Markdown tables that fit the page's column, numbers whole and short.

A pandas DataFrame rendered as HTML keeps every float's full precision, breaks long values
mid-number at the page's edge and shows missing values as ``NaN``. :func:`table` renders
the same rows as a MyST table instead: floats to ``digits`` significant digits (``2.22e−16``,
with the minus sign U+2212, which a browser never breaks a line after, unlike the hyphen of
``2.22e-16``), integers (and whole floats) with thousands separators, missing values (None, NaN)
as ``—``, and text escaped so that ``|``, ``*`` or ``$`` show literally (a :class:`Raw` cell is
kept as Markdown).

Every table is measured the way :func:`lib.book.records.show_figure` measures a figure. A browser
can make a table no narrower than the sum, over its columns, of the widest *unbreakable word* in
the column (a line may break at a space, and after a hyphen, dash or slash) plus the cell's
padding and border; wider than the article column (``lib.book.figures.PAGE_PX`` = 756 px at a 1400 px
window), the table scrolls sideways and its last columns are out of sight. :func:`min_width`
measures that width with matplotlib's font metrics in the page's table font: DejaVu Sans at
16 px (bold in the header row), 8 px of padding on each side of a cell and a 1 px border; inline code in DejaVu
Sans Mono at 14 px; inline maths with mathtext at the same size. (Chromium on Linux renders the
theme's ``system-ui`` font as DejaVu Sans, and these numbers reproduce its min-content widths to
a few pixels; the narrower system fonts of other platforms only make a table narrower.)
:func:`table` records the measurement in the chapter's record under ``meta["tables"][name]``
and warns, naming the table, when it is wider than the column.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from numbers import Integral, Real
from typing import Any, Iterable, Mapping, Sequence

from .figures import PAGE_PX
from .records import record_meta

MISSING = "—"
MINUS = "\u2212"  # the minus sign: no line break after it, unlike the hyphen-minus

TABLE_FONT_PX = 16.0  # td and th of the book's theme at a 1400 px window (measured in Chromium)
CELL_PADDING_PX = 16.0  # 8 px on each side of a cell
CELL_BORDER_PX = 1.0  # each cell's border (collapsed)
BORDER_PX = 1.0  # the table's outer border
CODE_FONT_PX = 14.0  # inline code, and code output blocks (``pre``), in the theme's monospace font
BREAK_AFTER = "-–—/"  # a line may break after these characters (and at every space)


class Raw(str):
    """A table cell that is already Markdown (not escaped)."""


def md_escape(text: str) -> str:
    """Backslash-escape ASCII punctuation so that a table cell such as '|', '*', '`' or '$' shows literally."""
    return "".join("\\" + ch if (ch.isascii() and not ch.isalnum() and ch not in " \t") else ch for ch in text)


def format_number(value: float, digits: int = 4) -> str:
    """A float to ``digits`` significant digits, whole floats with thousands separators, the minus as U+2212."""
    if value.is_integer() and abs(value) < 1e15:  # a count held as a float: shown whole, like an int
        return f"{int(value):,}".replace("-", MINUS)
    return f"{value:.{digits}g}".replace("-", MINUS)  # digits, ".", "e", "−": one unbreakable word


def format_cell(value: Any, digits: int = 4) -> str:
    """One cell's Markdown: see the module docstring."""
    if isinstance(value, Raw):
        return str(value)
    if value is None:
        return MISSING
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # NumPy / torch scalar
        value = value.item()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Integral):
        return f"{value:,}".replace("-", MINUS)
    if isinstance(value, Real):
        value = float(value)
        return MISSING if math.isnan(value) else format_number(value, digits)
    if isinstance(value, (list, tuple)):
        return ", ".join(format_cell(v, digits) for v in value)
    return md_escape(str(value))


def markdown_table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None,
                   digits: int = 4) -> str:
    """A MyST/GFM table of ``rows`` under ``headers`` (cells by :func:`format_cell`)."""
    align = list(align or ["---"] * len(headers))
    lines = ["| " + " | ".join(format_cell(h, digits) for h in headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(format_cell(v, digits) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# --- how wide a table must be -------------------------------------------------------------

@lru_cache(maxsize=None)
def _font(family: str, weight: str):
    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font

    return FT2Font(findfont(FontProperties(family=family, weight=weight)))


def text_width(text: str, px: float = TABLE_FONT_PX, *, bold: bool = False, mono: bool = False) -> float:
    """Width in CSS pixels of ``text`` on one line, in DejaVu Sans (Mono) at ``px``: the sum of the
    characters' unhinted advances, as a browser lays text out (at fractional positions)."""
    return sum(advance_width(ch, px, bold=bold, mono=mono) for ch in text)


def advance_width(char: str, px: float = TABLE_FONT_PX, *, bold: bool = False, mono: bool = False) -> float:
    """How far one character moves the pen, in CSS pixels (matplotlib's metrics of the font's own)."""
    if not char.isprintable() and not char.isspace():
        return 0.0  # a control character takes no room on the page
    font = _font("DejaVu Sans Mono" if mono else "DejaVu Sans", "bold" if bold else "normal")
    font.set_size(px, 72)  # points at 72 dpi are pixels
    try:
        return font.load_char(ord(char)).linearHoriAdvance / 65536
    except RuntimeError:  # a glyph the font lacks: the browser falls back to another font, about an em wide
        return float(px)


def math_width(tex: str, px: float = TABLE_FONT_PX) -> float:
    """Width in CSS pixels of inline TeX by matplotlib's mathtext at ``px`` (an estimate of MathJax's;
    commands mathtext does not know fall back to the width of the source's letters)."""
    from matplotlib.mathtext import MathTextParser

    try:
        return MathTextParser("path").parse(f"${tex}$", dpi=72, prop=_math_prop(px)).width
    except (ValueError, KeyError, RuntimeError):
        return text_width(re.sub(r"\\[A-Za-z]+|[{}^_]", "", tex), px)


def _math_prop(px: float):
    from matplotlib.font_manager import FontProperties

    return FontProperties(size=px)


_SEGMENT = re.compile(r"`([^`]*)`|\$([^$]+)\$")
_UNESCAPE = re.compile(r"\\(.)")


def cell_words(markdown: str) -> list[tuple[str, str]]:
    """The unbreakable words of one cell's Markdown, as (kind, text) with kind 'text', 'code' or 'math':
    text split at spaces, soft hyphens (``&shy;``, <wbr>) and after :data:`BREAK_AFTER`, code at spaces, maths
    whole; escapes and
    emphasis marks removed, a link reduced to its text."""
    words: list[tuple[str, str]] = []
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # [text](target) shows as text
    position = 0
    for match in list(_SEGMENT.finditer(text)) + [None]:
        plain = text[position:match.start() if match else len(text)]
        plain = _UNESCAPE.sub(r"\1", re.sub(r"(?<!\\)[*_]{1,2}", "", plain))
        plain = re.sub(r"&shy;|\u00ad|<wbr\s*/?>", " ", plain)  # a soft hyphen or <wbr> is a place to break
        for chunk in plain.split():
            words += [("text", w) for w in re.findall(rf"[^{re.escape(BREAK_AFTER)}]*[{re.escape(BREAK_AFTER)}]|"
                                                      rf"[^{re.escape(BREAK_AFTER)}]+", chunk) if w]
        if match is None:
            break
        if match.group(1) is not None:
            words += [("code", w) for w in match.group(1).split()]
        else:
            words.append(("math", match.group(2)))
        position = match.end()
    return words


def word_width(kind: str, word: str, *, bold: bool = False) -> float:
    if kind == "code":
        return text_width(word, CODE_FONT_PX, mono=True)
    if kind == "math":
        return math_width(word)
    return text_width(word, bold=bold)


@dataclass(frozen=True)
class TableWidth:
    """How narrow a browser can make a table: ``min_width_px`` (the sum over columns of the widest
    unbreakable word plus padding, and the borders), ``columns`` (each column's share) and
    ``widest`` (each column's widest word)."""

    min_width_px: float
    columns: list[float] = field(default_factory=list)
    widest: list[str] = field(default_factory=list)

    def fits(self, column_px: float | None = None) -> bool:
        return self.min_width_px <= (column_px or PAGE_PX)

    def message(self, name: str) -> str:
        worst = sorted(zip(self.columns, self.widest), reverse=True)[:3]
        shown = ", ".join(f"{w!r} ({px:.0f} px)" for px, w in worst)
        return (f"table {name!r}: at least {self.min_width_px:.0f} px wide, wider than the page's column "
                f"({PAGE_PX} px): {len(self.columns)} columns, the widest words {shown}. Use fewer columns, "
                "shorter headers, or split or transpose the table.")


def markdown_tables(markdown: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header cells, body rows) of every GFM table in ``markdown``, cells as Markdown."""
    lines = [line.strip() for line in markdown.splitlines()]
    tables, i = [], 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.fullmatch(r"\|(:?-+:?\|)+", lines[i + 1].replace(" ", "")):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", lines[i].strip("|"))])
                i += 1
            tables.append((rows[0], rows[2:]))
        else:
            i += 1
    return tables


def parse_markdown_table(markdown: str) -> tuple[list[str], list[list[str]]] | None:
    """(header cells, body rows) of the first GFM table in ``markdown``; None if it holds none."""
    tables = markdown_tables(markdown)
    return tables[0] if tables else None


def min_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> TableWidth:
    """The narrowest width a browser can give the table of these cells (Markdown; see the module docstring)."""
    n = max([len(headers)] + [len(r) for r in rows])
    columns, widest = [0.0] * n, [""] * n
    for r, cells in enumerate([list(headers)] + [list(row) for row in rows]):
        for c, cell in enumerate(cells):
            for kind, word in cell_words(str(cell)):
                if kind == "code" and r > 0:  # _static/book.css: `table td code` may break anywhere
                    w = max(word_width(kind, ch) for ch in word)
                else:
                    w = word_width(kind, word, bold=r == 0)
                if w > columns[c]:
                    columns[c], widest[c] = w, word
    columns = [w + CELL_PADDING_PX + CELL_BORDER_PX for w in columns]
    return TableWidth(round(sum(columns) + BORDER_PX, 1), [round(w, 1) for w in columns], widest)


def markdown_width(markdown: str) -> TableWidth | None:
    """:func:`min_width` of the first Markdown table in ``markdown`` (None if it holds none)."""
    parsed = parse_markdown_table(markdown)
    return None if parsed is None else min_width(*parsed)


_measured: dict[str, dict] = {}  # this kernel's tables, by name, as recorded in meta["tables"]


def record_width(name: str, width: TableWidth) -> None:
    """Keep ``width`` in the chapter's record (``meta["tables"][name]``) and warn if it exceeds the column.
    A kernel runs one chapter, so the tables measured in it are that chapter's."""
    _measured[name] = {"min_width_px": width.min_width_px, "columns": len(width.columns), "fits": width.fits(),
                       "column_px": PAGE_PX}
    record_meta(tables=dict(_measured))
    if not width.fits():
        warnings.warn(width.message(name), stacklevel=3)


def table(rows: Iterable[Mapping[str, Any]] | Any, digits: int = 4, index: bool | None = None, *,
          name: str | None = None, headers: Sequence[Any] | None = None, align: Sequence[str] | None = None):
    """Rows displayed as a Markdown table, measured against the page's column.

    ``rows`` is a list of dicts (columns in order of first appearance), a pandas DataFrame
    (its index shown as the first column when it is not the default 0, 1, 2, …, or when ``index``
    says so), or a list of sequences under ``headers``. ``align`` gives each column's GFM alignment
    (``"---"``, ``":--"``, ``"--:"``). ``name`` names the table in the record (default
    ``table-<n>``, numbered in the order the chapter shows them). A table wider than the page's column is
    shown as consecutive tables that fit, each repeating the first column (:func:`column_groups`). Returns an
    ``IPython.display.Markdown``, so a cell ending in ``table(...)`` shows it.
    """
    from IPython.display import Markdown

    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a DataFrame
        frame = rows
        if index is None:
            index = not (frame.index.dtype.kind == "i" and list(frame.index) == list(range(len(frame))))
        head = ([frame.index.name or ""] if index else []) + [str(c) for c in frame.columns]
        body = [([i] if index else []) + list(r) for i, r in zip(frame.index, frame.itertuples(index=False))]
    elif headers is not None:
        head, body = list(headers), [list(r) for r in rows]
    else:
        rows = list(rows)
        head = list(dict.fromkeys(k for r in rows for k in r))
        body = [[r.get(h) for h in head] for r in rows]
    if not head:
        raise ValueError("table: no columns to show (empty rows and no headers)")
    markdown = markdown_table(head, body, align=align, digits=digits)
    width = markdown_width(markdown)
    if not width.fits():
        parts = column_groups(width)
        if len(parts) > 1:
            markdown = "\n\n".join(
                markdown_table([head[c] for c in part], [[row[c] for c in part] for row in body],
                               align=None if align is None else [align[c] for c in part], digits=digits)
                for part in parts)
            width = max((markdown_width(m) for m in markdown.split("\n\n")), key=lambda w: w.min_width_px)
    record_width(name or f"table-{len(_measured) + 1}", width)
    return Markdown(markdown)


def column_groups(width: TableWidth, column_px: float | None = None) -> list[list[int]]:
    """How a table too wide for the column is shown as consecutive tables that fit: the columns after the
    first taken in order, as many as fit beside the first (the rows' label, repeated in every part). One group
    when the table fits, or when even one column beside the label does not (the caller then warns)."""
    limit = column_px or PAGE_PX
    label, rest = width.columns[0], list(enumerate(width.columns))[1:]
    if width.min_width_px <= limit or not rest:
        return [list(range(len(width.columns)))]
    groups, current, used = [], [], BORDER_PX + label
    for c, px in rest:
        if current and used + px > limit:
            groups.append([0] + current)
            current, used = [], BORDER_PX + label
        current.append(c)
        used += px
    groups.append([0] + current)
    return groups
