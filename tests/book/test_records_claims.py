"""Records (glue + JSON), checks and the claims the chapters declare."""
import json

import numpy as np
import pytest

from lib.book import claims, records
from lib.book.chapters import all_claims, chapters, get_claim


@pytest.fixture
def rec_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    records.start("intro", {"profile": "ci"})
    return tmp_path


def test_record_writes_plain_json(rec_dir):
    records.record("x", np.float64(1.5))
    records.record("arr", np.arange(3))
    records.record_meta(device="cpu")
    data = json.loads((rec_dir / "intro.json").read_text())
    assert data["values"]["x"] == {"value": 1.5}
    assert data["values"]["arr"]["value"] == [0, 1, 2]
    assert data["meta"] == {"profile": "ci", "device": "cpu", "last_record": "arr"}
    with pytest.raises(ValueError, match="finite"):
        records.record("bad", float("nan"))
    with pytest.raises(TypeError, match="record\\(\\) takes"):
        records.record("bad", object())


def test_record_links_claims_and_rejects_mismatches(rec_dir):
    records.record("corpus_megabytes", 12.0, claim="intro.corpus-size")
    with pytest.raises(KeyError, match="unknown claim"):
        records.record("corpus_megabytes", 12.0, claim="intro.nope")
    with pytest.raises(ValueError, match="decided by the record 'corpus_megabytes'"):
        records.record("other_name", 12.0, claim="intro.corpus-size")
    result = claims.evaluate(get_claim("intro.corpus-size"), records.load_records("intro", rec_dir))
    assert result.status == "pass" and result.value == 12.0


def test_checks_decide_both_ways():
    assert claims.close(1.0, atol=1e-10).decide(1.0 + 1e-12)
    assert not claims.close(1.0, atol=1e-10).decide(1.0 + 1e-8)
    assert claims.close(100.0, rtol=0.01).decide(100.9) and not claims.close(100.0, rtol=0.01).decide(102)
    assert claims.at_most(2).decide(2) and not claims.at_most(2).decide(2.1)
    assert claims.at_least(2).decide(2) and not claims.at_least(2).decide(1.9)
    assert claims.between(0, 1).decide(0.5) and not claims.between(0, 1).decide(1.5)
    assert claims.equals(0).decide(0) and not claims.equals(0).decide(1)
    for check in (claims.close(0, 1), claims.at_most(1), claims.between(0, 1)):
        assert not check.decide(None) and not check.decide("0.5") and not check.decide(float("nan"))


def test_declared_claims_are_consistent():
    ids = [c.id for c in all_claims()]
    assert len(ids) == len(set(ids)) >= 60  # the claims of the chapters that have landed
    for c in all_claims():
        assert c.chapter in chapters(), c.id
        assert c.id.startswith(c.chapter + "."), c.id
        assert c.statement and c.source and c.record
        assert "issue" not in c.source.lower(), c.id  # sources cite the papers or the book, not the tracker
    assert claims.evaluate(all_claims()[0], None).status == "not run"


def _claim(kind, check=None):
    return claims.Claim("x.c", "x", "s", "src", "r", check or claims.at_least(0.5), None, kind)


def _rec(value):
    return {"values": {"r": {"value": value}}}


def test_claim_kinds_decide_and_gate():
    """A claim that must hold (or a consistency check) fails the tests when its check fails; a
    finding's verdict never does, but a missing or non-finite value does."""
    for kind in ("must_hold", "consistency"):
        assert claims.evaluate(_claim(kind), _rec(0.7)).status == "pass"
        failed = claims.evaluate(_claim(kind), _rec(0.3))
        assert failed.status == "fail" and not failed.ok
        assert claims.evaluate(_claim(kind), {"values": {}}).status == "not run"
    finding = _claim("finding")
    yes, no = claims.evaluate(finding, _rec(0.7)), claims.evaluate(finding, _rec(0.3))
    assert (yes.status, no.status) == (claims.REPRODUCES, claims.NOT_REPRODUCED) and yes.ok and no.ok
    for bad in (float("nan"), float("inf"), None):
        invalid = claims.evaluate(finding, _rec(bad))
        assert invalid.status == "invalid" and not invalid.ok
    assert not claims.evaluate(finding, {"values": {}}).ok
    assert claims.evaluate(finding, None).status == "not run" and not claims.evaluate(finding, None).ok
    with pytest.raises(ValueError, match="kind must be one of"):
        _claim("finding?")


