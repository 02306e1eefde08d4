"""The published reference and `lowrank-book diff`: each tolerance class both ways at its boundary,
whole folders compared by name, bad input refused with exit 2, a run accepted as the reference."""
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from lib import REPO_ROOT
from lib.book import reference as ref
from lib.book.chapters import ChapterDeclarationError, _reference_from_declaration

TOL = ref.Tolerance()


def differs(a, b, tol=TOL, se_a=None, se_b=None):
    return ref.compare_values(a, b, tol, se_a, se_b) is not None


def test_exact_class_integers_strings_booleans_and_lists_of_them():
    assert not differs(92, 92) and differs(92, 90) and differs(92, 93)
    assert not differs("(2, 2)", "(2, 2)") and differs("(2, 2)", "(2, 1)")
    assert not differs(True, True) and differs(True, False)
    assert differs(1, True)  # a bool is not the integer 1 here
    assert not differs([1, 2, "a"], [1, 2, "a"]) and differs([1, 2, "a"], [1, 3, "a"])
    assert differs([1, 2], [1, 2, 3])  # lengths
    assert not differs(None, None) and differs(None, 0)


def test_float_class_relative_tolerance_measured_against_the_reference():
    r = 0.5
    assert not differs(r, r * (1 + 0.9 * ref.FLOAT_RTOL))
    assert differs(r, r * (1 + 1.1 * ref.FLOAT_RTOL))
    assert differs(r, r * 1.05)  # a 5% move
    # against the reference, not the run: 100 → 190 with rtol 0.5 differs (|90| > 50, though < 0.5·190)
    loose = ref.Tolerance(rtol=0.5)
    assert differs(100.0, 190.0, loose) and not differs(100.0, 150.0, loose)
    assert not differs(100.0, 60.0, loose)  # |40| ≤ 50 (against the run it would be 40 > 30)
    assert not differs(2, 2.0) and differs(2, 2.5)  # an int against a float is compared as floats


def test_values_at_round_off_stay_at_round_off():
    assert not differs(1.1e-16, 3.3e-16) and not differs(-4e-15, 2e-13)
    assert differs(1e-16, 2 * ref.ROUNDOFF)  # one of them left round-off
    assert differs(1e-7, 2e-7)  # not round-off: compared relatively
    tight = ref.Tolerance(roundoff=1e-20)
    assert differs(1.1e-16, 3.3e-16, tight)


def test_statistical_class_in_combined_standard_errors():
    se = 0.1
    band = ref.SE_K * (2 * se * se) ** 0.5
    assert not differs(6.0, 6.0 + 0.99 * band, se_a=se, se_b=se)
    assert differs(6.0, 6.0 + 1.01 * band, se_a=se, se_b=se)
    assert not differs(6.0, 6.0 + 0.99 * ref.SE_K * se, se_a=se)  # only the reference carries one
    assert differs(6.0, 6.0 + 1.01 * ref.SE_K * se, se_a=se)
    # per-item standard errors of a list value
    assert not differs([1.0, 2.0], [1.0, 2.3], se_a=[0.0, 0.1], se_b=[0.0, 0.1])
    assert differs([1.0, 2.0], [1.01, 2.0], se_a=[0.0, 0.1], se_b=[0.0, 0.1])  # item 0 has no spread


def test_nested_values_name_the_item_that_moved():
    found = ref.compare_values({"a": [1.0, [2.0, 3.0]]}, {"a": [1.0, [2.0, 3.3]]}, TOL)
    assert found[0] == "['a'][1][1]" and found[1] == 3.0 and found[2] == 3.3
    assert ref.compare_values({"a": 1}, {"b": 1}, TOL)[3] == "exact keys"


