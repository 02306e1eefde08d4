"""Execute every chapter of _toc.yml in the ci profile, decide every claim, build the book.

These tests are the slow part of `make test` (marked ``slow``). They run the chapters the
way a reader does, through ``python -m lib run`` (the ``lowrank-book`` command), and read the same records as the
reproduction report.
"""
import json
import os
import subprocess
import sys

import pytest

from lib import REPO_ROOT
from lib.book.chapters import all_claims
from lib.book.claims import evaluate
from lib.book.pages import HTML_DIR
from lib.book.records import load_records
from lib.book.runner import book_chapters

pytestmark = pytest.mark.slow
RECORDS = REPO_ROOT / "_build" / "records"
BOOK_JOBS = 2  # chapters at once (`run --jobs`): most cells keep one core busy, and CI has two


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "lib", "run", *args], cwd=REPO_ROOT, text=True,
                          env={**os.environ, **(env or {})}, timeout=3000)


@pytest.fixture(scope="module")
def executed_book():
    """Run every chapter (ci profile) and build the HTML once for this module."""
    for chapter in book_chapters():
        (RECORDS / f"{chapter.id}.json").unlink(missing_ok=True)
    proc = run_cli("--all", "--profile", "ci", "--build", "--jobs", str(BOOK_JOBS))
    assert proc.returncode == 0, "executing the chapters or building the book failed (see the output above)"
    return {c.id: load_records(c.id, RECORDS) for c in book_chapters()}


def test_every_chapter_ran_in_ci_profile_within_budget(executed_book):
    for chapter in book_chapters():
        rec = executed_book[chapter.id]
        assert rec is not None, chapter.id
        assert rec["meta"]["profile"] == "ci"
        # 2x slack for a loaded machine; the budget itself is declared in chapters/<chapter>.yml
        assert rec["meta"]["wall_s"] < 2 * chapter.budget_ci_s, (chapter.id, rec["meta"]["wall_s"])


CLAIMS = all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_holds(executed_book, claim):
    result = evaluate(claim, executed_book.get(claim.chapter))
    assert result.ok, f"{claim.id} ({claim.kind}, {result.status}): {claim.statement} — ours {result.value!r}, check {claim.check.describe()}"


def test_every_claim_that_must_hold_is_decided_in_ci(executed_book):
    """The ci profile decides every claim that must hold and every consistency check; a reader's own
    parameters may leave some "undecided at these settings", the book's own run may not."""
    undecided = [f"{c.id}: {r.reason}" for c in CLAIMS if c.kind != "finding"
                 for r in [evaluate(c, executed_book.get(c.chapter))] if not r.decided]
    assert not undecided, undecided


def test_numbers_and_figures_reproduce_the_published_reference(executed_book):
    """`lowrank-book diff`: every recorded value and figure of this run against reference/ci/, each within
    its declared tolerance. A number or figure that moves fails here with its name; updating the reference
    (`lowrank-book diff --accept`) is a deliberate commit."""
    proc = subprocess.run([sys.executable, "-m", "lib", "diff"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"the run differs from reference/ci (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"


TIME_LIKE = ("_s", "_seconds", "_per_s", "_per_second", "wall")


def test_wall_times_and_throughputs_are_marked_timing(executed_book):
    """A record named like a time or a rate (…_s, …_seconds, …_per_s, wall…) is marked ``timing=True``, so
    that no comparison with the reference ever reads the machine's speed as a result."""
    unmarked = [f"{ch}.{name}" for ch, rec in executed_book.items() for name, entry in rec["values"].items()
                if (name.endswith(TIME_LIKE) or name.startswith("wall")) and not entry.get("timing")]
    assert not unmarked, unmarked


def test_every_figure_is_legible_at_the_page_width(executed_book):
    """Every text of every figure is at least the body text's size as the page shows it
    (lib.book.figures: measured on the drawn PNG, recorded by show_figure)."""
    from lib.book.figures import BODY_PX

    seen = 0
    for chapter, rec in executed_book.items():
        for name, fig in rec["meta"].get("figures", {}).items():
            seen += 1
            assert fig["small"] == 0, f"{chapter}: figure {name!r} has {fig['small']} text(s) below {BODY_PX} px " \
                                      f"(smallest {fig['smallest_text']!r} at {fig['smallest_px']} px)"
    assert seen >= 30, f"only {seen} figures recorded"


def test_html_has_every_chapter_and_the_report(executed_book):
    assert (HTML_DIR / "index.html").is_file()
    intro = (HTML_DIR / "chapters" / "intro.html").read_text()
    assert "A miniature Pythia suite" in intro and "fig-training" in intro
    assert intro.count("<img") >= 2 and "&lt;Figure size" not in intro  # figures render as images
    assert "_static/book.css" in intro and (HTML_DIR / "_static" / "book.css").is_file()  # readable captions
    report = (HTML_DIR / "chapters" / "appendix" / "report.html").read_text()
    for claim in CLAIMS:
        assert claim.id in report, claim.id
    assert "not run</strong>" not in report and "<strong>fail</strong>" not in report
    assert 'href="../modes.html#' in report  # claims link to the section that measures them
    assert "<strong>invalid</strong>" not in report


def test_pages_load_nothing_from_the_network(executed_book):
    """Maths renders offline: MathJax is served from the build, and no page loads a script,
    a style sheet or an image from another host."""
    import re

    pages = sorted(HTML_DIR.rglob("*.html"))
    assert pages and (HTML_DIR / "_static" / "mathjax" / "tex-chtml.js").is_file()
    for page in pages:
        html = page.read_text()
        remote = re.findall(r'<(?:script|link|img)\b[^>]*(?:src|href)="((?:https?:)?//[^"]*)"', html)
        assert not remote, (page.name, remote)
        if "\\(" in html or "\\[" in html:  # a page with maths loads the local MathJax
            assert "_static/mathjax/tex-chtml.js" in html, page.name


def test_same_seed_same_numbers_from_a_fresh_cache(executed_book, tmp_path):
    """Determinism: the introduction rerun with an empty cache records identical values."""
    proc = run_cli("intro", "--out", str(tmp_path / "out"), env={"BOOK_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0
    again = json.loads((tmp_path / "out" / "records" / "intro.json").read_text())
    assert again["values"] == executed_book["intro"]["values"]


def test_pages_fit_the_column_and_show_no_stderr(executed_book):
    """What a reader sees fits the 756 px column: no stderr block, no printed line or table wider than the
    column in any executed chapter (lib.book.page_fit.page_problems), no display equation estimated wider than
    it (lib.book.page_fit.equation_problems)."""
    from lib.book.page_fit import equation_problems, page_problems

    problems = page_problems() + equation_problems()
    assert not problems, "\n".join(map(str, problems))
