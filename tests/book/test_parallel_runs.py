"""`lowrank-book run --jobs N`: the waves it runs, and the command line each chapter's process gets."""
import pytest

from lib.book.chapters import chapters
from lib.book.parameters import ParameterError, parse_cli_value
from lib.book.runner import absolute_paths, child_command, execute_in_parallel, reads_other_records, schedule


def test_the_report_runs_after_every_chapter_it_reads_and_the_longest_start_first():
    book = chapters()
    plans = [(c, {}) for c in book.values()]
    waves = schedule(plans)
    assert [c.id for c, _ in waves[-1]] == ["report"] and reads_other_records(book["report"])
    first = waves[0]
    assert sorted(c.id for c, _ in first) == sorted(c.id for c in book.values() if c.id != "report")
    budgets = [c.budget_ci_s for c, _ in first]
    assert budgets == sorted(budgets, reverse=True) and budgets[0] == max(c.budget_ci_s for c in book.values())
    two = schedule([(book["hilbert"], {}), (book["intro"], {})])   # without the report: one wave
    assert len(two) == 1 and {c.id for c, _ in two[0]} == {"hilbert", "intro"}
    assert sum(len(w) for w in schedule(plans)) == len(plans)


def test_each_process_reads_back_exactly_the_parameters_given(tmp_path):
    book = chapters()
    given = {"seed": 3, "profile": "ci", "device": "cpu", "n_boot": 7, "real_models": ["smollm2-135m"],
             "real_corpus": "none", "ratio": 0.25, "flag": True, "nothing": None, "quote": "it's \"x\""}
    cmd = child_command(book["logit_rank"], given, out_dir=tmp_path / "o", timeout=50, smoke=True)
    assert cmd[1:5] == ["-m", "lib", "run", "logit_rank"]
    pairs = {cmd[i + 1]: parse_cli_value(cmd[i + 2]) for i, a in enumerate(cmd) if a == "-p"}
    assert pairs == absolute_paths(given)
    assert cmd[cmd.index("--out") + 1] == str((tmp_path / "o").resolve())
    assert cmd[cmd.index("--timeout") + 1] == "50" and cmd[-1] == "--smoke"
    assert "--out" not in child_command(book["hilbert"], {}, out_dir=None, timeout=None, smoke=False)


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True])
def test_a_count_of_jobs_that_is_not_a_positive_integer_is_refused(jobs):
    with pytest.raises(ParameterError, match=r"--jobs: allowed values are an integer >= 1"):
        execute_in_parallel([], jobs)