def test_declared_overrides_need_a_reason_and_sane_numbers():
    values, figures = _reference_from_declaration(
        {"values": {"lm_*": {"rtol": 0.05, "reason": "SGLD path"}}, "figures": {"fig_x": {"rms": 6, "reason": "MC"}}},
        "x.yml")
    assert values[0][0] == "lm_*" and values[0][1].rtol == 0.05 and figures == (("fig_x", 6.0),)
    _, timing = _reference_from_declaration({"figures": {"fig_t": {"timing": True, "reason": "wall times"}}}, "x.yml")
    assert timing == (("fig_t", None),) and ref.figure_rms("fig_t", dict(timing)) is None
    for bad in ({"figures": {"f": {"timing": True, "rms": 1, "reason": "r"}}}, {"figures": {"f": {"timing": False, "reason": "r"}}},
                {"values": {"a": {"rtol": 0.05}}}, {"values": {"a": {"rtol": -1, "reason": "r"}}},
                {"values": {"a": {"atol": 1, "reason": "r"}}}, {"figures": {"f": {"rms": "big", "reason": "r"}}},
                {"figures": {"f": {"rms": 1}}}, {"other": {}}, [1]):
        with pytest.raises(ChapterDeclarationError):
            _reference_from_declaration(bad, "x.yml")
    assert ref.tolerance_for("lm_llc", {}, dict(values)).rtol == 0.05
    assert ref.tolerance_for("other", {"timing": True}, dict(values)).timing
    assert ref.figure_rms("fig_x", dict(figures)) == 6.0 and ref.figure_rms("fig_y", dict(figures)) == ref.FIGURE_RMS


# --- whole folders -----------------------------------------------------------------------------------

def _figure(path: Path, ys):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot(ys)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=60)
    plt.close(fig)


def _folder(root: Path, values: dict, *, profile="ci", seed=0, figures=None, finished=True, chapter="zz") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    meta = {"profile": profile, "parameters": {"profile": profile, "seed": seed}}
    if finished:
        meta["finished"] = "2026-11-25T00:00:00+0000"
    (root / f"{chapter}.json").write_text(json.dumps({"chapter": chapter, "values": values, "meta": meta}))
    for name, ys in (figures or {}).items():
        _figure(root / "figures" / chapter / f"{name}.png", ys)
    return root


BASE = {"alpha": {"value": 0.5, "claim": "zz.a"}, "count": {"value": 92}, "tiny": {"value": 1e-16},
        "llc": {"value": 6.2, "se": 0.2}, "wall_s": {"value": 10.0, "timing": True}, "label": {"value": "(2, 2)"}}
FIGS = {"fig_a": [0, 1, 2], "fig_b": [3, 1, 2]}


def test_a_rerun_of_the_same_values_and_figures_reproduces(tmp_path):
    a = _folder(tmp_path / "ref", BASE, figures=FIGS)
    b = _folder(tmp_path / "run", {**BASE, "tiny": {"value": 3e-16}, "wall_s": {"value": 99.0, "timing": True},
                                   "llc": {"value": 6.5, "se": 0.2}}, figures=FIGS)
    comparison = ref.compare(b, a)
    assert comparison.ok, [d.line() for d in comparison.differences]
    assert comparison.values == 5 and comparison.figures == 2  # the wall time is not compared
    assert comparison.summary() == "5 values and 2 figures compared: 0 differ"


def test_moved_numbers_and_a_swapped_figure_are_named(tmp_path):
    a = _folder(tmp_path / "ref", BASE, figures=FIGS)
    b = _folder(tmp_path / "run", {**BASE, "alpha": {"value": 0.525, "claim": "zz.a"}, "count": {"value": 93},
                                   "wall_s": {"value": 99.0, "timing": True}},
                figures={"fig_a": FIGS["fig_b"], "fig_b": FIGS["fig_b"]})
    comparison = ref.compare(b, a)
    lines = [d.line() for d in comparison.differences]
    assert len(lines) == 3, lines
    assert any(line.startswith("zz: record 'alpha': reference 0.5, this run 0.525") for line in lines)
    assert any(line.startswith("zz: record 'count': reference 92, this run 93 (tolerance: exact)") for line in lines)
    assert any(line.startswith("zz: figure 'fig_a'") and "RMS" in line for line in lines)
    assert not any("wall_s" in line for line in lines)


