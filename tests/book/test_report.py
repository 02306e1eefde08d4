"""The reproduction report (lib.book.report): its words, its counts and its tables, each check both ways."""
import pytest

from lib.book import claims, report, tables
from lib.book.claims import INCOMPLETE, NOT_REPRODUCED, REPRODUCES, UNDECIDED
from lib.book.reference import Comparison, Difference


def test_a_dotted_source_may_wrap_after_its_dots_and_underscores():
    breakable = report.breakable
    assert breakable("This book (lib.isan.rare_branch)") == "This book (lib.<wbr>isan.<wbr>rare_<wbr>branch)"
    assert breakable("Lemma 4.10") == "Lemma 4.10"  # a dot before a digit stays
    assert breakable("This book (`lib.modes.Modes.effective`)") == "This book (`lib.modes.Modes.effective`)"
    assert breakable("Eq. $A_{k}$") == "Eq. $A_{k}$"


# --- the report's words: verdicts against the paper, and the comparison with the pinned run -------------------

# every verdict's verb, singular and plural, by hand: what `count_words` must say
VERBS_BY_HAND = {
    "pass": ("passes", "pass"), "fail": ("fails", "fail"), REPRODUCES: ("reproduces", "reproduce"),
    NOT_REPRODUCED: ("does not reproduce here", "do not reproduce here"),
    UNDECIDED: ("is undecided at these settings", "are undecided at these settings"),
    "invalid": ("is invalid", "are invalid"), INCOMPLETE: ("is incomplete", "are incomplete"),
    "not run": ("is not run", "are not run"),
    report.PINNED_SAME: ("is the same as in the pinned run", "are the same as in the pinned run"),
    report.PINNED_DIFFERS: ("differs from the pinned run", "differ from the pinned run")}


def test_a_count_agrees_with_its_noun_and_verb():
    assert report.count_words(5, NOT_REPRODUCED, "finding") == "5 findings do not reproduce here"
    assert report.count_words(1, NOT_REPRODUCED, "finding") == "1 finding does not reproduce here"
    assert report.count_words(0, NOT_REPRODUCED, "finding") == "0 findings do not reproduce here"
    assert report.count_words(3, UNDECIDED, "finding") == "3 findings are undecided at these settings"
    assert report.count_words(1, UNDECIDED, "must_hold") == "1 claim that must hold is undecided at these settings"
    assert report.count_words(2, "pass", "must_hold") == "2 claims that must hold pass"
    assert report.count_words(1, "fail", "consistency") == "1 consistency check fails"
    assert report.count_words(0, "pass", "consistency") == "0 consistency checks pass"
    assert report.count_words(1, REPRODUCES) == "1 reproduces" and report.count_words(2, REPRODUCES) == "2 reproduce"
    for verdict, (one, many) in VERBS_BY_HAND.items():  # each verdict both ways: singular at 1, plural at 0 and 2
        assert report.count_words(1, verdict) == f"1 {one}"
        assert report.count_words(0, verdict) == f"0 {many}" and report.count_words(2, verdict) == f"2 {many}"
        assert report.count_words(1, verdict, "finding") == f"1 finding {one}"
        assert report.count_words(2, verdict, "finding") == f"2 findings {many}"
        assert one != many
    assert set(VERBS_BY_HAND) == set(report.VERBS)  # every verdict the report counts has its verb
    assert {v for vs in report.VERDICTS.values() for v in vs} <= set(report.VERBS)
    with pytest.raises(KeyError):
        report.count_words(1, "passed")


def test_counts_in_prose_are_grammatical_and_leave_out_zeros():
    by = {"must_hold": {"pass": 74, "fail": 0}, "consistency": {"pass": 1, "fail": 1},
          "finding": {REPRODUCES: 34, NOT_REPRODUCED: 1, UNDECIDED: 5, "not run": 0}}
    assert report.tally(by) == ("74 claims that must hold pass; of 2 consistency checks, 1 passes and 1 fails; "
                                "of 40 findings, 34 reproduce, 1 does not reproduce here and 5 are undecided at "
                                "these settings")
    assert report.tally({"finding": {REPRODUCES: 1, NOT_REPRODUCED: 0}}) == "1 finding reproduces"
    assert report.tally({"finding": {REPRODUCES: 0}}) == "no claims"
    assert report.series(["a"]) == "a" and report.series(["a", "b"]) == "a and b"
    assert report.series(["a", "b", "c"]) == "a, b and c"
    assert "5 does not" not in report.tally({"finding": {NOT_REPRODUCED: 5}})


def _claim(cid, kind, chapter="intro", record=None):
    return claims.Claim(cid, chapter, "s", "src", record or cid, claims.at_least(0.5), "≈ 1", kind)


def _results():
    """Two checks (one fails), three findings (one of each verdict) and one claim not run."""
    return [claims.Result(_claim("a", "must_hold"), 0.7, "pass"),
            claims.Result(_claim("b", "consistency"), 0.1, "fail"),
            claims.Result(_claim("c", "finding"), 0.7, REPRODUCES),
            claims.Result(_claim("d", "finding"), 0.3, NOT_REPRODUCED),
            claims.Result(_claim("e", "finding"), 0.3, UNDECIDED, "too few cases"),
            claims.Result(_claim("f", "finding", chapter="logit_rank"), None, "not run")]


