"""What a page shows that does not fit the column: printed lines, stderr, tables, display equations.

Each check is run on small hand-made notebooks and sources, both ways (a case that fits and a near
case that does not)."""
import json

import pytest

from lib.book import page_fit
from lib.book.figures import PAGE_PX


def notebook(*outputs_per_cell) -> dict:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# A page"}]
    for outputs in outputs_per_cell:
        cells.append({"cell_type": "code", "metadata": {}, "source": "x", "execution_count": 1, "outputs": outputs})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def markdown(text, mime="text/markdown"):
    return {"output_type": "display_data", "metadata": {}, "data": {mime: text, "text/plain": "<Markdown>"}}


def write(folder, name, nb):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


def test_a_code_output_line_fits_85_characters_of_dejavu_sans_mono_at_14_px():
    """1233/2048 em per character at 14 px, 16 px of padding on each side: (756 - 32) / 8.43 = 85.9."""
    assert page_fit.output_char_px() == pytest.approx(14 * 1233 / 2048, abs=0.01)
    assert page_fit.output_chars() == 85
    assert page_fit.OUTPUT_PADDING_PX + 85 * page_fit.output_char_px() <= PAGE_PX < (
        page_fit.OUTPUT_PADDING_PX + 86 * page_fit.output_char_px())


def test_printed_lines_stderr_and_errors_are_listed_both_ways(tmp_path):
    fits, too_long = "x" * 85, "y" * 86
    nb = notebook([stream(fits + "\n" + too_long + "\nshort\n")], [stream("careful\n", "stderr")],
                  [{"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}],
                  [stream("\t" * 11 + "z\n")])  # tabs expand to 8 columns: 89 characters
    write(tmp_path, "chapters/a.ipynb", nb)
    found = page_fit.page_problems(tmp_path)
    assert [(p.page, p.where, p.kind) for p in found] == [
        ("chapters/a.ipynb", "cell 1", "stream"), ("chapters/a.ipynb", "cell 2", "stderr"),
        ("chapters/a.ipynb", "cell 3", "stderr"), ("chapters/a.ipynb", "cell 4", "stream")]
    assert found[0].text == too_long and found[0].width_px == pytest.approx(32 + 86 * page_fit.output_char_px(), abs=0.1)
    assert found[1].text == "careful" and found[1].width_px == 0 and found[2].text == "ValueError: bad"
    assert "cell 1: stream 757 px > 756 px" in str(found[0])
    wide = "語" * 43  # a wide character takes two columns: 86
    write(tmp_path, "chapters/b.ipynb", notebook([stream(wide + "\n" + "語" * 42 + "\n")]))
    assert [p.text for p in page_fit.notebook_problems(tmp_path / "chapters/b.ipynb")] == [wide]


def test_tables_wider_than_the_column_are_listed_in_markdown_glued_and_html_outputs(tmp_path):
    narrow = "| a | b |\n| --- | --- |\n| 1 | 2 |"
    wide = "| " + " | ".join(f"column{i}" for i in range(12)) + " |\n|" + "---|" * 12 + "\n|" + " 1.0 |" * 12
    html = "<table><tr><th>" + "</th><th>".join(f"header{i}" for i in range(12)) + "</th></tr><tr>" + \
           "<td>1</td>" * 12 + "</tr></table>"
    nb = notebook([markdown("Some text, then\n\n" + narrow + "\n\nand\n\n" + wide)],
                  [markdown(wide, "application/papermill.record/text/markdown")],
                  [markdown(html, "text/html")], [markdown(narrow)])
    write(tmp_path, "c.ipynb", nb)
    found = page_fit.page_problems(tmp_path)
    assert [(p.where, p.kind) for p in found] == [("cell 1", "table"), ("cell 2", "table"), ("cell 3", "table")]
    assert found[0].text.startswith("column0 | column1") and found[0].width_px > PAGE_PX
    assert found[2].text == "HTML table"
    assert page_fit.page_problems(tmp_path / "nowhere") == []


def test_executed_notebooks_are_found_in_a_build_or_an_out_folder(tmp_path):
    write(tmp_path, "chapters/a.ipynb", notebook())
    write(tmp_path, "chapters/appendix/report.ipynb", notebook())
    write(tmp_path, "chapters/.ipynb_checkpoints/a-checkpoint.ipynb", notebook())
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "a.json").write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in page_fit.executed_notebooks(tmp_path)] == [
        "chapters/a.ipynb", "chapters/appendix/report.ipynb"]