def test_missing_and_new_records_and_figures_differ(tmp_path):
    a = _folder(tmp_path / "ref", BASE, figures=FIGS)
    run = {k: v for k, v in BASE.items() if k != "count"}
    run["new_value"] = {"value": 1}
    b = _folder(tmp_path / "run", run, figures={"fig_a": FIGS["fig_a"], "fig_c": [1, 1]})
    whats = sorted(d.what for d in ref.compare(b, a).differences)
    assert whats == ["figure 'fig_b'", "figure 'fig_c'", "record 'count'", "record 'new_value'"]


def test_undecided_against_decided_differs(tmp_path):
    a = _folder(tmp_path / "ref", {"x": {"value": 0.1}})
    b = _folder(tmp_path / "run", {"x": {"value": None, "undecided": "no case where 3 s.e. < 5%"}})
    (d,) = ref.compare(b, a).differences
    assert d.run == "undecided" and d.reference == 0.1


def test_parameters_that_differ_are_named_and_still_compared(tmp_path):
    a = _folder(tmp_path / "ref", BASE)
    b = _folder(tmp_path / "run", {**BASE, "count": {"value": 90}}, seed=3)
    comparison = ref.compare(b, a)
    assert [d.what for d in comparison.parameters] == ["parameter 'seed'"]
    assert [d.what for d in comparison.differences] == ["record 'count'"]


def test_bad_input_is_refused(tmp_path):
    good = _folder(tmp_path / "ref", BASE)
    with pytest.raises(ref.ReferenceError, match="does not exist"):
        ref.compare(tmp_path / "nope", good)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ref.ReferenceError, match="holds no chapter records"):
        ref.compare(tmp_path / "empty", good)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "zz.json").write_text('{"values": {"a": ')
    with pytest.raises(ref.ReferenceError, match="is not valid JSON"):
        ref.compare(corrupt, good)
    (corrupt / "zz.json").write_text('[1, 2]')
    with pytest.raises(ref.ReferenceError, match="is not a chapter record"):
        ref.compare(corrupt, good)
    paper = _folder(tmp_path / "paper", BASE, profile="paper")
    with pytest.raises(ref.ReferenceError, match="of profile 'ci' and this run of profile 'paper'"):
        ref.compare(paper, good)
    interrupted = _folder(tmp_path / "int", BASE)
    data = json.loads((interrupted / "zz.json").read_text())
    data["meta"]["incomplete"] = "interrupted in § X"
    (interrupted / "zz.json").write_text(json.dumps(data))
    with pytest.raises(ref.ReferenceError, match="incomplete"):
        ref.compare(interrupted, good)


def test_accept_writes_the_reference_from_a_complete_run_only(tmp_path):
    run = _folder(tmp_path / "run" / "records", BASE, figures=FIGS)
    target = tmp_path / "reference" / "ci"
    assert ref.accept(tmp_path / "run", target, chapters_expected=["zz"]) == ["zz"]
    assert json.loads((target / "zz.json").read_text()) == json.loads((run / "zz.json").read_text())
    assert sorted(p.name for p in (target / "figures" / "zz").iterdir()) == ["fig_a.png", "fig_b.png"]
    assert ref.compare(run, target).ok
    with pytest.raises(ref.ReferenceError, match="lacks other"):
        ref.accept(run, target, chapters_expected=["zz", "other"])
    with pytest.raises(ref.ReferenceError, match="incomplete"):
        ref.accept(_folder(tmp_path / "unfinished", BASE, finished=False), target)
    with pytest.raises(ref.ReferenceError, match="profile 'paper'"):
        ref.accept(_folder(tmp_path / "paper", BASE, profile="paper"), target)
    assert ref.compare(run, target).ok  # a refused accept leaves the reference as it was


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "lib", "diff", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)