def _comparison(moved=("d",), values=682, figures=47, figures_differing=0):
    diffs = [Difference("intro", f"record {m!r}", 1, 2, "relative 1e-06", m) for m in moved]
    diffs += [Difference("intro", f"figure 'fig_{i}'", "the pinned image", "this run's", "rms 0", f"fig_{i}")
              for i in range(figures_differing)]
    return Comparison(differences=diffs, values=values, figures=figures, not_run=["logit_rank"])


def test_claims_are_the_same_as_or_differ_from_the_pinned_run_apart_from_their_verdict():
    results = _results()
    marks = report.pinned(results, _comparison())
    assert marks == {"a": "same", "b": "same", "c": "same", "d": "differs", "e": "same"}  # f did not run
    assert report.pinned(results, None) == {}
    table = report.markdown_table(results, {}, "finding", pinned_values=marks)
    header = next(line for line in table.splitlines() if line.startswith("| verdict"))
    assert header == "| verdict against the paper | claim | ours | paper | pinned run | measured in |"
    rows = {line.split("`")[1]: line for line in table.splitlines() if line.count("`") >= 2}
    assert rows["d"].startswith("| does not reproduce here |") and "| **differs** |" in rows["d"]
    assert rows["c"].startswith("| reproduces |") and "| same |" in rows["c"]
    assert "| yes |" not in table and "| no |" not in table and "published" not in table
    checks = report.markdown_table(results, {}, "must_hold", pinned_values=marks)
    assert "| verdict | claim | ours | paper | pinned run | measured in |" in checks


def test_the_headline_keeps_the_papers_and_the_pinned_run_apart():
    lines = report.headline(_results(), _comparison(moved=("d", "z"), figures_differing=1))
    assert lines == [
        "Against the papers: of the 4 findings, 1 reproduces, 1 does not reproduce here, 1 is undecided at these "
        "settings and 1 is not run.",
        "The book's checks: of the 1 claim that must hold, 1 passes; of the 1 consistency check, 1 fails.",
        "Against the pinned run: 680 of 682 recorded numbers and 46 of 47 figures are the same as in the book's "
        "pinned run (reference/ci), the values of 4 of 5 claims among them; 3 differ from the pinned run "
        "(`lowrank-book diff` lists each)."]
    assert "reproduce" not in lines[2] and "pinned" not in lines[0] + lines[1]
    same = report.headline(_results(), _comparison(moved=()))[2]
    assert same == ("Against the pinned run: 682 of 682 recorded numbers and 47 of 47 figures are the same as in "
                    "the book's pinned run (reference/ci), the values of 5 of 5 claims among them.")
    one = report.pinned_summary(_comparison(moved=("d",), values=1, figures=1))
    assert one == ("0 of 1 recorded number and 1 of 1 figure are the same as in the book's pinned run (reference/ci); "
                   "1 differs from the pinned run (`lowrank-book diff` lists each)")
    assert report.headline(_results(), None, "no reference of this profile")[2] == \
        "Against the pinned run: not compared (no reference of this profile)."
    bold = report.headline(_results(), _comparison(), markdown=True)
    assert bold[0].startswith("**Against the papers**: of the 4 findings")
    assert bold[2].startswith("**Against the pinned run**: 681 of 682")


def test_the_summary_table_fits_a_phone_and_counts_both_comparisons():
    results = _results()
    text = report.summary_table(results, report.pinned(results, _comparison()))
    header, body = tables.parse_markdown_table(text)
    assert [h.replace("&shy;", "") for h in header] == ["chapter", "checks pass", "findings reproduce",
                                                        "same as the pinned run"]
    rows = {r[0]: r for r in body}
    intro = next(r for k, r in rows.items() if k != "Logit rank" and "all chapters" not in k)
    assert intro[1:] == ["[**1 of 2**](#consistency-checks)", "[1 of 3](#the-papers-empirical-findings)",
                         "**4 of 5**"]  # a failed check and a differing value in bold; a finding's verdict not
    assert rows["Logit rank"][1:] == ["not run", "not run", "—"]
    # every chapter that declares claims, with counts three digits wide, fits a 360 px phone...
    with_claims = {c.chapter for c in report.all_claims()}
    wide = [claims.Result(_claim(f"{c}.{k}.{i}", k, chapter=c), 1.0, "pass" if k != "finding" else REPRODUCES)
            for c in report.chapters() if c in with_claims for k in claims.KINDS for i in range(10)]
    phone = tables.markdown_width(report.summary_table(wide, {r.claim.id: "same" for r in wide}))
    assert phone.min_width_px <= report.PHONE_COLUMN_PX, phone
    # ...which the old five-column table, one column per kind and a long header, did not
    old = ("| chapter | must hold | consistency | findings | claims reproducing the published value |\n"
           "|---|---|---|---|---|\n| Introduction | 5 pass | — | 1 reproduces | 6 of 6 |")
    assert tables.markdown_width(old).min_width_px > report.PHONE_COLUMN_PX
