"""Bookkeeping cells are off the page: a code cell that only records carries remove-input (or hide-input).

``scripts/fold_record_cells.py`` finds them (statements all ``record``/``record_meta`` calls, or loops of
them) and tags them; with ``--split`` it also takes the records out of cells that end with them (or with them
and then a display) into such a cell. These tests hold the book to both and check the classifier and the
split on hand-made cells.
"""
import importlib.util
import sys
import textwrap

import pytest

from lib import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "fold_record_cells.py"
_spec = importlib.util.spec_from_file_location("fold_record_cells", SCRIPT)
fold = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))  # a dataclass needs it there
_spec.loader.exec_module(fold)


def cell(code: str, options: str = "") -> str:
    """A chapter fragment: prose, one code cell (with ``options`` lines), prose."""
    opts = f"{options}\n\n" if options and not options.startswith("---") else (f"{options}\n" if options else "")
    return f"Some prose.\n\n```{{code-cell}} ipython3\n{opts}{textwrap.dedent(code).strip()}\n```\n\nMore prose.\n"


def test_every_record_only_cell_of_the_book_is_tagged(capsys):
    assert fold.chapter_paths(), "no chapters found"
    assert fold.main(["--check"]) == 0, capsys.readouterr().out


def test_a_record_only_cell_is_found_and_shows_nothing():
    source = 'record("a", worst["a"], claim="x.a")\nrecord("b", float(np.abs(d).max()));\nrecord_meta(n=3)'
    assert fold.classify(source) == "remove-input"


def test_records_spanning_several_lines_are_found():
    source = textwrap.dedent("""\
        record("text", "; ".join(f"{name}: {c.m:.3g}"
                                 for name, c in checks.items()))   # one call, two lines
        record("n", sum(c.n for c in checks.values()),
               claim="x.n")""")
    assert fold.classify(source) == "remove-input"


def test_only_the_books_record_counts():
    assert fold.classify('book.record("x", 1)\nlib.book.records.record_meta(n=1)') == "remove-input"
    assert fold.classify('tracker.record("x", 1)') is None


def test_a_for_loop_of_records_is_found():
    source = 'for k, v in results.items():\n    record(f"err_{k}", v)\n    if v > 0:\n        record_meta(last=k)'
    assert fold.classify(source) == "remove-input"


def test_a_cell_that_computes_and_records_is_not():
    assert fold.classify('x = f()\nrecord("x", x)') is None
    assert fold.mixed_kind('x = f()\nrecord("x", x)') == "trailing"
    assert fold.mixed_kind('x = f()\nrecord("x", x)\ntable(rows)') == "before-display"
    assert fold.mixed_kind('record("x", 1)\ny = g()\nrecord("y", y)') == "interleaved"
    assert fold.classify('for k in ks:\n    v = f(k)\n    record(f"v_{k}", v)') is None  # the loop computes


def test_cells_that_show_something_are_not():
    assert fold.classify('show_figure("fig-a", fig)') is None
    assert fold.classify('record("x", 1)\nshow_figure("fig-a", fig)') is None
    assert fold.classify('record("x", 1)\ntable(rows, name="t")') is None
    assert fold.classify('record("x", 1)\nprint(x)') is None
    assert fold.classify("") is None and fold.classify("pass") is None
    assert fold.classify('%time record("x", 1)') is None           # a magic is not plain Python


def test_a_record_of_a_call_that_may_print_is_folded_not_removed():
    assert fold.classify('record("acc", experiments.evaluate(model))') == "hide-input"
    assert fold.classify('for r in experiments.runs(cfg):\n    record(r.name, r.value)') == "hide-input"


