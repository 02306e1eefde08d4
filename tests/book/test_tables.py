"""Tables: numbers whole and short, missing values as a dash, text escaped, and measured against the column."""
import json
from pathlib import Path
import math
import warnings

import numpy as np
import pytest

from lib.book.figures import PAGE_PX
from lib.book.tables import (BORDER_PX, CELL_BORDER_PX, CELL_PADDING_PX, MINUS, MISSING, Raw, advance_width, cell_words, format_cell,
                             markdown_table, markdown_tables, markdown_width, math_width, min_width,
                             parse_markdown_table, table, text_width)


def test_cells_are_formatted_for_a_reader():
    assert format_cell(2.220446049250313e-16) == f"2.22e{MINUS}16"  # one token: never split mid-number
    assert format_cell(float("nan")) == MISSING and format_cell(None) == MISSING
    assert format_cell(np.float64(0.123456789)) == "0.1235" and format_cell(np.int64(1234567)) == "1,234,567"
    assert format_cell(True) == "yes" and format_cell("a|b") == "a\\|b" and format_cell(Raw("**b**")) == "**b**"
    assert format_cell([1, 2.5]) == "1, 2.5"
    assert format_cell(106800.0) == "106,800" and format_cell(106800.5, digits=3) == "1.07e+05"
    assert format_cell(-3) == f"{MINUS}3" and format_cell(-2.5) == f"{MINUS}2.5" and format_cell(-4.0) == f"{MINUS}4"
    assert format_cell(1.5e-300) == f"1.5e{MINUS}300" and "-" not in format_cell(-1.2345e-7)


def test_a_long_float_would_otherwise_show_all_its_digits():
    """The failing side: Python's own repr keeps 16 digits, which this module exists to avoid."""
    assert len(str(1 / 3)) > 12 and len(format_cell(1 / 3)) <= 7


def test_rows_and_dataframes_become_markdown_tables():
    import pandas as pd

    md = table([{"a": 1, "b": math.nan}, {"a": 2, "c": "x"}], name="t-rows").data.splitlines()
    assert md[0] == "| a | b | c |" and md[2] == f"| 1 | {MISSING} | {MISSING} |" and md[3] == f"| 2 | {MISSING} | x |"
    frame = pd.DataFrame({"v": [0.5, 1e-20]}, index=["p", "q"])
    lines = table(frame, name="t-frame").data.splitlines()
    assert lines[0] == "|  | v |" and lines[2] == "| p | 0.5 |" and lines[3] == f"| q | 1e{MINUS}20 |"
    plain = table(pd.DataFrame({"v": [1, 2]}), name="t-plain").data.splitlines()
    assert plain[0] == "| v |"
    assert markdown_table(["h"], [[1]], align=[":-:"]).splitlines()[1] == "| :-: |"
    with pytest.raises(ValueError, match="no columns"):
        table([])
    listed = table([[1, "x"], [2, "y"]], headers=["n", "s"], align=["--:", ":--"], name="t-lists").data.splitlines()
    assert listed == ["| n | s |", "| --: | :-- |", "| 1 | x |", "| 2 | y |"]


# --- widths ------------------------------------------------------------------------------------

def test_text_widths_follow_the_fonts_published_metrics():
    """DejaVu Sans advances a digit by 1303/2048 em and DejaVu Sans Mono every character by 1233/2048 em."""
    assert advance_width("0", 16) == pytest.approx(16 * 1303 / 2048, abs=0.01)
    assert advance_width("x", 14, mono=True) == pytest.approx(14 * 1233 / 2048, abs=0.01)
    five, ten = text_width("0" * 5), text_width("0" * 10)
    assert ten - five == pytest.approx(5 * 16 * 1303 / 2048, abs=0.5)  # five more digits, five more advances
    assert text_width("abc", bold=True) > text_width("abc") > text_width("abc", 12)
    assert text_width("") == 0.0 and text_width("iii", mono=True) == pytest.approx(text_width("MMM", mono=True), abs=1)