def test_a_verdict_in_words_for_the_prose():
    """verdict_words: the claim's check decides "reproduces" or "does not reproduce here", word for word what
    the Examples and Logit rank chapters print; a reason to decide nothing gives the undecided words."""
    finding = _claim("finding")  # at_least 0.5
    assert claims.verdict_words(finding, 0.7) == "reproduces" == claims.REPRODUCES
    assert claims.verdict_words(finding, 0.5) == "reproduces"
    assert claims.verdict_words(finding, 0.3) == "does not reproduce here" == claims.NOT_REPRODUCED
    for bad in (None, float("nan"), "0.7"):  # only the check decides: what it cannot read does not reproduce
        assert claims.verdict_words(finding, bad) == "does not reproduce here"
    assert claims.verdict_words(finding, 0.7, "too few cases") == "undecided at these settings" == claims.UNDECIDED
    assert claims.verdict_words(finding, 0.3, "s.e. too large", undecided_words="undecided at this scale") == \
        "undecided at this scale"
    assert claims.verdict_words(finding, 0.3, "", undecided_words="undecided at this scale") == \
        "does not reproduce here"  # an empty reason is no reason, as in the chapters' `if undecided:`
    exact = claims.Claim("t.n", "t", "s", "src", "n", claims.equals(3), kind="finding")
    assert [claims.verdict_words(exact, v) for v in (3, 4)] == ["reproduces", "does not reproduce here"]
    from lib.book import verdict_words
    assert verdict_words is claims.verdict_words


def test_report_counts_and_lists_problems_first():
    from lib.book import report

    results = [claims.evaluate(_claim("must_hold"), _rec(v)) for v in (0.7, 0.3)]
    results.append(claims.evaluate(_claim("finding"), _rec(0.3)))
    by = report.counts(results)
    assert by["must_hold"] == {"pass": 1, "fail": 1, claims.UNDECIDED: 0, claims.INCOMPLETE: 0, "not run": 0}
    assert by["finding"][claims.NOT_REPRODUCED] == 1 and sum(by["consistency"].values()) == 0
    table = report.markdown_table(results, {}, "must_hold").splitlines()
    assert table[:2] == [":::{table}", ":class: claims-table"] and table[-1] == ":::"
    rows = [line for line in table if line.startswith("| ") and not line.startswith("| verdict")]
    assert len(rows) == 2 and rows[0].startswith("| **fail**") and rows[1].startswith("| pass")
    assert "does not reproduce here" in report.markdown_table(results, {}, "finding")


def test_checks_read_from_declarations():
    assert claims.Check.from_declaration({"at_most": 1e-10}) == claims.at_most(1e-10)
    assert claims.Check.from_declaration({"between": [0.8, 1.25]}) == claims.between(0.8, 1.25)
    assert claims.Check.from_declaration({"close": 1.0, "atol": 1e-9}) == claims.close(1.0, atol=1e-9)
    assert claims.Check.from_declaration({"equals": "x"}) == claims.equals("x")
    for bad in ({"at_most": "1e-10"}, {"at_most": 1, "at_least": 0}, {"between": [1]}, {"below": 1},
                {"at_least": 0.5, "atol": 1}, [1, 2], {"at_most": float("nan")}):
        with pytest.raises(ValueError):
            claims.Check.from_declaration(bad)


def test_every_chapter_spec_is_a_page_of_the_book():
    """A spec (and so any claim) whose page is missing from _toc.yml would be 'not run' forever
    and its report link would break the -W build."""
    from lib.book.pages import source_path, toc_files

    pages = set(toc_files())
    for chapter in chapters().values():
        page = chapter.path.rsplit(".", 1)[0]
        assert page in pages, f"{chapter.id}: {page} is not listed in _toc.yml"
        assert source_path(page).name == chapter.path.rsplit("/", 1)[-1]


def test_figures_are_rendered_to_png_whatever_the_backend():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = records.figure_png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    records.show_figure("f", fig)  # outside a kernel: only closes the figure
    assert not plt.fignum_exists(fig.number)


def test_labels_are_unique_across_the_book():
    """Sphinx labels (figure/table ``:name:`` and ``(label)=`` targets) live in one namespace for
    the whole book: a label used by two chapters is a warning, and the -W build fails on it."""
    import re

    from lib.book.pages import source_path, toc_files

    seen: dict[str, str] = {}
    for page in toc_files():
        text = source_path(page).read_text(encoding="utf-8")
        labels = re.findall(r"^:name:\s*(\S+)\s*$", text, re.M) + re.findall(r"^\(([^)\s]+)\)=\s*$", text, re.M)
        for label in labels:
            assert label not in seen, f"label {label!r} is defined in both {seen[label]} and {page}"
            seen[label] = page


