"""Tables a reader can read: Markdown (wraps at the page's width), numbers formatted whole.

A pandas DataFrame rendered as HTML keeps every float's full precision, breaks long values
mid-number at the page's edge and shows missing values as ``NaN``. :func:`table` renders
the same rows as a MyST table instead: floats to ``digits`` significant digits (``2.22e-16``,
never split), integers (and whole floats) with thousands separators, missing values (None, NaN) as ``—``, and
text escaped so that ``|``, ``*`` or ``$`` show literally (a :class:`Raw` cell is kept as
Markdown).
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable, Mapping, Sequence

MISSING = "—"


class Raw(str):
    """A table cell that is already Markdown (not escaped)."""


def md_escape(text: str) -> str:
    """Backslash-escape ASCII punctuation so that a table cell such as '|', '*', '`' or '$' shows literally."""
    return "".join("\\" + ch if (ch.isascii() and not ch.isalnum() and ch not in " \t") else ch for ch in text)


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
        return f"{value:,}"
    if isinstance(value, Real):
        value = float(value)
        if math.isnan(value):
            return MISSING
        if value.is_integer() and abs(value) < 1e15:  # a count held as a float: shown whole, like an int
            return f"{int(value):,}"
        return f"{value:.{digits}g}"  # digits, ".", "e", "-": inert in a table cell
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


def table(rows: Iterable[Mapping[str, Any]] | Any, digits: int = 4, index: bool | None = None):
    """Rows (a list of dicts, or a pandas DataFrame) displayed as a Markdown table.

    A DataFrame's index is shown as the first column when it is not the default
    0, 1, 2, … (or when ``index`` says so). Returns an ``IPython.display.Markdown``, so a
    cell ending in ``table(...)`` shows it.
    """
    from IPython.display import Markdown

    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a DataFrame
        frame = rows
        if index is None:
            index = not (frame.index.dtype.kind == "i" and list(frame.index) == list(range(len(frame))))
        headers = ([frame.index.name or ""] if index else []) + [str(c) for c in frame.columns]
        body = [([i] if index else []) + list(r) for i, r in zip(frame.index, frame.itertuples(index=False))]
        return Markdown(markdown_table(headers, body, digits=digits))
    rows = list(rows)
    headers = list(dict.fromkeys(k for r in rows for k in r))
    return Markdown(markdown_table(headers, [[r.get(h) for h in headers] for r in rows], digits=digits))
