"""What a page shows that does not fit the reader's column.

:func:`page_problems` lists, from the executed notebooks of a build (:data:`lib.book.pages.MIRROR_DIR`)
or of a ``run --out`` folder, every stderr output block, every printed line wider than the
column in monospace and every table wider than the column (:mod:`lib.book.tables` measures it);
:func:`equation_problems` estimates the width of every display equation of the chapters'
sources. ``scripts/screenshots.py`` checks the built pages themselves in Chromium.
"""
from __future__ import annotations

import html as html_module
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from .. import REPO_ROOT
from .figures import PAGE_PX
from .pages import MIRROR_DIR, source_path, toc_files
from .tables import CODE_FONT_PX, advance_width, markdown_tables, min_width

# --- what a page shows that does not fit its column -------------------------------------------
#
# The article column is ``lib.book.figures.PAGE_PX`` = 756 px wide at a 1400 px window. Code output
# blocks (``pre``) are set in the theme's monospace font, DejaVu Sans Mono at 14 px in Chromium on
# Linux, 8.43 px per character, inside 16 px of padding on each side, and never wrap: a printed line
# longer than ``output_chars()`` = 85 characters runs past the column. A stderr block is a warning or
# a traceback the reader was not meant to see. Tables are measured by :mod:`lib.book.tables`.
# Display equations (MathJax at 20.4 px: MathJax scales its fonts to the x-height of the body's
# 16 px font) are estimated from the chapter's source by :func:`equation_width`: matplotlib's mathtext,
# with the commands it lacks spelled its way and every fraction in display style, comes within -6% to +15%
# of Chromium's MathJax on every display equation of the book (measured at 20.4 px); an aligned equation
# is as wide as its columns together, each as wide as its widest cell.

OUTPUT_PADDING_PX = 32.0
MATHJAX_DISPLAY_PX = 20.368  # the display equations' font size in Chromium (16 px × MathJax's x-height match)
MATHTEXT_TO_MATHJAX = 1.1  # mathtext falls short of MathJax's width by at most 6% on the book's equations: an upper estimate


@dataclass(frozen=True)
class PageProblem:
    """One thing on a page that does not fit the column or should not be there: its page (the
    notebook or source, relative to the folder searched), the cell (or source line), the kind
    ('stderr', 'stream', 'table' or 'equation'), its width in CSS pixels (0 for stderr) and the
    start of its text."""

    page: str
    where: str
    kind: str
    width_px: float
    text: str

    def __str__(self) -> str:
        size = f" {self.width_px:.0f} px > {PAGE_PX} px" if self.width_px else ""
        return f"{self.page} {self.where}: {self.kind}{size}: {self.text[:70]!r}"


def output_char_px() -> float:
    """The width of one character of a code output block, in CSS pixels (DejaVu Sans Mono, 14 px)."""
    return advance_width("0", CODE_FONT_PX, mono=True)


def output_chars() -> int:
    """How many characters of a printed line fit the column (85 at the book's 756 px)."""
    return int((PAGE_PX - OUTPUT_PADDING_PX) // output_char_px())


def _line_width(line: str) -> float:
    chars = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line.expandtabs(8))
    return OUTPUT_PADDING_PX + chars * output_char_px()


def _html_table_width(html: str):
    """:func:`lib.book.tables.min_width` of an HTML table's cell texts (a DataFrame's ``to_html``)."""
    rows = []
    for row in re.findall(r"<tr.*?>(.*?)</tr>", html, flags=re.S):
        cells = re.findall(r"<t[hd].*?>(.*?)</t[hd]>", row, flags=re.S)
        rows.append([html_module.unescape(re.sub(r"<.*?>", "", c)).strip() for c in cells])
    return min_width(rows[0], rows[1:]) if rows else None