def test_every_claim_links_to_the_section_that_measures_it():
    """Each claim's link names its chapter's file and the heading above the cell that records it."""
    from lib.book import report
    from lib.book.chapters import chapters, claim_sections, heading_slug

    links = report.claim_links(built_from_notebooks=True)
    every = [c for ch in chapters().values() for c in ch.claims]
    assert {c.id for c in every} == set(links), "a claim whose record is written in no code cell has no link"
    modes = chapters()["modes"]
    sections = claim_sections(modes)
    title, slug = sections["modes.planted-sigma"]
    assert title.startswith("Planted bigrams") and slug == heading_slug(title)
    assert links["modes.planted-sigma"].endswith(f"(/chapters/modes.ipynb#{slug})")
    assert report.claim_links(built_from_notebooks=False)["modes.planted-sigma"].endswith(f"(/chapters/modes.md#{slug})")
    assert heading_slug("Theorem 4.3, first direction: an ISAN") == "theorem-43-first-direction-an-isan"
    # as MyST computes it: maths left out, a repeated heading numbered
    assert heading_slug("Is $w^*$ critical?") == "is--critical" and heading_slug("Spectra", ["spectra"]) == "spectra-1"


def test_claim_sections_follow_the_heading_above_the_record(tmp_path, monkeypatch):
    """Moving a record under another heading moves its link; a record written nowhere has none."""
    from lib.book import chapters as chapters_mod
    from lib.book.claims import Check, Claim

    nb = tmp_path / "toy.md"
    nb.write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
                  "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n# Toy\n\n## First\n\n"
                  "```{code-cell} ipython3\nrecord('a', 1, claim='toy.a')\n```\n\n## Second part\n\n"
                  "```{code-cell} ipython3\nfor i in range(2):\n    record(f'b_{i}', i)\n```\n")
    monkeypatch.setattr(chapters_mod, "REPO_ROOT", tmp_path)
    claim = lambda cid, rec: Claim(cid, "toy", "s", "src", rec, Check.from_declaration({"at_most": 1}))  # noqa: E731
    toy = chapters_mod.Chapter(id="toy", path="toy.md", declaration="toy.yml", title="Toy", budget_ci_s=1,
                               params=(), presets={}, claims=(claim("toy.a", "a"), claim("toy.b", "b_1"),
                                                              claim("toy.c", "c")), constraints=())
    found = chapters_mod.claim_sections(toy)
    assert found == {"toy.a": ("First", "first"), "toy.b": ("Second part", "second-part")}


def test_every_check_both_ways_at_its_boundary():
    """Each check on either side of its boundary; close() measures its tolerance against the target."""
    eps = 1e-9
    assert claims.close(100.0, rtol=0.5).decide(150.0) and not claims.close(100.0, rtol=0.5).decide(150.0 + eps)
    assert claims.close(100.0, rtol=0.5).decide(50.0) and not claims.close(100.0, rtol=0.5).decide(50.0 - eps)
    # against the value instead, 190 would pass (|90| ≤ 0.5·190) and 60 would fail (|40| > 0.5·60)
    assert not claims.close(100.0, rtol=0.5).decide(190.0) and claims.close(100.0, rtol=0.5).decide(60.0)
    assert claims.close(-2.0, rtol=0.25).decide(-1.5) and not claims.close(-2.0, rtol=0.25).decide(-1.5 + 1e-6)
    assert claims.close(0.0, atol=0.1).decide(-0.1) and not claims.close(0.0, atol=0.1).decide(0.1 + eps)
    assert claims.close(1.0, atol=0.1, rtol=0.1).decide(1.2 - eps) and not claims.close(1.0, atol=0.1, rtol=0.1).decide(1.2 + 1e-6)
    assert claims.at_most(0.05).decide(0.05) and not claims.at_most(0.05).decide(0.05 + eps)
    assert claims.at_most(-1).decide(-1.5) and not claims.at_most(-1).decide(-0.5)
    assert claims.at_least(3).decide(3) and not claims.at_least(3).decide(3 - eps)
    assert claims.between(0.8, 1.25).decide(0.8) and claims.between(0.8, 1.25).decide(1.25)
    assert not claims.between(0.8, 1.25).decide(0.8 - eps) and not claims.between(0.8, 1.25).decide(1.25 + eps)
    assert claims.equals("reproduces").decide("reproduces") and not claims.equals("reproduces").decide("reproduce")
    assert claims.equals([1, 2]).decide([1, 2]) and not claims.equals([1, 2]).decide([2, 1])
    for check in (claims.at_least(0), claims.at_most(1), claims.close(0, 1)):
        assert not check.decide(True)  # a boolean is not a number here


