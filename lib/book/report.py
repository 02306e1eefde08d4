"""The reproduction report: every registered claim, decided from the executed chapters' records.

Nothing here is typed by hand: the rows come from the chapters' declarations
(:func:`lib.book.chapters.all_claims`), the values from ``_build/records/<chapter>.json``, the
verdicts from :func:`lib.book.claims.evaluate`. Another records folder (a run with ``--out``) is
read with ``lowrank-book report --records DIR`` or the report chapter's ``records_dir``.

Two comparisons, in two vocabularies that are never mixed: a finding's verdict compares our value with
the *paper's* ("reproduces", "does not reproduce here", "undecided at these settings"), and the run's
recorded values and figures are compared with the book's own *pinned run* (``reference/ci``, what
``lowrank-book diff`` compares a rerun with): each is the "same as the pinned run" or "differs from the
pinned run". :func:`count_words` puts every count with its noun and verb in agreement.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import tables
from .chapters import all_claims, chapters, claim_sections
from .claims import INCOMPLETE, KINDS, NOT_REPRODUCED, REPRODUCES, UNDECIDED, Result, evaluate
from .records import RECORDS_ENV, load_records, records_dir
from .reference import REFERENCE_DIR, ReferenceError, compare


def records_folder(directory: Path | str | None = None) -> Path:
    """The records folder to read: ``directory`` (or, given a ``lowrank-book run --out DIR`` folder, its
    ``records/``), else the book's (``$BOOK_RECORDS_DIR`` or ``_build/records``).

    Raises FileNotFoundError for a given folder that does not exist, rather than reporting
    every claim "not run".
    """
    if not directory:
        return records_dir()
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"records folder {str(directory)!r} does not exist (a `lowrank-book run --out DIR` "
                                f"writes its records to DIR/records; the book's are in {records_dir()})")
    if not any(directory.glob("*.json")) and (directory / "records").is_dir():
        return directory / "records"
    return directory


def collect(directory: Path | None = None) -> tuple[list[Result], dict[str, dict]]:
    """Every claim's result and the metadata of each chapter's run (records from :func:`records_folder`)."""
    directory = records_folder(directory)
    claims = all_claims()
    records = {chapter: load_records(chapter, directory) for chapter in {c.chapter for c in claims}}
    results = [evaluate(c, records[c.chapter]) for c in claims]
    meta = {ch: rec["meta"] for ch, rec in records.items() if rec is not None}
    return results, meta


SEED_FOLDER = "seed-{seed}"  # `lowrank-book run --seeds`: one records folder per seed under the output folder


def seed_folders(directory: Path | str) -> dict[int, Path]:
    """The per-seed records folders of a ``run --seeds`` output (``seed-<k>/records`` or ``seed-<k>``), by seed."""
    found = {}
    for sub in Path(directory).expanduser().glob("seed-*"):
        tail = sub.name[len("seed-"):]
        if sub.is_dir() and tail.isdigit():
            found[int(tail)] = sub / "records" if (sub / "records").is_dir() else sub
    return dict(sorted(found.items()))


def collect_seeds(directory: Path | str) -> dict[int, list[Result]]:
    """Each seed's results (see :func:`seed_folders`), the claims of the chapters that ran at every seed."""
    folders = seed_folders(directory)
    if not folders:
        raise FileNotFoundError(f"{str(directory)!r} holds no seed-<k> folders (`lowrank-book run CHAPTER --seeds "
                                "0,1,2` writes them)")
    return {seed: collect(folder)[0] for seed, folder in folders.items()}


def stability(statuses: list[str]) -> str:
    """How a claim's verdict holds over seeds: ``5/5 pass``, or the counts of each verdict (most common first)."""
    n = len(statuses)
    by = {}
    for status in statuses:
        by[status] = by.get(status, 0) + 1
    return ", ".join(f"{k}/{n} {v}" for v, k in sorted(by.items(), key=lambda vk: -vk[1]))