def test_cell_words_are_the_pieces_a_browser_cannot_break():
    assert cell_words("left-angle, r = 3") == [("text", "left-"), ("text", "angle,"), ("text", "r"), ("text", "="),
                                                ("text", "3")]
    assert cell_words("a/b–c—d") == [("text", "a/"), ("text", "b–"), ("text", "c—"), ("text", "d")]
    assert cell_words(f"1.19e{MINUS}31") == [("text", f"1.19e{MINUS}31")]  # the minus sign is no break
    assert cell_words("`a b` $x + y$ **bold** \\| [link](x.html)") == [
        ("code", "a"), ("code", "b"), ("math", "x + y"), ("text", "bold"), ("text", "|"), ("text", "link")]
    assert cell_words("") == []


def test_min_width_is_the_sum_of_each_columns_widest_word_and_padding():
    headers, rows = ["a", "bb"], [["ccc dd", "e"], ["f", "ggggg"]]
    expected = (max(text_width("a", bold=True), text_width("ccc"), text_width("f"))
                + max(text_width("bb", bold=True), text_width("e"), text_width("ggggg"))
                + 2 * (CELL_PADDING_PX + CELL_BORDER_PX) + BORDER_PX)
    width = min_width(headers, rows)
    assert width.min_width_px == pytest.approx(expected, abs=0.1)
    assert width.widest == ["ccc", "ggggg"] and len(width.columns) == 2
    assert min_width(["xx"], [["x"]]).widest == ["xx"]  # the header row counts (in bold)
    assert min_width(["x"], [["xx"]]).widest == ["xx"]


def test_min_width_reproduces_chromiums_min_content_width():
    """Two tables of the Modes chapter as Chromium lays them out in the book's theme at their narrowest
    (min-content; measured with scripts/screenshots.py's browser): 387.6 and 348.8 px."""
    first = ("| language | \\|Σ\\| | hidden states | language condition \\(last\\, first position\\) | min q |\n"
             "| --- | --- | --- | --- | --- |\n| Markov chain | 4 | 16 | 1.11e-16 | 1.27e-07 |\n"
             "| HMM | 4 | 6 | 1.11e-16 | 6.95e-05 |\n| planted | 15 | 11 | 2.78e-17 | 0 |\n"
             "| corpus | 27 | 729 | 1.14e-16 | 7.07e-09 |")
    second = ("|  | Markov chain | HMM | planted | corpus |\n| --- | --- | --- | --- | --- |\n"
              "| \\(k\\, l\\) \\= \\(1\\, 1\\) | 4 | 4 | 11 | 27 |\n| \\(k\\, l\\) \\= \\(2\\, 2\\) | 16 | 6 | 11 | 713 |")
    assert markdown_width(first).min_width_px == pytest.approx(387.6, rel=0.02)
    assert markdown_width(second).min_width_px == pytest.approx(348.8, rel=0.02)


