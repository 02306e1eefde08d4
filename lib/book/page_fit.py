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
# 16 px font) are estimated from the chapter's source by :func:`equation_width`.

OUTPUT_PADDING_PX = 32.0
MATHJAX_DISPLAY_PX = 20.368  # the display equations' font size in Chromium (16 px × MathJax's x-height match)
MATHTEXT_TO_MATHJAX = 1.2  # mathtext underestimates MathJax's width by 6–19% on the book's equations: an upper estimate


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
    (r"\\operatorname\*\{([^}]*)\}", r"\\operatorname{\1}"), (r"\\tfrac", r"\\frac"), (r"\\[lr]Vert", r"\\Vert"),
    (r"\\[lr]vert", r"|"), (r"\\(?:big|Big|bigg|Bigg)[lr]?", ""), (r"\\bmod", r"\\mathrm{mod}"),
    (r"\\KL\b", r"\\mathrm{KL}"), (r"\\R\b", r"\\mathbb{R}"), (r"\\(?:tag|label)\{[^}]*\}", ""),
    (r"\\(?:nonumber|displaystyle|limits)", ""),
    (r"\\(mathbb|mathrm|mathcal|mathbf|mathsf|mathit)\s*([A-Za-z0-9])", r"\\\1{\2}"),  # \mathbb E: \mathbb{E}
]


def equation_lines(tex: str) -> list[str]:
    """The lines of a display equation as typeset: environment wrappers removed, split at ``\\\\``,
    alignment marks ``&`` dropped."""
    body = re.sub(_ENVIRONMENTS, "", tex)
    return [" ".join(line.replace("&", " ").split()) for line in re.split(r"\\\\", body) if line.strip()]


def line_width(tex: str, px: float = MATHJAX_DISPLAY_PX) -> float:
    """An upper estimate of one typeset line's width in CSS pixels: matplotlib's mathtext at MathJax's
    display size times :data:`MATHTEXT_TO_MATHJAX`, after spelling the commands mathtext lacks its way;
    where mathtext still cannot parse the line, 0.6 em per visible character of the source."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import MathTextParser

    spelled = tex
    for pattern, replacement in _MATHTEXT_SPELLING:
        spelled = re.sub(pattern, replacement, spelled)
    try:
        width = MathTextParser("path").parse(f"${spelled}$", dpi=72, prop=FontProperties(size=px)).width
    except (ValueError, KeyError, RuntimeError):
        visible = re.sub(r"\\[A-Za-z]+|[{}^_\\\s]", "", tex)
        width = 0.6 * px * len(visible) / MATHTEXT_TO_MATHJAX
    return MATHTEXT_TO_MATHJAX * width


def equation_width(tex: str) -> float:
    """An upper estimate of a display equation's width: its widest line (:func:`line_width`)."""
    return max((line_width(line) for line in equation_lines(tex)), default=0.0)


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