def test_diff_command_exit_status_and_lines(tmp_path):
    a = _folder(tmp_path / "ref", BASE, figures=FIGS)
    same = _folder(tmp_path / "same", BASE, figures=FIGS)
    proc = _cli("--records", str(same), "--reference", str(a))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "5 values and 2 figures compared: 0 differ"
    moved = _folder(tmp_path / "moved", {**BASE, "count": {"value": 91}}, figures=FIGS)
    proc = _cli("--records", str(moved), "--reference", str(a))
    assert proc.returncode == ref.DIFFER == 4
    assert "zz: record 'count': reference 92, this run 91 (tolerance: exact)" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "5 values and 2 figures compared: 1 differ"
    for args, message in ((["--records", str(tmp_path / "nope")], "does not exist"),
                          (["--records", str(same), "--reference", str(tmp_path / "nope")], "does not exist")):
        proc = _cli(*args)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_excluded_chapter_is_neither_compared_nor_refused_as_incomplete(tmp_path):
    from lib.book import reference as ref_module

    """The report compares the run while its own record is still incomplete: leaving it out compares the rest."""
    ref = _folder(tmp_path / "ref", BASE)
    _folder(tmp_path / "ref", {"x": {"value": 1}}, chapter="report")
    run = _folder(tmp_path / "run", BASE)
    _folder(tmp_path / "run", {"x": {"value": 2}}, chapter="report", finished=False)
    meta = json.loads((run / "report.json").read_text())
    meta["meta"]["incomplete"] = "running"
    (run / "report.json").write_text(json.dumps(meta))
    with pytest.raises(ref_module.ReferenceError, match="report: this run's record is incomplete"):
        ref_module.compare(run, ref)
    done = ref_module.compare(run, ref, exclude=("report",))
    assert not done.differences and done.values == 5 and "report" not in done.not_run


def test_a_timing_mark_on_either_side_leaves_the_value_out(tmp_path):
    """A wall time marked ``timing`` in the reference only, or in the run only, is neither compared nor
    counted: its values differ a hundredfold and nothing differs."""
    plain = {"count": {"value": 92}, "wall": {"value": 10.0}}
    marked = {"count": {"value": 92}, "wall": {"value": 1000.0, "timing": True}}
    for reference, run, name in ((marked, plain, "the reference's"), (plain, marked, "the run's")):
        comparison = ref.compare(_folder(tmp_path / f"run-{name}", run), _folder(tmp_path / f"ref-{name}", reference))
        assert comparison.ok, (name, [d.line() for d in comparison.differences])
        assert comparison.values == 1, name  # the count only
    moved = ref.compare(_folder(tmp_path / "run", plain), _folder(tmp_path / "ref", {**plain, "wall": {"value": 20.0}}))
    assert [d.what for d in moved.differences] == ["record 'wall'"]  # unmarked on both sides: compared


def test_a_run_and_a_reference_without_a_chapter_in_common_cannot_be_compared(tmp_path):
    """A modes-only run against a hilbert-only reference is refused (exit 2 on the command line), naming the
    chapters of each side; a run with one chapter more than the reference still compares the others."""
    run = _folder(tmp_path / "run", BASE, chapter="modes")
    reference = _folder(tmp_path / "ref", BASE, chapter="hilbert")
    with pytest.raises(ref.ReferenceError, match=r"no chapter to compare: this run's records \(.*\) are of modes, "
                                                 r"the reference's \(.*\) of hilbert"):
        ref.compare(run, reference)
    proc = _cli("--records", str(run), "--reference", str(reference))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stdout + proc.stderr
    assert "are of modes" in proc.stderr and "of hilbert" in proc.stderr
    _folder(tmp_path / "run", BASE, chapter="hilbert")
    comparison = ref.compare(run, reference)
    assert [(d.chapter, d.what, d.run) for d in comparison.differences] == [("modes", "chapter", "ran")]
    assert "a new chapter: accept it into the reference" in comparison.differences[0].line()
    assert comparison.values == 5


def test_a_records_folder_the_report_cannot_read_is_named(tmp_path):
    assert ref.records_folder_problem("") is None and ref.records_folder_problem(None) is None
    (tmp_path / "empty").mkdir()
    assert "holds no chapter records" in ref.records_folder_problem(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    assert "is a file, not a folder" in ref.records_folder_problem(tmp_path / "file")
    assert "does not exist" in ref.records_folder_problem(tmp_path / "nope")
    assert "holds records of zz, none of them a chapter of the book" in ref.records_folder_problem(
        _folder(tmp_path / "foreign", BASE))
    _folder(tmp_path / "out" / "records", BASE, chapter="hilbert")
    assert ref.records_folder_problem(tmp_path / "out") is None  # a `run --out` folder: its records/