def seeds_table(per_seed: dict[int, list[Result]]) -> list[dict]:
    """One row per claim whose chapter ran: its kind, verdict and value at every seed, and its stability."""
    seeds = list(per_seed)
    rows = []
    for i, first in enumerate(per_seed[seeds[0]]):
        results = [per_seed[s][i] for s in seeds]
        if all(r.status == "not run" for r in results):
            continue
        row = {"claim": first.claim.id, "kind": first.claim.kind}
        for seed, r in zip(seeds, results):
            row[f"seed {seed}"] = f"{r.status} ({_fmt(r.value)})"
        row["stability"] = stability([r.status for r in results])
        row["stable"] = len({r.status for r in results}) == 1
        rows.append(row)
    return rows


def seeds_markdown(rows: list[dict]) -> str:
    """The seeds table as Markdown: every must-hold and consistency claim, then the findings
    (those whose verdict changes between seeds named first)."""
    if not rows:
        return "(no claims of the chapters that ran)"
    headers = [h for h in rows[0] if h != "stable"]
    order = sorted(rows, key=lambda r: (r["kind"] == "finding", r["stable"]))
    return tables.markdown_table(headers, [[r[h] for h in headers] for r in order])


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"  # short enough for its column: a number is never broken across lines
    return str(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


KIND_TITLES = {"must_hold": "Must hold", "consistency": "Consistency checks",
               "finding": "The papers' empirical findings"}
VERDICTS = {"must_hold": ("pass", "fail", UNDECIDED, INCOMPLETE, "not run"),
            "consistency": ("pass", "fail", UNDECIDED, INCOMPLETE, "not run"),
            "finding": (REPRODUCES, NOT_REPRODUCED, UNDECIDED, "invalid", INCOMPLETE, "not run")}


def counts(results: list[Result]) -> dict[str, dict[str, int]]:
    """Verdict counts per kind of claim: ``{kind: {verdict: n}}`` (every verdict of the kind listed)."""
    return {kind: {v: sum(r.claim.kind == kind and r.status == v for r in results) for v in VERDICTS[kind]}
            for kind in KINDS}


def claim_links(built_from_notebooks: bool | None = None) -> dict[str, str]:
    """A MyST link per claim to the section of its chapter where its value is measured.

    The link names the chapter's source file, which is the executed notebook
    (``.ipynb``) when the book is built by ``lowrank-book`` (whose runner sets
    ``$BOOK_RECORDS_DIR``), and the chapter's own source when Jupyter Book executes the
    sources itself. Anchors are MyST heading anchors, so a wrong one fails the build.
    """
    if built_from_notebooks is None:
        built_from_notebooks = bool(os.environ.get(RECORDS_ENV))
    links = {}
    for chapter in chapters().values():
        page = chapter.path.rsplit(".", 1)[0]
        target = f"/{page}" + (".ipynb" if built_from_notebooks else "." + chapter.path.rsplit(".", 1)[1])
        for claim_id, (title, slug) in claim_sections(chapter).items():
            links[claim_id] = f"[{chapter.title} § {_cell(title).replace('[', '(').replace(']', ')')}]({target}#{slug})"
    return links


# Two vocabularies, never mixed. A finding's verdict compares our value with the *paper's*: "reproduces",
# "does not reproduce here", "undecided at these settings" (lib.book.claims). A recorded value compared with
# the book's own *pinned run* (reference/ci, what `lowrank-book diff` compares a rerun with) is the same
# as the pinned run's or differs from it.
PINNED_SAME, PINNED_DIFFERS = "same", "differs"  # the claims tables' cells, under PINNED_HEADER
PINNED_HEADER = "pinned run"  # the claims tables' column: "same" (as the pinned run) or "differs" (from it)

NOUNS = {"must_hold": ("claim that must hold", "claims that must hold"),
         "consistency": ("consistency check", "consistency checks"),
         "finding": ("finding", "findings")}
VERBS = {"pass": ("passes", "pass"), "fail": ("fails", "fail"),
         REPRODUCES: ("reproduces", "reproduce"),
         NOT_REPRODUCED: ("does not reproduce here", "do not reproduce here"),
         UNDECIDED: ("is undecided at these settings", "are undecided at these settings"),
         "invalid": ("is invalid", "are invalid"), INCOMPLETE: ("is incomplete", "are incomplete"),
         "not run": ("is not run", "are not run"),
         PINNED_SAME: ("is the same as in the pinned run", "are the same as in the pinned run"),
         PINNED_DIFFERS: ("differs from the pinned run", "differ from the pinned run")}


def count_words(n: int, verdict: str, kind: str | None = None) -> str:
    """A count with its noun and verb in agreement: ``count_words(5, NOT_REPRODUCED, "finding")`` is "5 findings
    do not reproduce here", with 1 "1 finding does not reproduce here", with 0 "0 findings do not reproduce
    here" (plural, as English counts zero). Without ``kind`` the noun is left out, for a list under a noun
    already said ("of the 44 findings, 34 reproduce, 1 does not reproduce here"). ``verdict`` is one of
    :data:`VERBS` (the verdicts of :data:`VERDICTS`, and :data:`PINNED_SAME` / :data:`PINNED_DIFFERS`);
    ``kind`` one of :data:`NOUNS`."""
    one = n == 1
    noun = "" if kind is None else " " + NOUNS[kind][0 if one else 1]
    return f"{n}{noun} {VERBS[verdict][0 if one else 1]}"


def counted(n: int, kind: str) -> str:
    """A count and its noun: "1 finding", "44 findings", "0 consistency checks"."""
    return f"{n} {NOUNS[kind][0 if n == 1 else 1]}"


def series(items: list[str]) -> str:
    """Items joined as prose: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def tally(by_kind: dict[str, dict[str, int]]) -> str:
    """Verdict counts (:func:`counts`) as one line of prose, each kind named and each verdict's verb in
    agreement with its count, zero counts left out: "74 claims that must hold pass; 26 consistency checks
    pass; of 44 findings, 34 reproduce, 5 do not reproduce here and 5 are undecided at these settings"."""
    parts = []
    for kind, by in by_kind.items():
        shown = [(v, n) for v, n in by.items() if n]
        if not shown:
            continue
        if len(shown) == 1:
            parts.append(count_words(shown[0][1], shown[0][0], kind))
        else:
            parts.append(f"of {counted(sum(by.values()), kind)}, " + series([count_words(n, v) for v, n in shown]))
    return "; ".join(parts) or "no claims"


def against_reference(directory: Path | str | None = None, exclude: tuple[str, ...] = ("report",)
                      ) -> tuple[Any, str | None]:
    """The run's records compared with the book's pinned run (:func:`lib.book.reference.compare`, the
    reference/ci folder), the report itself left out (its record is being written as it compares):
    (comparison, None), or (None, why they cannot be compared)."""
    try:
        return compare(records_folder(directory), REFERENCE_DIR, exclude=exclude), None
    except (ReferenceError, FileNotFoundError) as err:
        return None, str(err)


def pinned(results: list[Result], comparison) -> dict[str, str]:
    """Per claim: whether its recorded value is the same as the pinned run's (:data:`PINNED_SAME`) or differs
    from it (:data:`PINNED_DIFFERS`); claims not compared are left out (no pinned run of this profile, a
    chapter that did not run, a timing). This says nothing about the paper: that is the claim's verdict."""
    if comparison is None:
        return {}
    out = {}
    for r in results:
        if r.status in ("not run", INCOMPLETE) or r.claim.chapter in comparison.not_run:
            continue
        out[r.claim.id] = PINNED_DIFFERS if comparison.moved(r.claim.chapter, r.claim.record) else PINNED_SAME
    return out


def pinned_folder() -> str:
    """The pinned run's folder as the reader knows it (``reference/ci``)."""
    return f"{REFERENCE_DIR.parent.name}/{REFERENCE_DIR.name}"


def pinned_summary(comparison, claims: tuple[int, int] | None = None) -> str:
    """One sentence: how many recorded numbers and figures are the same as in the book's pinned run (and
    ``claims``, (same, compared), how many claims' values are among them), then how many differ."""
    if comparison is None:
        return "not compared with the pinned run"
    values = comparison.values - sum(d.what.startswith("record ") for d in comparison.differences)
    figures = comparison.figures - comparison.figures_differing
    text = (f"{values:,} of {comparison.values:,} recorded {'number' if comparison.values == 1 else 'numbers'} and "
            f"{figures} of {comparison.figures} {'figure' if comparison.figures == 1 else 'figures'} are the same as "
            f"in the book's pinned run ({pinned_folder()})")
    if claims is not None:
        text += f", the values of {claims[0]} of {claims[1]} {'claim' if claims[1] == 1 else 'claims'} among them"
    if comparison.differences:
        text += f"; {count_words(len(comparison.differences), PINNED_DIFFERS)} (`lowrank-book diff` lists each)"
    return text


def headline(results: list[Result], comparison, not_compared: str | None = None, *, markdown: bool = False
             ) -> list[str]:
    """The report's headline, one sentence per comparison, kept apart: the papers' findings against the
    papers, the book's own checks, and the run against the book's pinned run (numbers, figures, claims).
    ``markdown`` sets each sentence's lead ("Against the papers") in bold, for the report's page."""
    by = counts(results)

    def part(kind: str) -> str | None:
        shown = [count_words(n, v) for v, n in by[kind].items() if n]
        return f"of the {counted(sum(by[kind].values()), kind)}, {series(shown)}" if shown else None

    lines = []
    if part("finding"):
        lines.append(f"Against the papers: {part('finding')}")
    checks = [p for p in (part("must_hold"), part("consistency")) if p]
    if checks:
        lines.append("The book's checks: " + "; ".join(checks))
    if comparison is None:
        lines.append(f"Against the pinned run: not compared ({not_compared or 'no comparison'})")
    else:
        marks = list(pinned(results, comparison).values())
        lines.append(f"Against the pinned run: {pinned_summary(comparison, (marks.count(PINNED_SAME), len(marks)))}")
    if markdown:
        lines = ["**{}**:{}".format(*line.split(":", 1)) for line in lines]
    return [line + "." for line in lines]


def markdown_table(results: list[Result], chapter_docs: dict[str, str], kind: str | None = None,
                   links: dict[str, str] | None = None, pinned_values: dict[str, str] | None = None) -> str:
    """A MyST table (a ``table`` directive of class ``claims-table``) that fits the page, verdict first:
    the verdict (for a finding, against the paper), the claim (statement, source, id and the check that
    decides it), ours, the paper's value, whether our recorded value is the same as the pinned run's
    (``pinned_values``, from :func:`pinned`: "same" or "differs"; nothing to do with the paper), and where
    it is measured (``links``: a link to the chapter's section, else ``chapter_docs``: the chapter's page).

    ``kind`` keeps the claims of one kind; in each chapter (reading order), problems are listed first.
    """
    order = {c: i for i, c in enumerate(chapters())}
    rows = [r for r in results if kind is None or r.claim.kind == kind]
    rows.sort(key=lambda r: (order.get(r.claim.chapter, len(order)), r.ok))  # stable: problems first
    verdict_header = "verdict against the paper" if kind == "finding" else "verdict"
    lines = [":::{table}", ":class: claims-table", "",  # fits the page: _static/book.css sets its column widths
             f"| {verdict_header} | claim | ours | paper | {PINNED_HEADER} | measured in |",
             "|---|---|---|---|---|---|"]
    links, pinned_values = links or {}, pinned_values or {}
    for r in rows:
        c = r.claim
        doc = chapter_docs.get(c.chapter)
        where = links.get(c.id) or (f"{{doc}}`{c.chapter} <{doc}>`" if doc else c.chapter)
        verdict = f"**{r.status}**" if not r.ok else r.status
        why = f" ({_cell(r.reason)})" if r.reason and r.status == UNDECIDED else ""
        claim = f"{c.statement} ({breakable(c.source)}) <br>`{c.id}`: {c.check.describe()}"
        mark = pinned_values.get(c.id, "—")
        lines.append("| " + " | ".join(_cell(x) for x in (
            verdict + why, claim, _fmt(r.value), c.paper_value or "—",
            f"**{mark}**" if mark == PINNED_DIFFERS else mark, where)) + " |")
    return "\n".join(lines + [":::"])


def breakable(source: str) -> str:
    """A claim's source with a line-break opportunity (``<wbr>``) after each dot or underscore of a dotted
    name (``lib.isan.rarebranchisan``), so that a long name wraps in the report's narrow column; a source
    holding code or maths is left as it is."""
    if "`" in source or "$" in source:
        return source
    return re.sub(r"(?<=[A-Za-z0-9][._])(?=[A-Za-z])", "<wbr>", source)


KIND_ANCHORS = {"must_hold": "must-hold", "consistency": "consistency-checks", "finding": "the-papers-empirical-findings"}


# The summary table fits a phone: a 360 px window less sphinx-book-theme's 1 rem of article padding on
# each side (below its md breakpoint), measured as lib.book.tables.min_width measures every table.
PHONE_COLUMN_PX = 328
CHECK_KINDS = ("must_hold", "consistency")  # the book's own checks: they gate the tests


def _of(good: int, total: int, strong: bool) -> str:
    text = f"{good} of {total}"
    return f"**{text}**" if strong and good < total else text


def summary_table(results: list[Result], pinned_values: dict[str, str] | None = None) -> str:
    """Counts per chapter (reading order), with a total row, in four columns narrow enough for a phone
    (:data:`PHONE_COLUMN_PX`): the book's checks (must hold and consistency) that pass, the findings that
    reproduce the paper's, and the claims whose recorded value is the same as the pinned run's. Each
    count links to its table; a shortfall in the checks or against the pinned run is bold (a finding
    that does not reproduce is a result, not a fault). A chapter that did not run says so."""
    pinned_values = pinned_values or {}
    by_chapter = {cid: [r for r in results if r.claim.chapter == cid] for cid in chapters()}
    by_chapter = {cid: rs for cid, rs in by_chapter.items() if rs}

    def row(title: str, rs: list[Result]) -> list[str]:
        if all(r.status in ("not run", INCOMPLETE) for r in rs):
            status = "not run" if all(r.status == "not run" for r in rs) else "in&shy;com&shy;plete"
            return [title, status, status, "—"]
        checks = [r for r in rs if r.claim.kind in CHECK_KINDS]
        findings = [r for r in rs if r.claim.kind == "finding"]
        # the link goes to the table of the first kind with a check that did not pass, else the first kind
        target = next((k for k in CHECK_KINDS if any(r.claim.kind == k and r.status != "pass" for r in checks)),
                      next(k for k in CHECK_KINDS if any(r.claim.kind == k for r in checks)) if checks else None)
        check_cell = (f"[{_of(sum(r.status == 'pass' for r in checks), len(checks), True)}](#{KIND_ANCHORS[target]})"
                      if checks else "—")
        finding_cell = (f"[{_of(sum(r.status == REPRODUCES for r in findings), len(findings), False)}]"
                        f"(#{KIND_ANCHORS['finding']})" if findings else "—")
        marks = [pinned_values[r.claim.id] for r in rs if r.claim.id in pinned_values]
        pinned_cell = _of(marks.count(PINNED_SAME), len(marks), True) if marks else "—"
        return [title, check_cell, finding_cell, pinned_cell]

    lines = ["| chapter | checks pass | find&shy;ings re&shy;pro&shy;duce | same as the pin&shy;ned run |",
             "|---|---|---|---|"]
    for cid, rs in by_chapter.items():
        lines.append("| " + " | ".join(row(_cell(chapters()[cid].title), rs)) + " |")
    lines.append("| " + " | ".join(row("**all chapters**", results)) + " |")
    return "\n".join([":::{table}", ":class: summary-table", ""] + lines + [":::"])


def runs_table(meta: dict[str, dict]) -> str:
    """One row per executed chapter: profile, seed, device, wall time against the ci budget, when it finished
    (the package versions, the same for every chapter of a run, are in :func:`versions_line`)."""
    lines = ["| chapter | profile | seed | device | wall time (s) | ci budget (s) | finished |",
             "|---|---|---|---|---|---|---|"]
    for chapter, m in sorted(meta.items()):
        lines.append("| " + " | ".join(_cell(x) for x in (
            chapter, m.get("profile"), m.get("seed"), m.get("device"), _fmt(m.get("wall_s")),
            m.get("budget_ci_s"), str(m.get("finished", "—"))[:10])) + " |")
    return "\n".join(lines)


def versions_line(meta: dict[str, dict]) -> str:
    """The package versions the chapters ran with, once (each distinct set, if they differ)."""
    seen = []
    for m in meta.values():
        v = m.get("versions") or {}
        text = ", ".join(f"{k} {v[k]}" for k in sorted(v))
        if text and text not in seen:
            seen.append(text)
    return "; ".join(seen) or "—"