def test_tagging_keeps_options_and_tags_and_is_idempotent():
    plain = cell('record("x", 1)')
    tagged, added = fold.fold_text(plain)
    assert [tag for _, tag in added] == ["remove-input"]
    assert "```{code-cell} ipython3\n:tags: [remove-input]\n\nrecord(\"x\", 1)\n```" in tagged
    assert fold.fold_text(tagged) == (tagged, [])

    short = cell('record("x", 1)', ":tags: [parameters]\n:other: 1")
    tagged, _ = fold.fold_text(short)
    assert ":tags: [parameters, remove-input]\n:other: 1\n\nrecord" in tagged
    no_tags = cell('record("x", 1)', ":other: 1")
    assert ":other: 1\n:tags: [remove-input]\n\nrecord" in fold.fold_text(no_tags)[0]

    flow = cell('record("x", 1)', "---\nother: 1\ntags: [a]\n---")
    assert "---\nother: 1\ntags: [a, remove-input]\n---\nrecord" in fold.fold_text(flow)[0]
    block = cell('record("x", 1)', "---\ntags:\n- a\nother: 1\n---")
    assert "---\ntags:\n- a\n- remove-input\nother: 1\n---\nrecord" in fold.fold_text(block)[0]
    none = cell('record("x", 1)', "---\nother: 1\n---")
    assert "---\nother: 1\ntags: [remove-input]\n---\nrecord" in fold.fold_text(none)[0]

    for folded in ("hide-input", "remove-cell", "remove-input"):
        already = cell('record("x", 1)', f":tags: [{folded}]")
        assert fold.fold_text(already) == (already, [])
    mixed = cell('x = f()\nrecord("x", x)')
    assert fold.fold_text(mixed) == (mixed, [])


def test_check_mode_fails_on_an_untagged_cell_and_changes_nothing(tmp_path, capsys):
    path = tmp_path / "toy.md"
    path.write_text(cell('record("x", 1)') + cell('x = f()\nrecord("x", x)'))
    before = path.read_text()
    assert fold.main(["--check", str(path)]) == 1
    assert path.read_text() == before
    assert fold.main([str(path)]) == 0 and path.read_text() != before
    assert fold.main(["--check", str(path)]) == 0
    assert "needs remove-input" in capsys.readouterr().out


def test_the_cells_read_here_are_the_cells_jupytext_reads():
    jupytext = pytest.importorskip("jupytext")
    for path in fold.chapter_paths():
        text = path.read_text()
        ours = fold.parse_cells(text, path)
        theirs = [c for c in jupytext.reads(text, fmt="myst").cells if c.cell_type == "code"]
        assert len(ours) == len(theirs), path
        for mine, nb_cell in zip(ours, theirs):
            assert mine.tags == nb_cell.metadata.get("tags", []), (path, mine.fence_line + 1)
            assert mine.source.strip() == nb_cell.source.strip(), (path, mine.fence_line + 1)


# --- splitting the records off mixed cells (--split) ------------------------------------------------------


def test_every_splittable_cell_of_the_book_is_split(capsys):
    assert fold.main(["--check", "--split"]) == 0, capsys.readouterr().out


def test_splitting_the_chapters_keeps_their_statements_and_the_order_of_their_records():
    for path in fold.chapter_paths():
        text = path.read_text()
        new, done, _ = fold.split_text(fold.fold_text(text, path)[0], path)
        fold.check_preserved(text, new, path)
        assert (new, done) == (text, []), path   # already split: a second --split changes nothing


def test_a_trailing_record_block_is_split_off_into_a_folded_cell():
    source = '''\
        x = f()  # compute
        y = g(x)

        # the records
        record("x", x, claim="c.x")
        record("y", float(y));'''
    text = cell(source, ":tags: [keep-me]")
    new, done, left = fold.split_text(text)
    assert [(plan.kind, plan.tag) for _, plan in done] == [("trailing", "remove-input")] and not left
    assert new == ('Some prose.\n\n```{code-cell} ipython3\n:tags: [keep-me]\n\nx = f()  # compute\ny = g(x)\n```\n\n'
                   '```{code-cell} ipython3\n:tags: [remove-input]\n\n# the records\nrecord("x", x, claim="c.x")\n'
                   'record("y", float(y));\n```\n\nMore prose.\n')
    fold.check_preserved(text, new)
    assert fold.split_text(new) == (new, [], [])

    may_print = cell('acc = train(model)\nrecord("acc", experiments.evaluate(model))')
    new, done, _ = fold.split_text(may_print)
    assert done[0][1].tag == "hide-input" and ":tags: [hide-input]\n\nrecord(\"acc\"" in new