def notebook_problems(path: Path, root: Path | None = None) -> list[PageProblem]:
    """Every stderr output block, printed line wider than the column, and table wider than the
    column in one executed notebook (tables in Markdown or HTML outputs, glued ones included)."""
    page = str(path.relative_to(root)) if root else path.name
    problems = []
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    for i, cell in enumerate(cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            where = f"cell {i}"
            if output.get("output_type") == "stream":
                text = "".join(output.get("text", ""))
                if output.get("name") == "stderr":
                    problems.append(PageProblem(page, where, "stderr", 0.0, text.strip()))
                    continue
                for line in text.splitlines():
                    if _line_width(line) > PAGE_PX:
                        problems.append(PageProblem(page, where, "stream", round(_line_width(line), 1), line))
            elif output.get("output_type") == "error":
                problems.append(PageProblem(page, where, "stderr", 0.0, f"{output.get('ename')}: {output.get('evalue')}"))
            for mime, data in (output.get("data") or {}).items():
                text = "".join(data) if isinstance(data, list) else str(data)
                if mime.endswith("text/markdown"):
                    for headers, rows in markdown_tables(text):
                        width = min_width(headers, rows)
                        if not width.fits():
                            problems.append(PageProblem(page, where, "table", width.min_width_px, " | ".join(headers)))
                elif mime.endswith("text/html") and "<table" in text:
                    width = _html_table_width(text)
                    if width is not None and not width.fits():
                        problems.append(PageProblem(page, where, "table", width.min_width_px, "HTML table"))
    return problems


def executed_notebooks(folder: Path | None = None) -> list[Path]:
    """The executed notebooks of a build (``_build/src``) or of a ``run --out`` folder, sorted."""
    folder = Path(folder) if folder else MIRROR_DIR
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def page_problems(folder: Path | None = None) -> list[PageProblem]:
    """:func:`notebook_problems` of every executed notebook under ``folder`` (default ``_build/src``)."""
    folder = Path(folder) if folder else MIRROR_DIR
    return [p for path in executed_notebooks(folder) for p in notebook_problems(path, folder)]


# --- display equations -------------------------------------------------------------------------

_ENVIRONMENTS = r"\\(?:begin|end)\{(?:aligned|align\*?|split|gathered|gather\*?|equation\*?|multline\*?)\}"
_MATHTEXT_SPELLING = [  # what mathtext spells differently (or not at all), as (pattern, replacement)
    (r"\\operatorname\*\{([^}]*)\}", r"\\operatorname{\1}"), (r"\\[lr]Vert", r"\\Vert"),
    (r"\\[lr]vert", r"|"), (r"\\(?:big|Big|bigg|Bigg)[lr]?", ""), (r"\\bmod", r"\\mathrm{mod}"),
    (r"\\KL\b", r"\\mathrm{KL}"), (r"\\R\b", r"\\mathbb{R}"), (r"\\(?:tag|label)\{[^}]*\}", ""),
    (r"\\(?:nonumber|displaystyle|limits)", ""),
    (r"\\(mathbb|mathrm|mathcal|mathbf|mathsf|mathit)\s*([A-Za-z0-9])", r"\\\1{\2}"),  # \mathbb E: \mathbb{E}
    (r"\\(le|ge)(?![A-Za-z])", r"\\\1q"),  # \le, \ge: mathtext knows only \leq, \geq
    (r"\\xrightarrow\{([^}]*)\}", r"\\overset{\1}{\\longrightarrow}"),
]
# MathJax sets a display's fractions in display style, numerator and denominator at full size; mathtext's
# \frac shrinks them as in text: every fraction is measured as \dfrac (an upper estimate for nested ones).
_FRACTIONS = re.compile(r"\\[dt]?frac(?![A-Za-z])")
_ALIGNMENT_GAP_EM = 2.0  # MathJax's space between the column pairs of aligned / align (columnspacing 0em 2em)


def _argument(tex: str, i: int) -> tuple[str, int]:
    """The TeX argument starting at ``tex[i]`` (spaces skipped): a braced group, a control word or one
    character; returns it braced and the index after it."""
    while i < len(tex) and tex[i].isspace():
        i += 1
    if i >= len(tex):
        return "{}", i
    if tex[i] == "{":
        depth, j = 0, i
        while j < len(tex):
            depth += {"{": 1, "}": -1}.get(tex[j], 0)
            if depth == 0:
                return tex[i:j + 1], j + 1
            j += 1
        return tex[i:] + "}", len(tex)
    if tex[i] == "\\":
        m = re.match(r"\\(?:[A-Za-z]+|.)", tex[i:])
        return "{" + m.group(0) + "}", i + m.end()
    return "{" + tex[i] + "}", i + 1


def _display_fractions(tex: str) -> str:
    r"""Every ``\frac``, ``\tfrac``, ``\dfrac`` as ``\dfrac{num}{den}``, its arguments braced
    (``\frac1{|H|}`` and ``\tfrac12`` are TeX that mathtext cannot parse)."""
    out, i = [], 0
    for m in _FRACTIONS.finditer(tex):
        if m.start() < i:
            continue
        num, j = _argument(tex, m.end())
        den, j = _argument(tex, j)
        out.append(tex[i:m.start()] + r"\dfrac" + _display_fractions(num) + _display_fractions(den))
        i = j
    return "".join(out) + tex[i:]


def _braces(tex: str) -> str:
    r"""``\underbrace{x}_{note}`` as ``\underset{note}{x}`` (and ``\overbrace{x}^{note}`` as
    ``\overset``), the note set under (over) its term, as MathJax sets it; a brace with no note is
    its term alone."""
    out, i = [], 0
    for m in re.finditer(r"\\(under|over)brace(?![A-Za-z])", tex):
        if m.start() < i:
            continue
        base, j = _argument(tex, m.end())
        k = j
        while k < len(tex) and tex[k].isspace():
            k += 1
        mark = "_" if m.group(1) == "under" else "^"
        if k < len(tex) and tex[k] == mark:
            note, j = _argument(tex, k + 1)
            out.append(tex[i:m.start()] + f"\\{m.group(1)}set{_braces(note)}{_braces(base)}")
        else:
            out.append(tex[i:m.start()] + _braces(base))
        i = j
    return "".join(out) + tex[i:]


def _mathtext_spelling(tex: str) -> str:
    for pattern, replacement in _MATHTEXT_SPELLING:
        tex = re.sub(pattern, replacement, tex)
    return _display_fractions(_braces(tex))


def _rows(tex: str) -> list[list[str]]:
    """The rows of a display equation as typeset, each a list of its alignment cells: environment
    wrappers removed, split at ``\\\\`` and at ``&`` (not at an escaped ``\\&``)."""
    body = re.sub(_ENVIRONMENTS, "", tex)
    rows = []
    for line in re.split(r"\\\\", body):
        if line.strip():
            rows.append([" ".join(cell.split()) for cell in re.split(r"(?<!\\)&", line)])
    return rows


def equation_lines(tex: str) -> list[str]:
    """The lines of a display equation as typeset: environment wrappers removed, split at ``\\\\``,
    alignment marks ``&`` dropped."""
    return [" ".join(" ".join(cells).split()) for cells in _rows(tex)]


def line_width(tex: str, px: float = MATHJAX_DISPLAY_PX) -> float:
    """An upper estimate of one typeset line's width in CSS pixels: matplotlib's mathtext at MathJax's
    display size times :data:`MATHTEXT_TO_MATHJAX`, after spelling the commands mathtext lacks its way
    (fractions in display style); where mathtext still cannot parse the line, 0.6 em per visible
    character of the source, a symbol command (``\\sum``, ``\\le``) counting as one."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import MathTextParser

    if not tex.strip():
        return 0.0
    try:
        width = MathTextParser("path").parse(f"${_mathtext_spelling(tex)}$", dpi=72, prop=FontProperties(size=px)).width
    except (ValueError, KeyError, RuntimeError):
        visible = re.sub(r"\\[A-Za-z]+(?![A-Za-z]|\s*\{)", "x", tex)  # a symbol: one character; \mathrm{...}: its text
        visible = re.sub(r"\\[A-Za-z]+|[{}^_\\\s]", "", visible)
        width = 0.6 * px * len(visible) / MATHTEXT_TO_MATHJAX
    return MATHTEXT_TO_MATHJAX * width


def equation_width(tex: str, px: float = MATHJAX_DISPLAY_PX) -> float:
    """An upper estimate of a display equation's width. Without alignment marks: its widest line
    (:func:`line_width`). With them (``aligned``, ``align``, ``split``): the columns are as wide as
    their widest cell, so the equation is the sum of its columns' widths and the space between column
    pairs, which can be wider than any one line (a long left side on one line, a long right side on
    another)."""
    rows = _rows(tex)
    if not rows:
        return 0.0
    if all(len(cells) == 1 for cells in rows):
        return max(line_width(cells[0], px) for cells in rows)
    n = max(len(cells) for cells in rows)
    columns = [max((line_width(cells[j], px) for cells in rows if j < len(cells)), default=0.0) for j in range(n)]
    return sum(columns) + _ALIGNMENT_GAP_EM * px * ((n - 1) // 2)


def display_equations(source: str) -> list[tuple[int, str]]:
    """(line number, TeX) of every display equation of a MyST source: ``$$ … $$`` blocks and
    ``{math}`` directives (code cells and code blocks skipped)."""
    equations, lines = [], source.splitlines()
    i, fence = 0, None
    while i < len(lines):
        stripped = lines[i].strip()
        if fence:
            fence = None if stripped == fence else fence
        elif re.match(r"^(```+|~~~+)\{math\}", stripped):
            close, start, body = re.match(r"^(```+|~~~+)", stripped).group(1), i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != close:
                if not lines[i].strip().startswith(":"):
                    body.append(lines[i])
                i += 1
            equations.append((start, "\n".join(body)))
        elif re.match(r"^(```+|~~~+)", stripped):
            fence = re.match(r"^(```+|~~~+)", stripped).group(1)
        elif stripped.startswith("$$"):
            start, body = i + 1, [stripped[2:]]
            while not (body[-1].rstrip().endswith("$$") and (len(body) > 1 or len(body[0].strip()) > 2)):
                i += 1
                if i >= len(lines):
                    break
                body.append(lines[i])
            text = "\n".join(body).rstrip()
            equations.append((start, text[:-2] if text.endswith("$$") else text))
        i += 1
    return equations


def equation_problems(root: Path = REPO_ROOT, pages: list[str] | None = None) -> list[PageProblem]:
    """Every display equation of the book's pages (``_toc.yml``, or the toc entries ``pages``) whose
    estimated width (:func:`equation_width`) exceeds the column: break it over lines with
    ``\\begin{aligned} … \\\\ … \\end{aligned}``."""
    problems = []
    for entry in pages or toc_files(root):
        path = source_path(entry, root)
        if path.suffix != ".md":
            continue
        for line, tex in display_equations(path.read_text(encoding="utf-8")):
            width = equation_width(tex)
            if width > PAGE_PX:
                problems.append(PageProblem(str(path.relative_to(root)), f"line {line}", "equation", round(width, 1),
                                            " ".join(tex.split())))
    return problems