# --- display equations -------------------------------------------------------------------------

SOURCE = """# Title

$$
a = b
$$

Text with $x$ inline.

```{code-cell} ipython3
s = "$$ not an equation $$"
```

$$ c = d $$

```{math}
:label: eq-one
e = f
```

````markdown
$$
ignored = inside a code block
$$
````
"""


def test_display_equations_are_read_from_a_source_with_their_lines():
    assert page_fit.display_equations(SOURCE) == [(3, "\na = b\n"), (13, " c = d "), (15, "e = f")]


def test_equation_lines_drop_environments_and_alignment_marks():
    tex = r"\begin{aligned} a &= b + c \\ &\quad + d \end{aligned}"
    assert page_fit.equation_lines(tex) == ["a = b + c", r"\quad + d"]
    assert page_fit.equation_lines(r"\begin{split} x \\ y \\ \end{split}") == ["x", "y"]


LONG = (r"\sigma_\alpha' = P[\alpha,\alpha],\qquad u_\alpha' = \sum_{\beta\ne\alpha}\frac{\sigma_\alpha "
        r"P[\beta,\alpha]+\sigma_\beta P[\alpha,\beta]}{\sigma_\alpha^2-\sigma_\beta^2}\,u_\beta,\qquad v_\alpha' = "
        r"\sum_{\beta\ne\alpha}\frac{\sigma_\beta P[\beta,\alpha]+\sigma_\alpha P[\alpha,\beta]}"
        r"{\sigma_\alpha^2-\sigma_\beta^2}\,v_\beta,")


def test_an_equation_is_estimated_from_above_and_broken_lines_fit():
    """Chromium typesets LONG (the Examples chapter's first-order formulas) 824 px wide: the estimate is an
    upper one, within the 15% by which mathtext may exceed MathJax times the 1.1 safety factor."""
    assert 824 <= page_fit.equation_width(LONG) <= 824 * 1.1 * 1.15
    assert page_fit.equation_width(LONG) > PAGE_PX
    broken = LONG.replace(r",\qquad u", r", \\ u").replace(r",\qquad v", r", \\ v")
    broken = r"\begin{aligned}" + broken + r"\end{aligned}"
    assert page_fit.equation_width(broken) < PAGE_PX
    assert page_fit.equation_width(broken) == pytest.approx(max(page_fit.line_width(line)
                                                            for line in page_fit.equation_lines(broken)))
    short = r"P(y\mid x)=\frac{c(xy)+a}{c(x)+a\,N_Y},"  # 216 px in Chromium
    assert 216 <= page_fit.equation_width(short) <= 216 * 1.1 * 1.15


# The Logit-rank chapter's average KL and Fact A.2 as it stood: Chromium typesets it 801 px wide, past the
# column. No line is that wide (697 and 648 px estimated): the aligned columns are, the long left side of
# the second row beside the long right side of the first. And mathtext could not parse either line
# (\frac1{...} with an unbraced argument, \le), so both were counted at 0.6 em a character.
KL_BEFORE = r"""
\begin{aligned}
D^{\rm avg}_{\rm KL}(L,A)
&=\frac1{|\mathcal H|\,|\mathcal F|}\sum_{h\in\mathcal H}\sum_{f\in\mathcal F}
D_{\rm KL}\big(\mathrm{softmax}\,L_{h,f}\,\big\|\,\mathrm{softmax}\,A_{h,f}\big),\\
\sum_{h,f}D_{\rm KL}\big(\mathrm{softmax}\,L_{h,f}\,\big\|\,\mathrm{softmax}\,A_{h,f}\big)
&\le\tfrac12\,\lVert L-A\rVert_F^2\qquad\text{(Fact A.2).}
\end{aligned}
"""


def test_the_cut_average_kl_equation_is_reported(tmp_path):
    assert 801 <= page_fit.equation_width(KL_BEFORE) <= 801 * 1.1 * 1.15
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: chapters/a\n")
    (tmp_path / "chapters" / "a.md").write_text("# A\n\n$$" + KL_BEFORE + "$$\n")
    found = page_fit.equation_problems(tmp_path)
    assert [(p.where, p.kind) for p in found] == [("line 3", "equation")] and found[0].width_px > PAGE_PX