def test_records_before_a_display_move_below_it_and_are_split_off():
    source = '''\
        rows = study(cfg)
        record("n", len(rows))  # how many
        for r in rows:
            record(f"v_{r.k}", r.v)

        table([{"k": r.k} for r in rows], name="t")'''
    text = cell(source)
    new, done, _ = fold.split_text(text)
    assert [plan.kind for _, plan in done] == ["before-display"]
    assert new == ('Some prose.\n\n```{code-cell} ipython3\nrows = study(cfg)\n\ntable([{"k": r.k} for r in rows], '
                   'name="t")\n```\n\n```{code-cell} ipython3\n:tags: [remove-input]\n\nrecord("n", len(rows))  # how '
                   'many\nfor r in rows:\n    record(f"v_{r.k}", r.v)\n```\n\nMore prose.\n')
    fold.check_preserved(text, new)
    assert fold.split_text(new) == (new, [], [])

    # a comment right below the records (before a blank line) goes with them; one above the display stays
    text = cell('rows = study(cfg)\nrecord("n", len(rows))\n# n is glued in the text\n\n# the table\ntable(rows)')
    new, _, _ = fold.split_text(text)
    assert ('```{code-cell} ipython3\nrows = study(cfg)\n\n# the table\ntable(rows)\n```\n\n```{code-cell} ipython3\n'
            ':tags: [remove-input]\n\nrecord("n", len(rows))\n# n is glued in the text\n```') in new

    for shown in ('show_figure("fig-a", fig)', 'print(f"{n} rows")\nprint("done")', "summary.rows"):
        new, done, left = fold.split_text(cell(f'n = len(rows)\nrecord("n", n)\n{shown}'))
        assert done and not left, shown
        assert (f'n = len(rows)\n{shown}\n```\n\n```{{code-cell}} ipython3\n:tags: [remove-input]\n\n'
                'record("n", n)\n```') in new


@pytest.mark.parametrize("source, why", [
    ('for k, v in results.items():\n    record(f"err_{k}", v)\nprint(k)', "share a name"),        # the loop's k
    ('record("n", n := len(rows))\ntable(rows, name=f"t{n}")', "share a name"),                  # a walrus
    ('record("last", rows.pop())\ntable(rows)', "share a name"),                                  # records change rows
    ('record("n", len(rows))\ntable(rows.sort() or rows)', "share a name"),                       # the display does
    ('record_meta(tables={})\ntable(rows)', "share a name"),                                      # table writes tables
    ('y = f()\nrecord("y", y)\nplt.show()', "ends with plt.show"),
    ('y = f()\nrecord("y", y)\nz = g(y)', "interleaved"),
    ('record("a", 1)\ny = f()\nrecord("y", y)', "interleaved"),
    ('y = f(); record("y", y)', "shares a line"),
    ('y = f()\nrecord_meta(seconds=time.perf_counter() - t0)', "clock"),
    ('y = f()\ny\nrecord("y", y)', "last expression would be shown"),
    ('y = f()\ntable(y)\nrecord("y", y)', "last expression would be shown"),
])
def test_a_cell_is_left_as_it_is_where_splitting_could_change_what_it_computes_or_shows(source, why):
    assert why in fold.plan_split(source)
    text = cell(source)
    assert fold.split_text(text) == (text, [], [(fold.parse_cells(text)[0], fold.plan_split(source))])


def test_cells_that_do_not_mix_or_are_folded_are_not_split():
    for source in ('record("x", 1)', "x = f()\ntable(x)", '%time x = f()\nrecord("x", x)'):
        assert fold.plan_split(source) is None
    folded = cell('x = f()\nrecord("x", x)', ":tags: [hide-input]")
    assert fold.split_text(folded) == (folded, [], [])


def test_the_check_of_a_split_catches_a_statement_lost_or_records_reordered():
    before = cell('x = f()\nrecord("a", x)\nrecord("b", 2)')
    fold.check_preserved(before, cell('x = f()\nrecord("a", x)') + cell('record("b", 2)'))
    with pytest.raises(ValueError, match="statements"):
        fold.check_preserved(before, cell('x = f()\nrecord("a", x)'))
    with pytest.raises(ValueError, match="order"):
        fold.check_preserved(before, cell('x = f()\nrecord("b", 2)\nrecord("a", x)'))


def test_split_mode_writes_check_mode_fails_until_it_has(tmp_path, capsys):
    path = tmp_path / "toy.md"
    path.write_text(cell('record("x", 1)') + cell('x = f()\nrecord("x", x)\ntable(x)'))
    before = path.read_text()
    assert fold.main([str(path)]) == 0                       # tags only: the mixed cell stays
    assert fold.main(["--check", str(path)]) == 0
    assert fold.main(["--check", "--split", str(path)]) == 1 and path.read_text() == fold.fold_text(before)[0]
    assert fold.main(["--split", str(path)]) == 0
    assert fold.main(["--check", "--split", str(path)]) == 0
    split = path.read_text()
    assert fold.main(["--split", str(path)]) == 0 and path.read_text() == split
    assert len(fold.parse_cells(split)) == 3
    assert "before-display records split off into a remove-input cell" in capsys.readouterr().out