def test_record_keeps_standard_errors_timing_and_undecided(rec_dir):
    records.record("llc_hat", 6.2, se=0.3)
    records.record("spectrum", [1.0, 0.5], se=[0.1, 0.05])
    records.record("run_s", 12.5, timing=True)
    records.record("corpus_megabytes", None, claim="intro.corpus-size", undecided="no corpus at these settings")
    values = json.loads((rec_dir / "intro.json").read_text())["values"]
    assert values["llc_hat"] == {"value": 6.2, "se": 0.3}
    assert values["spectrum"]["se"] == [0.1, 0.05] and values["run_s"]["timing"] is True
    assert values["corpus_megabytes"]["undecided"] == "no corpus at these settings"
    for bad in (-1.0, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="se is a finite number"):
            records.record("x", 1.0, se=bad)
    with pytest.raises(ValueError, match="one finite number >= 0 per item"):
        records.record("x", [1.0, 2.0], se=[0.1])
    with pytest.raises(ValueError, match="undecided takes the reason"):
        records.record("x", None, undecided="  ")


def test_undecided_is_a_verdict_of_any_kind_and_not_a_failure():
    entry = {"values": {"r": {"value": None, "undecided": "no case where 3 s.e. < 5% of λ"}}}
    for kind in ("must_hold", "consistency", "finding"):
        result = claims.evaluate(_claim(kind), entry)
        assert result.status == claims.UNDECIDED == "undecided at these settings"
        assert result.reason == "no case where 3 s.e. < 5% of λ" and result.ok and not result.decided
    decided = claims.evaluate(_claim("must_hold"), _rec(0.7))
    assert decided.decided and decided.reason is None


def test_an_incomplete_run_counts_no_claim():
    entry = {"values": {"r": {"value": 0.7}}, "meta": {"incomplete": "interrupted in § Modes"}}
    for kind in ("must_hold", "finding"):
        result = claims.evaluate(_claim(kind), entry)
        assert result.status == claims.INCOMPLETE and not result.ok and "interrupted" in result.reason


def test_a_runner_record_starts_incomplete(tmp_path, monkeypatch):
    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    monkeypatch.setenv(records.RUNNER_ENV, "1")
    records.start("intro", {"profile": "ci"})
    records.record("a", 1)
    meta = json.loads((tmp_path / "intro.json").read_text())["meta"]
    assert meta["incomplete"] == records.RUNNING and meta["last_record"] == "a"
    monkeypatch.delenv(records.RUNNER_ENV)
    records.start("intro", {"profile": "ci"})  # papermill or a reader's own kernel: no runner to finish it
    assert "incomplete" not in json.loads((tmp_path / "intro.json").read_text())["meta"]


def test_show_figure_keeps_the_png_beside_the_record(rec_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    records.show_figure("fig_line", fig)
    png = rec_dir / "figures" / "intro" / "fig_line.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records.start("intro", {"profile": "ci"})  # a new run starts without the last run's figures
    assert not png.exists()


def test_report_seeds_table_and_stability(tmp_path):
    from lib.book import report

    assert report.stability(["pass"] * 5) == "5/5 pass"
    assert report.stability(["pass", "fail", "pass"]) == "2/3 pass, 1/3 fail"
    claim = get_claim("intro.corpus-size")
    for seed, value in ((0, 12.0), (1, 12.0), (2, 0.001)):
        folder = tmp_path / f"seed-{seed}" / "records"
        folder.mkdir(parents=True)
        (folder / "intro.json").write_text(json.dumps({"values": {claim.record: {"value": value}},
                                                       "meta": {"profile": "ci"}}))
    assert list(report.seed_folders(tmp_path)) == [0, 1, 2]
    rows = report.seeds_table(report.collect_seeds(tmp_path))
    (row,) = [r for r in rows if r["claim"] == claim.id]
    expected = [claims.evaluate(claim, {"values": {claim.record: {"value": v}}}).status for v in (12.0, 12.0, 0.001)]
    assert row["stability"] == report.stability(expected) and row["stable"] == (len(set(expected)) == 1)
    assert all(r["claim"].startswith("intro.") for r in rows)  # chapters that did not run are left out
    assert "| claim | kind | seed 0 | seed 1 | seed 2 | stability |" in report.seeds_markdown(rows)