def test_fits_and_the_warning_both_ways(tmp_path, monkeypatch):
    from lib.book import records

    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    records.start("hilbert", {})
    narrow = [{"a": 1, "b": 2}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table(narrow, name="narrow")  # no warning
    wide = [{"label": "x", "one unbreakable word": "w" * 120}]  # no split into parts can make it fit
    with pytest.warns(UserWarning, match=r"table 'wide': at least \d+ px wide, wider than the page's column \(756 px\)"):
        table(wide, name="wide")
    meta = json.loads((tmp_path / "hilbert.json").read_text())["meta"]["tables"]
    assert meta["narrow"]["fits"] is True and meta["narrow"]["columns"] == 2 and meta["narrow"]["column_px"] == PAGE_PX
    assert meta["wide"]["fits"] is False and meta["wide"]["min_width_px"] > PAGE_PX and meta["wide"]["columns"] == 2
    just = min_width(["x"], [["y"]])
    assert just.fits(just.min_width_px) and not just.fits(just.min_width_px - 0.1)


def test_markdown_tables_are_found_in_any_markdown():
    text = "*intro*\n\n| a | b |\n| --- | --: |\n| 1 | x\\|y |\n\nbetween\n\n| c |\n|:-:|\n| 2 |\n| 3 |\n"
    tables = markdown_tables(text)
    assert tables == [(["a", "b"], [["1", "x\\|y"]]), (["c"], [["2"], ["3"]])]
    assert parse_markdown_table(text) == tables[0] and parse_markdown_table("no | table") is None
    assert markdown_width(text).min_width_px == min_width(["a", "b"], [["1", "x\\|y"]]).min_width_px
    assert markdown_width("plain text") is None


def test_math_in_cells_is_measured_as_typeset():
    assert math_width(r"\sigma") < math_width(r"\sigma_\alpha^{(k+1)}") < math_width(r"\sum_{x\in S} q(x)")
    assert math_width(r"\unknowncommand{abc}") > 0  # falls back to the source's letters


def test_control_characters_and_missing_glyphs_are_measured_not_refused():
    """A control character takes no room (FreeType refuses to load one); a glyph DejaVu lacks is measured
    (as the font's missing-glyph box, about an em wide), and neither stops the measurement."""
    from lib.book.tables import TABLE_FONT_PX, advance_width, text_width

    assert advance_width("\x02") == 0.0
    assert text_width("a\x02b") == text_width("ab")
    assert 0.5 * TABLE_FONT_PX < advance_width("\U0001F600") < 1.5 * TABLE_FONT_PX


def test_column_groups_by_hand():
    """Label 100 px, five columns of 200 px, border 2 px, column 756 px: 2 + 100 + 3·200 = 702 fits, a fourth
    does not, so the parts are (label, 1, 2, 3) and (label, 4, 5)."""
    from lib.book.tables import TableWidth, column_groups

    width = TableWidth(1102.0, [100.0] + [200.0] * 5, ["w"] * 6)
    assert column_groups(width, 756) == [[0, 1, 2, 3], [0, 4, 5]]
    assert column_groups(TableWidth(500.0, [100.0, 200.0, 198.0], ["w"] * 3), 756) == [[0, 1, 2]]
    assert column_groups(TableWidth(1000.0, [100.0, 898.0], ["w"] * 2), 756) == [[0, 1]]  # nothing to split


def test_a_table_wider_than_the_column_is_shown_as_parts_that_fit(tmp_path, monkeypatch):
    from lib.book import records
    from lib.book.figures import PAGE_PX
    from lib.book.tables import markdown_tables, min_width, table

    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))  # the widths go to this test's record
    records.start("hilbert", {})
    rows = [{"case": f"c{i}", **{f"a rather long header number {j}": 1000.0 * i + j for j in range(12)}}
            for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "wider than the column" warning
        shown = table(rows, name="wide").data
    parts = markdown_tables(shown)
    assert len(parts) >= 2
    assert all(min_width(h, r).min_width_px <= PAGE_PX for h, r in parts)
    assert all(h[0] == "case" and [r[0] for r in body] == ["c0", "c1", "c2"] for h, body in parts)
    shown_columns = [c for h, _ in parts for c in h[1:]]
    assert shown_columns == [f"a rather long header number {j}" for j in range(12)]  # each once, in order
    assert parts[1][1][2][1] == format_cell(rows[2][parts[1][0][1]], 4)  # the cells move with their columns
    narrow = table([{"a": 1, "b": 2}], name="narrow").data
    assert len(markdown_tables(narrow)) == 1


def test_a_soft_hyphen_is_a_place_to_break():
    assert cell_words("repro&shy;duces") == [("text", "repro"), ("text", "duces")]
    assert cell_words("a\u00adb<wbr>c") == [("text", "a"), ("text", "b"), ("text", "c")]


def test_code_in_a_body_cell_may_break_anywhere_as_the_style_sheet_says():
    """_static/book.css gives `table td code` overflow-wrap: anywhere, so a long identifier in a body cell
    needs one character's width, in a header its whole width."""
    ident = "`llc_theorems.truncated-potential-more-critical`"
    body = min_width(["id"], [[ident]])
    head = min_width([ident], [["x"]])
    assert body.columns[0] < 40 < head.columns[0]
    css = (Path(__file__).resolve().parents[2] / "_static" / "book.css").read_text()
    assert "table td code" in css and "overflow-wrap: anywhere" in css


def test_the_minus_sign_of_a_table_number_is_not_a_hyphen():
    assert MINUS == "\u2212" != "-"
