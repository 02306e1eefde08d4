"""Tables: numbers whole and short, missing values as a dash, text escaped."""
import math

import numpy as np

from lib.book.tables import MISSING, Raw, format_cell, markdown_table, table


def test_cells_are_formatted_for_a_reader():
    assert format_cell(2.220446049250313e-16) == "2.22e-16"  # one token: never split mid-number
    assert format_cell(float("nan")) == MISSING and format_cell(None) == MISSING
    assert format_cell(np.float64(0.123456789)) == "0.1235" and format_cell(np.int64(1234567)) == "1,234,567"
    assert format_cell(True) == "yes" and format_cell("a|b") == "a\\|b" and format_cell(Raw("**b**")) == "**b**"
    assert format_cell([1, 2.5]) == "1, 2.5"
    assert format_cell(106800.0) == "106,800" and format_cell(106800.5, digits=3) == "1.07e+05"


def test_a_long_float_would_otherwise_show_all_its_digits():
    """The failing side: Python's own repr keeps 16 digits, which this module exists to avoid."""
    assert len(str(1 / 3)) > 12 and len(format_cell(1 / 3)) <= 7


def test_rows_and_dataframes_become_markdown_tables():
    import pandas as pd

    md = table([{"a": 1, "b": math.nan}, {"a": 2, "c": "x"}]).data.splitlines()
    assert md[0] == "| a | b | c |" and md[2] == f"| 1 | {MISSING} | {MISSING} |" and md[3] == f"| 2 | {MISSING} | x |"
    frame = pd.DataFrame({"v": [0.5, 1e-20]}, index=["p", "q"])
    lines = table(frame).data.splitlines()
    assert lines[0] == "|  | v |" and lines[2] == "| p | 0.5 |" and lines[3] == "| q | 1e-20 |"
    plain = table(pd.DataFrame({"v": [1, 2]})).data.splitlines()
    assert plain[0] == "| v |"
    assert markdown_table(["h"], [[1]], align=[":-:"]).splitlines()[1] == "| :-: |"