def test_aligned_columns_add_up_across_rows():
    """An aligned equation is as wide as its columns: the widest left cell plus the widest right cell."""
    left, right = r"\sum_{i=1}^{n} a_i b_i c_i d_i e_i", r"= \sum_{j=1}^{n} x_j y_j z_j w_j"
    crossed = rf"\begin{{aligned}} {left} &= u \\ v &{right} \end{{aligned}}"
    widths = [page_fit.line_width(line) for line in page_fit.equation_lines(crossed)]
    assert page_fit.equation_width(crossed) == pytest.approx(page_fit.line_width(left) + page_fit.line_width(right))
    assert page_fit.equation_width(crossed) > max(widths) * 1.3
    # two column pairs: the space MathJax leaves between them (2 em) is counted
    pairs = r"\begin{aligned} a &= b & c &= d \end{aligned}"
    assert page_fit.equation_width(pairs) == pytest.approx(
        sum(page_fit.line_width(c) for c in ["a", "= b", "c", "= d"]) + 2 * page_fit.MATHJAX_DISPLAY_PX)
    assert page_fit.equation_lines(r"a \& b") == [r"a \& b"]  # an escaped ampersand is no alignment mark


def test_tex_mathtext_cannot_parse_is_spelled_its_way():
    """Unbraced fraction arguments, \\le and \\ge, \\xrightarrow and \\underbrace are measured by mathtext,
    not counted; fractions in display style (full-size numerator and denominator, as MathJax sets them)."""
    assert page_fit._mathtext_spelling(r"\frac1{|H|}\tfrac12 \frac ab \frac\alpha2") == \
        r"\dfrac{1}{|H|}\dfrac{1}{2} \dfrac{a}{b} \dfrac{\alpha}{2}"
    assert page_fit._mathtext_spelling(r"\frac{\frac12}{x}") == r"\dfrac{\dfrac{1}{2}}{x}"
    assert page_fit._mathtext_spelling(r"a\le b\ge c \left( d \right)") == r"a\leq b\geq c \left( d \right)"
    assert page_fit._mathtext_spelling(r"\underbrace{x+y}_{\text{tail}} + \underbrace{z}") == \
        r"\underset{\text{tail}}{x+y} + {z}"
    from matplotlib.mathtext import MathTextParser
    for tex in [r"\frac1{|\mathcal H|}\le\tfrac12", r"a\xrightarrow{n\to\infty}b", r"\underbrace{x+y}_{\text{tail}}"]:
        MathTextParser("path").parse(f"${page_fit._mathtext_spelling(tex)}$")  # parses: measured, not counted
    assert page_fit.line_width(r"\frac{a}{b}") == page_fit.line_width(r"\dfrac{a}{b}")


def test_commands_mathtext_lacks_are_spelled_its_way_or_counted():
    assert page_fit.line_width(r"\lVert x\rVert + \tfrac{1}{2} + \operatorname*{arg\,min}_p + \mathbb E[x]") > 0
    assert page_fit.line_width(r"\mathbb E[x]") == pytest.approx(page_fit.line_width(r"\mathbb{E}[x]"))
    unknown = page_fit.line_width(r"\somethingelse{abcdefghij}")  # the fallback: 0.6 em per visible character
    assert unknown == pytest.approx(0.6 * page_fit.MATHJAX_DISPLAY_PX * 10, rel=1e-6)
    symbols = page_fit.line_width(r"\somethingelse{abcdefghij} \unknownsymbol")  # a symbol counts as one
    assert symbols == pytest.approx(0.6 * page_fit.MATHJAX_DISPLAY_PX * 11, rel=1e-6)
    assert page_fit.line_width(r"a \qquad b") > page_fit.line_width(r"a \quad b")


def test_equation_problems_scan_the_pages_of_a_toc(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: chapters/a\nchapters:\n  - file: chapters/b\n")
    (tmp_path / "chapters" / "a.md").write_text("# A\n\n$$\n" + LONG + "\n$$\n")
    (tmp_path / "chapters" / "b.md").write_text("# B\n\n$$\nx = y\n$$\n")
    found = page_fit.equation_problems(tmp_path)
    assert [(p.page, p.where, p.kind) for p in found] == [("chapters/a.md", "line 3", "equation")]
    assert found[0].width_px > PAGE_PX and found[0].text.startswith(r"\sigma_\alpha'")
    assert page_fit.equation_problems(tmp_path, ["chapters/b"]) == []
